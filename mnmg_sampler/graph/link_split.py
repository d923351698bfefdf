"""The edge split of a link-prediction job: a relation's edges cut into train/val/test, at random
or by time, and the *training graph* that holds no held-out edge.

At random (:func:`split_relation`): the relation's distinct ``(src, dst)`` pairs, cut by
:func:`cut_pairs` (as :func:`~mnmg_sampler.train.link.split_edges` cuts a graph's). The training
graph keeps every other relation whole, the target relation's train pairs and, in the reverse
relation, the edges whose reverse is not held out: a held-out edge is never a message, in either
direction.

By time (``link.split_by: time``; :func:`temporal_edge_split`, :func:`split_relation_by_time`):
edges ordered by time (stable) are cut by the same fractions, each cut moved back to the first
edge of its time, so every edge of a later split is strictly later than every edge of an earlier
one; split ``s`` starts at ``start[s]``. Training samples only edges before the next split's
start, validation and test only edges before their own start, so no split sees its future. The
typed training graph holds, in every relation with edge time, only the edges before the
validation start; edge and node times are kept for temporal sampling.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from .typed import EdgeType, TypedGraph, check_time, typed_graph

__all__ = ["TemporalEdgeSplit", "cut_pairs", "relation_edge_index", "split_edges_by_time",
           "split_relation", "split_relation_by_time", "temporal_edge_split",
           "typed_training_graph"]

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


def _relation_entries(g: TypedGraph, et: EdgeType) -> tuple[np.ndarray, np.ndarray]:
    """CSR positions of relation ``et``'s entries in edge-id order, and their destinations."""
    r = g.relation_index(et)
    t = int(g.rel_dst[r])
    lo, hi = int(g.rel_offset[t]), int(g.rel_offset[t + 1])
    n = int(g.node_type_offset[t + 1] - g.node_type_offset[t])
    segs = g.seg_base[t] + np.arange(n, dtype=np.int64) * (hi - lo) + (r - lo)
    starts, counts = g.indptr[segs], g.indptr[segs + 1] - g.indptr[segs]
    dst = np.repeat(np.arange(n, dtype=np.int64), counts)
    first = np.repeat(starts - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
    pos = first + np.arange(dst.shape[0], dtype=np.int64)
    order = np.argsort(g.edge_ids[pos], kind="stable")
    return pos[order], dst[order]


def relation_edge_index(g: TypedGraph, et: EdgeType) -> np.ndarray:
    """``[2, E]`` per-type ids of relation ``et``'s edges, in its edge-id (input column) order."""
    pos, dst = _relation_entries(g, et)
    src = g.indices[pos] - g.node_type_offset[int(g.rel_src[g.relation_index(et)])]
    return np.stack([src, dst]).astype(np.int64)


def split_relation(g: TypedGraph, et: EdgeType, fractions, seed: int) -> dict[str, np.ndarray]:
    """Train/val/test ``[2, *]`` per-type ids: a random split of ``et``'s distinct pairs."""
    return cut_pairs(np.unique(relation_edge_index(g, et), axis=1), fractions, seed)


def cut_pairs(pairs: np.ndarray, fractions, seed: int) -> dict[str, np.ndarray]:
    """Train/val/test columns of ``pairs`` ``[2, n]``: a ``seed``-keyed permutation cut by
    ``fractions``, each split's columns in their input order."""
    perm = np.random.default_rng([int(seed), 0x11A4]).permutation(pairs.shape[1])
    f = np.asarray(fractions, np.float64)
    n = pairs.shape[1]
    a, b = int(round(f[0] * n)), int(round((f[0] + f[1]) * n))
    c = int(round(min(1.0, float(f.sum())) * n))
    return {k: pairs[:, np.sort(perm[lo:hi])] for k, lo, hi in
            (("train", 0, a), ("val", a, b), ("test", b, c))}


def split_relation_by_time(g: TypedGraph, et: EdgeType, fractions) -> dict[str, np.ndarray]:
    """Train/val/test ``[2, *]`` per-type ids of ``et``'s edges split by time (ascending), their
    times (``train_time`` ...) and ``before``: the validation start (the test start when there
    is no validation edge; one past the last time when neither), the bound of the training
    graph. :class:`ConfigError` when ``g`` has no edge time."""
    if g.edge_time is None:
        raise ConfigError(f"link.split_by is time but {g.name} has no edge time",
                          "its edges cannot be split by time",
                          "use link.split_by: random, or a graph with an edge time per "
                          "relation (docs/temporal.md)")
    pos, _ = _relation_entries(g, et)
    out = split_edges_by_time(relation_edge_index(g, et), g.edge_time[pos], fractions)
    split = {k: out[k] for k in ("train", "val", "test", "train_time", "val_time", "test_time")}
    later = [out[f"{k}_time"] for k in ("val", "test") if out[f"{k}_time"].size]
    last = int(out["train_time"][-1]) + 1 if out["train_time"].size else 0
    split["before"] = np.asarray(int(later[0][0]) if later else last, np.int64)
    return split


def _codes(ei: np.ndarray, n_dst: int) -> np.ndarray:
    return ei[0] * np.int64(max(n_dst, 1)) + ei[1]


def typed_training_graph(g: TypedGraph, et: EdgeType, split: dict[str, np.ndarray],
                         reverse: EdgeType | None) -> TypedGraph:
    """``g`` with only the train pairs of ``et`` and, in ``reverse``, no reverse of a val/test
    pair (module docstring); node data, edge weights and times are kept. A graph with time
    needs a split by time (``split["before"]``, :func:`split_relation_by_time`): then every
    relation keeps only its edges strictly before it."""
    before = split.get("before")
    if (g.edge_time is not None or g.node_time is not None) and before is None:
        raise ConfigError(f"task link on the temporal typed graph {g.name} with a random split",
                          "a random edge split would train on the future",
                          "set link.split_by: time (or drop the times from the graph)")
    n_dst = g.num_nodes_of(et[2])
    train = _codes(split["train"], n_dst)
    held = _codes(np.concatenate([split["val"], split["test"]], 1), n_dst)
    edges, weights, times = {}, {}, {}
    for r, rel in enumerate(g.edge_types):
        ei = relation_edge_index(g, rel)
        keep = None
        if rel == et:
            keep = np.isin(_codes(ei, n_dst), train)
        elif rel == reverse:
            keep = ~np.isin(_codes(ei[::-1], n_dst), held)
        t = None if g.edge_time is None else g.edge_time[_relation_entries(g, rel)[0]]
        if t is not None and before is not None:
            early = t < int(before)
            keep = early if keep is None else keep & early
        if keep is not None:
            ei = ei[:, keep]
        edges[rel] = ei
        if t is not None:
            times[rel] = t if keep is None else t[keep]
        if g.weighted.size and g.weighted[r]:
            w = g.weights[_relation_entries(g, rel)[0]]
            weights[rel] = w if keep is None else w[keep]
    spec = {"num_nodes": g.num_nodes_dict(), "edge_index": edges, "x": g.x, "y": g.y,
            "masks": g.masks, "edge_weight": weights}
    if times or g.node_time is not None:
        off = g.node_type_offset
        spec.update(edge_time=times or None, time_attr=g.time_attr,
                    node_time=None if g.node_time is None else
                    {t: g.node_time[off[i]:off[i + 1]] for i, t in enumerate(g.node_types)})
    return typed_graph(spec, f"{g.name}-train-edges")
