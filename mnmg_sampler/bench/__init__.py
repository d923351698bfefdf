"""Benchmarks behind ``mnmg-sampler bench MODE``.

Each module of :data:`MODES` defines ``add_parser(subparsers)``, which adds its modes'
sub-subparsers (``service`` adds ``merge`` and ``overlap``) with ``bench_run`` set to a
``run(args) -> int``; heavy imports (numba, torch, the graph) wait for ``run``, so building the
CLI parser stays fast. Every mode measures what it compares **in the same run** (same process,
graph and machine state) and reports medians of repeats, so ratios are meaningful.
"""

from __future__ import annotations

MODES = ["single", "dist", "service", "link", "mem"]
