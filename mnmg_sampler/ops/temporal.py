"""The temporal CPU kernel: one call samples one hop for every relation and merged request, each
frontier node bounded by a time (that of the seed its subtree hangs from).

Segments of a timed :class:`~mnmg_sampler.graph.typed.TypedGraph` are sorted by time
(:mod:`mnmg_sampler.graph.temporal`), so the admissible neighbors of a (node, relation) pair
(time <= the node's bound) are the segment's prefix of length ``a``, found by binary search over
the entries' edge time, or over the neighbors' node time when the graph has node time only.

- ``"uniform"``: the draws of :mod:`mnmg_sampler.ops.typed` on the prefix (the same streams, the
  same helpers, with degree ``a``): with a bound >= every time the output equals
  :func:`~mnmg_sampler.ops.typed.sample_typed_neighbors`' bit for bit.
- ``"last"``: the ``min(k, a)`` latest admissible neighbors, the tail of the prefix in ascending
  time order (``-1`` all of the prefix); deterministic, ignores ``replace`` and edge weights.
"""

from __future__ import annotations

import numba
import numpy as np

from . import cpu, typed, weighted

__all__ = ["STRATEGIES", "admissible_count", "sample_temporal_neighbors"]

STRATEGIES = ("uniform", "last")
HOP_RELATION_SHIFT = typed.HOP_RELATION_SHIFT
node_relations = typed.node_relations
type_of = typed.type_of
usable_count = typed.usable_count
sample_count = cpu.sample_count
node_positions = cpu.node_positions
stream_base = cpu.stream_base
weighted_count = weighted.weighted_count
draws_needed = weighted.draws_needed
weighted_positions = weighted.weighted_positions


@numba.njit(cache=True, nogil=True, inline="always")
def admissible_count(etime, ntime, indices, by_node, s, d, bound):
    """How many entries of the time-sorted segment ``[s, s + d)`` have time <= ``bound``: one
    read when all or none are admissible, else a binary search between the two ends."""
    if d == 0:
        return 0
    if (ntime[indices[s + d - 1]] if by_node else etime[s + d - 1]) <= bound:
        return d
    if (ntime[indices[s]] if by_node else etime[s]) > bound:
        return 0
    lo = 1  # entry 0 is admissible, entry d - 1 is not
    hi = d - 1
    while lo < hi:
        mid = (lo + hi) >> 1
        t = ntime[indices[s + mid]] if by_node else etime[s + mid]
        if t <= bound:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _pair_counts_py(node_off, rel_off, seg_base, indptr, indices, etime, ntime, by_node, w,
                    wflag, rows, bounds, req, fan, replace, last, width, starts, degs, nzs,
                    counts, scounts):
    # Phase 0 of ops.typed with the degree cut to the admissible prefix.
    n = rows.shape[0]
    for i in numba.prange(n):
        r0, R_t, s0 = node_relations(node_off, rel_off, seg_base, rows[i])
        q = req[i]
        rep = replace[q] != 0
        for j in range(R_t):
            p = i * width + j
            r = r0 + j
            s = indptr[s0 + j]
            d = admissible_count(etime, ntime, indices, by_node, s, indptr[s0 + j + 1] - s,
                                 bounds[i])
            f = fan[q, r]
            starts[p] = s
            degs[p] = d
            if last[q] != 0:
                k = d if f < 0 else min(f, d)
            elif wflag[r] != 0:
                nz = usable_count(w, s, d)
                nzs[p] = nz
                k = weighted_count(nz, f, rep)
                scounts[p + 1] = d if draws_needed(nz, k, f, rep) else 0
            else:
                k = sample_count(d, f, rep)
            counts[p + 1] = k


def _positions_py(node_off, rel_off, w, wflag, rows, nodes, keys, req, fan, replace, last, seed,
                  hop, width, starts, degs, nzs, offsets, soffs, c, pos, rel_out):
    # Phase 1 of ops.typed on the prefix; "last" takes its tail.
    n = rows.shape[0]
    for i in numba.prange(n):
        t = type_of(node_off, rows[i])
        r0 = rel_off[t]
        q = req[i]
        rep = replace[q]
        for j in range(rel_off[t + 1] - r0):
            p = i * width + j
            o = offsets[p]
            k = offsets[p + 1] - o
            if k == 0:
                continue
            r = r0 + j
            start = starts[p]
            f = fan[q, r]
            if last[q] != 0:
                tail = start + degs[p] - k
                for m in range(k):
                    pos[o + m] = tail + m
            elif wflag[r] != 0:
                hop_r = hop + (np.uint64(r) << np.uint64(HOP_RELATION_SHIFT))
                base = stream_base(seed, keys[i], hop_r, nodes[i])
                weighted_positions(pos, o, w, start, degs[p], nzs[p], k, f, rep != 0, base, c,
                                   soffs[p])
                for m in range(o, o + k):
                    pos[m] += start
            else:
                hop_r = hop + (np.uint64(r) << np.uint64(HOP_RELATION_SHIFT))
                node_positions(pos, o, k, start, degs[p], f, rep, seed, keys[i], hop_r,
                               nodes[i])
            for m in range(o, o + k):
                rel_out[m] = r


