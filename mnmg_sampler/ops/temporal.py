"""Temporal sampling's names: the typed kernel (:mod:`mnmg_sampler.ops.typed`) with a time
bound per node, so one kernel serves both (no time is its ``bounds=None`` case).

Segments of a timed :class:`~mnmg_sampler.graph.typed.TypedGraph` are sorted by time
(:mod:`mnmg_sampler.graph.temporal`), so the admissible neighbors of a (node, relation) pair
(time <= the node's bound) are the segment's prefix of length ``a``, found by binary search over
the entries' edge time, or over the neighbors' node time when the graph has node time only.

- ``"uniform"``: the typed draws on the prefix (the same streams, the same helpers, with degree
  ``a``): with a bound >= every time the output equals
  :func:`~mnmg_sampler.ops.typed.sample_typed_neighbors`' bit for bit.
- ``"last"``: the ``min(k, a)`` latest admissible neighbors, the tail of the prefix in ascending
  time order (``-1`` all of the prefix); deterministic, ignores ``replace`` and edge weights.
"""

from __future__ import annotations

import numpy as np

from . import typed

__all__ = ["STRATEGIES", "admissible_count", "sample_temporal_neighbors"]

STRATEGIES = ("uniform", "last")
admissible_count = typed.admissible_count
time_arrays = typed.time_arrays


def sample_temporal_neighbors(graph, rows: np.ndarray, nodes: np.ndarray, keys: np.ndarray,
                              bounds: np.ndarray, req: np.ndarray, fanouts: np.ndarray,
                              replace: np.ndarray, last: np.ndarray, seed: int, hop: int, *,
                              with_eids: bool = True
                              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`~mnmg_sampler.ops.typed.sample_typed_neighbors` with a time bound per node:
    ``bounds[i]`` (int64) is the latest admissible time for ``rows[i]`` and ``last[q]`` (uint8)
    selects ``"last"`` (1) or ``"uniform"`` (0) per request. Same returns."""
    return typed.sample_typed_neighbors(graph, rows, nodes, keys, req, fanouts, replace, seed,
                                        hop, with_eids=with_eids, bounds=bounds, last=last)
