"""Benchmarks behind ``mnmg-sampler bench MODE``, one module per mode.

Each mode module ``mnmg_sampler.bench.<mode>`` defines ``add_parser(subparsers)``, which adds the
mode's sub-subparser and sets ``bench_run=run`` with ``set_defaults``, and ``run(args) -> int``.
Mode modules import heavy dependencies (numba, torch, the graph) inside ``run`` so that building
the CLI parser stays fast. A mode listed in :data:`MODES` whose module does not exist yet is
skipped, so modes can be added one file at a time.

Every mode measures what it compares **in the same run** (same process, same graph, same
machine state) and reports medians of repeats, so ratios are meaningful.
"""

from __future__ import annotations

MODES = ["single", "dist", "merge", "overlap", "link", "mem"]


def add_mode_parsers(subparsers) -> list[str]:
    """Register every available mode's parser; returns the names registered."""
    from ..commands.subcommands import add_module_parsers

    return add_module_parsers(subparsers, __name__, MODES)