_KERNELS = {par: tuple(cpu._compile(f, par) for f in (_pair_counts_py, _positions_py))
            for par in (True, False)}
_NO_WEIGHTS = np.zeros(0, np.float32)
_NO_TIMES = np.zeros(0, np.int64)


def time_arrays(graph) -> tuple[np.ndarray, np.ndarray, bool]:
    """``(edge time per entry, node time, by_node)`` the kernels read for ``graph``."""
    if graph.edge_time is not None:
        return graph.edge_time, _NO_TIMES, False
    if graph.node_time is not None:
        return _NO_TIMES, graph.node_time, True
    from ..errors import SamplingInputError

    raise SamplingInputError(f"graph '{graph.name}' has no edge or node time",
                             "temporal sampling has nothing to compare seeds' times with",
                             "load it with time (docs/temporal.md) or sample without time")


def sample_temporal_neighbors(graph, rows: np.ndarray, nodes: np.ndarray, keys: np.ndarray,
                              bounds: np.ndarray, req: np.ndarray, fanouts: np.ndarray,
                              replace: np.ndarray, last: np.ndarray, seed: int, hop: int, *,
                              with_eids: bool = True
                              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`~mnmg_sampler.ops.typed.sample_typed_neighbors` with a time bound per node:
    ``bounds[i]`` (int64) is the latest admissible time for ``rows[i]`` and ``last[q]`` (uint8)
    selects ``"last"`` (1) or ``"uniform"`` (0) per request. Same returns."""
    rows = cpu._ids(rows)
    nodes = cpu._ids(nodes)
    keys = np.ascontiguousarray(keys, dtype=np.int64)
    bounds = np.ascontiguousarray(bounds, dtype=np.int64)
    req = np.ascontiguousarray(req, dtype=np.int64)
    fan = np.ascontiguousarray(fanouts, dtype=np.int64)
    repl = np.ascontiguousarray(replace, dtype=np.uint8)
    last = np.ascontiguousarray(last, dtype=np.uint8)
    etime, ntime, by_node = time_arrays(graph)
    n = rows.shape[0]
    counts_k, positions_k = _KERNELS[cpu._parallel(n)]
    w = _NO_WEIGHTS if graph.weights is None else graph.weights
    wflag = np.ascontiguousarray(graph.weighted, dtype=np.uint8)
    width = int(np.diff(graph.rel_offset).max(initial=0))
    m = n * width
    starts, degs, nzs = np.empty(m, np.int64), np.empty(m, np.int64), np.empty(m, np.int64)
    offsets = np.zeros(m + 1, np.int64)
    soffs = np.zeros(m + 1, np.int64)
    counts_k(graph.node_type_offset, graph.rel_offset, graph.seg_base, graph.indptr,
             graph.indices, etime, ntime, by_node, w, wflag, rows, bounds, req, fan, repl, last,
             width, starts, degs, nzs, offsets, soffs)
    np.cumsum(offsets, out=offsets)
    if wflag.any():
        np.cumsum(soffs, out=soffs)
    total = int(offsets[-1])
    pos = np.empty(total, np.int64)
    rel_out = np.empty(total, np.int64)
    eid_out = np.empty(total if with_eids else 0, np.int64)
    c = weighted._scratch(int(soffs[-1]))
    positions_k(graph.node_type_offset, graph.rel_offset, w, wflag, rows, nodes, keys, req, fan,
                repl, last, np.uint64(seed), np.uint64(hop), width, starts, degs, nzs, offsets,
                soffs, c, pos, rel_out)
    gather_k = cpu._KERNELS[cpu._parallel(n)][2]
    gather_k(graph.indices, graph.edge_ids, pos, pos, eid_out, with_eids)
    counts = np.diff(offsets[::width]) if width else np.zeros(n, np.int64)
    return counts, pos, rel_out, eid_out
