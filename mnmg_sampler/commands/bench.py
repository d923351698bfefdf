"""``mnmg-sampler bench MODE``: measured comparisons, one mode per module in ``mnmg_sampler.bench``.

Modes: ``single`` (one process: one-hop kernel vs a random-gather loop, multi-hop minibatches vs
DGL's sampler when a peer venv exists), ``dist``, ``merge`` and ``overlap`` (ranks under
torchrun). Each prints a table; ``--json`` prints the results as JSON instead (the table goes to
stderr), ``--json OUT`` writes them to OUT as well as printing the table.
"""

from __future__ import annotations

import argparse

HELP = "run a benchmark (single, dist, merge, overlap); a table, or JSON with --json"
STDOUT = "-"  # const of every mode's --json [OUT]


def add_parser(subparsers) -> argparse.ArgumentParser:
    from ..bench import MODES
    from .subcommands import add_module_parsers

    p = subparsers.add_parser("bench", help=HELP, description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    modes = p.add_subparsers(dest="bench_mode", required=True, metavar="MODE")
    add_module_parsers(modes, "mnmg_sampler.bench", MODES)
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    if getattr(args, "json", None) != STDOUT:
        return args.bench_run(args)
    # --json without OUT: the mode writes its JSON to a temporary file and its table to stderr;
    # stdout then holds exactly one JSON document.
    import contextlib
    import sys
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory(prefix="mnmg-bench-") as d:
        args.json = str(Path(d) / "results.json")
        with contextlib.redirect_stdout(_Stderr(hide=args.json)):
            rc = args.bench_run(args)
        path = Path(args.json)
        text = path.read_text() if path.is_file() else ""
    sys.stdout.write(text)
    return rc


class _Stderr:
    """stdout for a mode run with ``--json``: its table to stderr, minus the line naming the
    temporary JSON file (deleted before the command returns)."""

    def __init__(self, hide: str) -> None:
        self.hide = hide

    def write(self, text: str) -> int:
        import sys

        if self.hide not in text:
            sys.stderr.write(text)
        return len(text)

    def flush(self) -> None:
        import sys

        sys.stderr.flush()
