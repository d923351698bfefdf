"""Temporal edge split for link prediction over time (``link.split_by: time`` semantics): train
on the earliest edges, validate on the next, test on the latest, so no split learns from its
future.

Edges are ordered by time (stable: ties in edge id order) and cut by the fractions as the random
split cuts its permutation (:func:`~mnmg_sampler.train.link.split_edges`): ``round(f0 * E)``,
``round((f0 + f1) * E)``, ``round(min(1, sum) * E)``. A cut never separates equal times: it
moves back to the first edge of its time, so every edge of a later split is strictly later than
every edge of an earlier one, and each split starts at a time ``start[split]`` (its first
edge's). The sampling graph of a split holds only the edges strictly before the *next* split's
start for training (the train edges: no validation or test edge, nor any later one) and strictly
before the split's own start for validation and test (train edges, then train and validation
edges), so evaluation never sees an edge at or after the evaluated edges' start.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from .typed import check_time

__all__ = ["TemporalEdgeSplit", "split_edges_by_time", "temporal_edge_split"]

SPLITS = ("train", "val", "test")


@dataclass
class TemporalEdgeSplit:
    """Edge ids (positions in the input's edge order, ascending time) of each split, its start
    time (``None`` for an empty split) and the edge ids of each split's sampling graph."""

    edges: dict[str, np.ndarray]
    start: dict[str, int | None]
    graph: dict[str, np.ndarray]


def _fractions(fractions) -> np.ndarray:
    f = np.asarray(fractions, np.float64).ravel()
    if f.shape != (3,) or not np.isfinite(f).all() or (f < 0).any() or f.sum() <= 0:
        raise ConfigError(f"the edge split fractions are {list(f)}",
                          "no train/val/test split can be cut",
                          "give three fractions >= 0 (train, val, test), e.g. [0.8, 0.1, 0.1]")
    return f


def temporal_edge_split(edge_time, fractions) -> TemporalEdgeSplit:
    """Split edges by time (module docstring). ``edge_time``: one int64 time per edge (floats
    only when integral; else :class:`~mnmg_sampler.errors.GraphFormatError`)."""
    t = check_time(edge_time, len(edge_time), "edge_time")
    f = _fractions(fractions)
    n = t.size
    order = np.argsort(t, kind="stable")
    ts = t[order]
    raw = [int(round(f[0] * n)), int(round((f[0] + f[1]) * n)),
           int(round(min(1.0, float(f.sum())) * n))]
    # a cut inside a run of equal times moves back to the run's first edge
    cuts = [int(np.searchsorted(ts, ts[c], side="left")) if 0 < c < n else c for c in raw[:2]]
    cuts[1] = max(cuts[1], cuts[0])
    end = max(raw[2], cuts[1])
    bounds = (0, cuts[0], cuts[1], end)
    edges = {k: order[bounds[i]:bounds[i + 1]] for i, k in enumerate(SPLITS)}
    start = {k: (int(ts[bounds[i]]) if bounds[i + 1] > bounds[i] else None)
             for i, k in enumerate(SPLITS)}

    def before(i: int) -> np.ndarray:  # every edge strictly before the time at sorted cut i
        return order[:bounds[i]]

    graph = {"train": before(1), "val": before(1), "test": before(2)}
    return TemporalEdgeSplit(edges, start, graph)


def split_edges_by_time(edge_index, edge_time, fractions) -> dict[str, np.ndarray]:
    """:func:`temporal_edge_split` of a ``[2, E]`` edge list as the random split returns it:
    ``train`` / ``val`` / ``test`` ``[2, E_s]`` arrays (ascending time) with their times
    (``train_time`` ...), and the sampling graph of each (``graph_train`` ...) with its edge
    times (``graph_train_time`` ...)."""
    ei = np.asarray(edge_index, np.int64)
    if ei.ndim != 2 or ei.shape[0] != 2:
        raise ConfigError(f"edge_index has shape {ei.shape}", "no edge can be split",
                          "give a [2, E] array")
    t = check_time(edge_time, ei.shape[1], "edge_time")
    s = temporal_edge_split(t, fractions)
    out = {}
    for k in SPLITS:
        out[k], out[f"{k}_time"] = ei[:, s.edges[k]], t[s.edges[k]]
        out[f"graph_{k}"], out[f"graph_{k}_time"] = ei[:, s.graph[k]], t[s.graph[k]]
    return out
