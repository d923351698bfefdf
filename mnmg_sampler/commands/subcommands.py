"""Sub-parsers of modules listed by name: how ``mnmg-sampler`` finds its commands and
``mnmg-sampler bench`` its modes."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Iterable

__all__ = ["add_module_parsers"]


def add_module_parsers(subparsers: argparse._SubParsersAction, package: str,
                       names: Iterable[str]) -> None:
    """Call ``add_parser(subparsers)`` of every module ``package.<name>``."""
    for name in names:
        importlib.import_module(f"{package}.{name}").add_parser(subparsers)
