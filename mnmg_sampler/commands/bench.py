"""``mnmg-sampler bench MODE``: measured comparisons, one mode per module in ``mnmg_sampler.bench``.

Modes: ``single`` (one process: one-hop kernel vs a random-gather loop, multi-hop minibatches vs
DGL's sampler when a peer venv exists); distributed modes are added as modules beside it.
"""

from __future__ import annotations

import argparse

HELP = "run a benchmark (mode: single, ...); prints results, --json writes them"


def add_parser(subparsers) -> argparse.ArgumentParser:
    from ..bench import add_mode_parsers

    p = subparsers.add_parser("bench", help=HELP, description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    modes = p.add_subparsers(dest="bench_mode", required=True, metavar="MODE")
    add_mode_parsers(modes)
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    return args.bench_run(args)
