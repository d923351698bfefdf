"""The ``mnmg-sampler`` command line: partition, validate, sample, train, bench, info.

Each subcommand lives in ``mnmg_sampler.commands.<name>``. User errors (:class:`MnmgError`)
print one line on stderr and exit with code 2, on every rank, without a traceback. Output piped
into a reader that stops early (``| head``) ends the command quietly with code 141.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from .errors import MnmgError

COMMANDS = ["info", "sample", "partition", "validate", "train", "bench"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mnmg-sampler",
        description="Multi-node multi-GPU neighbor sampling for GNN training (torch.distributed).",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        try:
            mod = importlib.import_module(f"mnmg_sampler.commands.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"mnmg_sampler.commands.{name}":
                raise
            continue  # subcommand not built yet
        mod.add_parser(sub)
    return p


def _rank_prefix() -> str:
    r = os.environ.get("RANK")
    return f"[rank{r}] " if r is not None and os.environ.get("WORLD_SIZE", "1") != "1" else ""


def main(argv: list[str] | None = None) -> None:
    try:
        try:
            _main(argv)
        finally:
            sys.stdout.flush()  # here, not at exit: a closed pipe is handled below
    except BrokenPipeError:
        # the reader went away (`mnmg-sampler ... | head`): stop quietly like a Unix tool,
        # and point stdout at /dev/null so the interpreter's final flush cannot fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(128 + 13)  # 141: killed by SIGPIPE, the shell's convention


def _main(argv: list[str] | None) -> None:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format=f"{_rank_prefix()}%(levelname)s %(name)s: %(message)s",
    )
    try:
        rc = args.func(args)
    except MnmgError as e:
        print(f"{_rank_prefix()}mnmg-sampler {args.command}: error: {e}", file=sys.stderr)
        sys.exit(2)
    sys.exit(rc or 0)
