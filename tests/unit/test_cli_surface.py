"""Guardrail: the public CLI (subcommands and their options) only changes on purpose.

The surface is frozen in ``tests/unit/cli_surface.json``. After an intended change, regenerate it
and review the diff:

    UPDATE_CLI_SURFACE=1 .venv/bin/python -m pytest -q tests/unit/test_cli_surface.py
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest

from mnmg_sampler.commands.cli import build_parser

SNAPSHOT = Path(__file__).with_name("cli_surface.json")


def _describe(action: argparse.Action) -> str:
    name = "/".join(action.option_strings) or action.dest
    if action.nargs == 0:
        kind = "flag"
    elif action.nargs is None:
        kind = "value"
    else:
        kind = f"nargs={action.nargs}"
    text = f"{name} {kind}"
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
        text += " {" + ",".join(map(str, action.choices)) + "}"
    if action.option_strings and action.required:
        text += " required"
    return text


def _options(parser: argparse.ArgumentParser) -> list[str]:
    return [_describe(a) for a in parser._actions
            if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))]


def _walk(prefix: str, parser: argparse.ArgumentParser, out: dict) -> None:
    out[prefix] = _options(parser)
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, child in sorted(a.choices.items()):
                _walk(f"{prefix} {name}".strip(), child, out)


def cli_surface() -> dict:
    """{"mnmg-sampler": top-level options, "commands": {"cmd [sub]": options}}, nested modes too."""
    parser = build_parser()
    commands: dict[str, list[str]] = {}
    _walk("", parser, commands)
    top = commands.pop("")
    return {"mnmg-sampler": top, "commands": dict(sorted(commands.items()))}


def test_cli_surface_matches_the_snapshot():
    current = cli_surface()
    if os.environ.get("UPDATE_CLI_SURFACE") == "1":
        SNAPSHOT.write_text(json.dumps(current, indent=2) + "\n")
        pytest.skip(f"wrote {SNAPSHOT.name}; review and commit the diff")
    frozen = json.loads(SNAPSHOT.read_text())
    fix = ("if the change is intended, run: UPDATE_CLI_SURFACE=1 .venv/bin/python -m pytest -q "
           "tests/unit/test_cli_surface.py")
    added = sorted(set(current["commands"]) - set(frozen["commands"]))
    removed = sorted(set(frozen["commands"]) - set(current["commands"]))
    assert not (added or removed), f"subcommands added {added}, removed {removed}; {fix}"
    assert current["mnmg-sampler"] == frozen["mnmg-sampler"], f"top-level options changed; {fix}"
    for name, options in frozen["commands"].items():
        assert current["commands"][name] == options, f"options of '{name}' changed; {fix}"


def test_validate_surface():
    """The part of the surface this project documents for `validate` (docs/configuration.md)."""
    options = cli_surface()["commands"]["validate"]
    assert options == ["config value", "overrides nargs=*", "--world-size value",
                       "-q/--quiet flag"]
