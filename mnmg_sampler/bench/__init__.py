"""Benchmarks behind ``mnmg-sampler bench MODE``.

Each module of :data:`MODES` defines ``add_parser(subparsers)``, which adds its modes'
sub-subparsers (``service`` adds ``merge`` and ``overlap``) and sets their ``bench_run`` with
``set_defaults`` to a ``run(args) -> int``.
Mode modules import heavy dependencies (numba, torch, the graph) inside ``run`` so that building
the CLI parser stays fast.

Every mode measures what it compares **in the same run** (same process, same graph, same
machine state) and reports medians of repeats, so ratios are meaningful.
"""

from __future__ import annotations

MODES = ["single", "dist", "service", "link", "mem"]
