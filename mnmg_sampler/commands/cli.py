"""The ``mnmg-sampler`` command line, one module ``mnmg_sampler.commands.<name>`` per subcommand.

User errors (:class:`MnmgError`) print one line on stderr and exit with code 2 on every rank, no
traceback; 3 for a :class:`PeerError` (another rank died or stopped answering: the input was
fine). A closed pipe (``mnmg-sampler info cora | head -1``) exits silently.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from ..errors import MnmgError, PeerError
from ..system.console import plain, rank_prefix
from .subcommands import add_module_parsers

COMMANDS = ["info", "sample", "partition", "validate", "train", "bench", "plot", "selfcheck"]
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for `cmd | head -1`


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    p = argparse.ArgumentParser(
        prog="mnmg-sampler",
        description="Multi-node multi-GPU neighbor sampling for GNN training (torch.distributed).",
    )
    p.add_argument("-V", "--version", action="version", version=f"mnmg-sampler {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_module_parsers(sub, "mnmg_sampler.commands", COMMANDS)
    _plain_help(p)
    return p


def _plain_help(parser: argparse.ArgumentParser) -> None:
    """Strip docstring markup (````code````, ``:class:`X```) from every help text, recursively."""
    parser.description = plain(parser.description)
    parser.epilog = plain(parser.epilog)
    for action in parser._actions:
        action.help = plain(action.help)
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                choice.help = plain(choice.help)
            for child in action.choices.values():
                _plain_help(child)


def main(argv: list[str] | None = None) -> None:
    try:
        sys.exit(_main(argv))
    except BrokenPipeError:  # the reader went away (`| head -1`): stop quietly, like cat does
        _silence_stdout()
        sys.exit(EXIT_BROKEN_PIPE)


def _main(argv: list[str] | None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # --help / --version / usage errors: flush while we can catch it
        sys.stdout.flush()
        raise e
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format=f"{rank_prefix()}%(levelname)s %(name)s: %(message)s",
    )
    try:
        rc = args.func(args)
    except MnmgError as e:
        print(f"{rank_prefix()}mnmg-sampler {args.command}: error: {e}", file=sys.stderr)
        if isinstance(e, PeerError):
            # a job with a dead peer cannot tear its process group down reliably (destructors
            # wait for collectives that never end): leave now, without interpreter teardown
            sys.stdout.flush()
            sys.stderr.flush()
            logging.shutdown()
            os._exit(3)
        return 2
    sys.stdout.flush()  # a closed pipe shows here, inside main's handler
    return rc or 0


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush raises nothing more."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
