"""Benchmarks behind ``mnmg-sampler bench MODE``, one module per mode.

Each mode module ``mnmg_sampler.bench.<mode>`` defines ``add_parser(subparsers)``, which adds the
mode's sub-subparser and sets ``bench_run=run`` with ``set_defaults``, and ``run(args) -> int``.
Mode modules import heavy dependencies (numba, torch, the graph) inside ``run`` so that building
the CLI parser stays fast.

Every mode measures what it compares **in the same run** (same process, same graph, same
machine state) and reports medians of repeats, so ratios are meaningful.
"""

from __future__ import annotations

MODES = ["single", "dist", "merge", "overlap", "link", "mem"]
