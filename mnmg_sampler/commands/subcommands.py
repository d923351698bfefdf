"""Sub-parsers of modules listed by name: how ``mnmg-sampler`` finds its commands and
``mnmg-sampler bench`` its modes."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Iterable

__all__ = ["add_module_parsers"]


def add_module_parsers(subparsers: argparse._SubParsersAction, package: str,
                       names: Iterable[str]) -> list[str]:
    """Call ``add_parser(subparsers)`` of every module ``package.<name>``; returns the names added.

    A listed module that does not exist (yet) is skipped, so one can be added a file at a time;
    any other import error is raised.
    """
    found = []
    for name in names:
        try:
            mod = importlib.import_module(f"{package}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{package}.{name}":
                raise
            continue
        mod.add_parser(subparsers)
        found.append(name)
    return found
