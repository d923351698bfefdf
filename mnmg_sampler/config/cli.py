"""CLI glue: the arguments every config-taking subcommand shares."""

from __future__ import annotations

from typing import Any

from .fields import fields_epilog


def add_config_arguments(parser: Any, config_flag: bool = True) -> None:
    """Add the config arguments every config-taking subcommand shares.

    ``config_flag=True`` gives ``--config PATH`` (train); ``False`` a positional ``CONFIG``
    (validate). Both take trailing ``KEY=VALUE`` overrides and list every key in ``--help``.
    """
    import argparse

    if config_flag:
        parser.add_argument("--config", metavar="PATH", default=None,
                            help="YAML job file (default: built-in defaults only)")
    else:
        parser.add_argument("config", metavar="CONFIG", help="YAML job file")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                        help="dotted overrides, applied after the file (sampler.batch_size=512)")
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = fields_epilog()
