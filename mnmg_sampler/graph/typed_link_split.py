"""The edge split of a link-prediction job on a typed graph: the target relation's edges cut into
train/val/test, and the *training graph* that holds no held-out edge.

The target relation's distinct ``(src, dst)`` pairs are permuted with ``seed`` and cut by the
fractions as the homogeneous split cuts its pairs (:func:`~mnmg_sampler.train.link.split_edges`:
``round(f0 * P)``, ``round((f0 + f1) * P)``, ``round(min(1, sum) * P)``). The training graph keeps
every other relation whole, the target relation's train pairs, and, in the reverse relation
(PyG's ``rev_`` relation, chosen by the caller), the edges whose reverse is not held out; so a
held-out edge can never be read as a message, in either direction.

With ``link.split_by: time`` (:func:`split_relation_by_time`) the relation's edges are split by
time instead (:mod:`.temporal_split`: train earliest, validation next, test latest) and the
training graph holds only the edges strictly before the validation start, in every relation
with edge time, so no validation or test edge, nor any later edge, can be sampled; edge and node
times are kept for temporal sampling.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from .temporal_split import split_edges_by_time
from .typed import EdgeType, TypedGraph, typed_graph

__all__ = ["relation_edge_index", "split_relation", "split_relation_by_time",
           "typed_training_graph"]


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
    pairs = np.unique(relation_edge_index(g, et), axis=1)
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
