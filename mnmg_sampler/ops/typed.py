"""The typed CPU kernel: one call samples one hop for every relation and every merged request.

Each frontier node is expanded along every relation that ends at its type, in relation order,
with its request's fanout for that relation; per (node, relation) the draws are those of
:mod:`mnmg_sampler.ops.cpu` or, where the relation has weights, :mod:`mnmg_sampler.ops.weighted`.

RNG keying: relation ``r`` of node ``v`` draws from stream ``stream_base(seed, key, hop + r *
2**32, v)``: relation 0 is exactly the homogeneous stream (a one-type, one-relation graph is
bit-identical to ``ops.cpu`` and ``ops.weighted``), and the relations of one node draw
independently (the hop counter goes through the 64-bit mix).

Phases, as in ``ops.cpu``: (0) per (node, relation) pair its segment, degree and sample count
(the only random reads of ``indptr``); (1) the draws' CSR positions; (2) ``ops.cpu``'s gather.
Pair ``j`` of node ``i`` is slot ``i * width + j`` (``width``: the most relations of any type),
so a one-type graph has exactly the homogeneous kernel's passes.

Time (docs/temporal.md#sampling): a timed graph's segments are sorted by time, so with ``bounds``
each degree is cut to the admissible prefix (:func:`admissible_count`). Per request
(:data:`STRATEGIES`), ``"uniform"`` (0) draws as above on the prefix (bit-identical to the untimed
kernel when the bound is >= every time), ``"last"`` (1) takes the ``min(k, a)`` latest admissible
neighbors in ascending time. ``bounds=None`` compiles without the time branches.
"""

from __future__ import annotations

import numba
import numpy as np

from . import cpu
from .prefetch import prefetch

__all__ = ["sample_typed_neighbors", "sample_relations", "HOP_RELATION_SHIFT", "STRATEGIES",
           "admissible_count", "time_arrays", "group_hops_by_relation", "group_nodes_by_type"]

HOP_RELATION_SHIFT = 32  # relation r keys its stream with hop + (r << 32)
STRATEGIES = ("uniform", "last")  # temporal strategies, ``last[q]`` 0 and 1

sample_count = cpu.sample_count
node_positions = cpu.node_positions
stream_base = cpu.stream_base
weighted_count = cpu.weighted_count
draws_needed = cpu.draws_needed
weighted_positions = cpu.weighted_positions
W_MAX = cpu.W_MAX


@numba.njit(cache=True, nogil=True, inline="always")
def type_of(off, v):
    """The type of internal id ``v``: the largest ``t < T`` with ``off[t] <= v``, by a
    branch-free binary search: ids of random types mispredicted a branch per step (a batch's
    nodes grouped by type: 21 -> 9 ns per node)."""
    t = 0
    n = off.shape[0] - 1
    while n > 1:
        half = n >> 1
        t += half * (off[t + half] <= v)
        n -= half
    return t


@numba.njit(cache=True, nogil=True, inline="always")
def node_relations(node_off, rel_off, seg_base, v):
    """``(first relation, number of relations, first segment)`` of internal id ``v``: its
    relations are ``r0 .. r0 + n - 1``, relation ``r0 + j`` is segment ``s0 + j``."""
    t = type_of(node_off, v)
    r0 = rel_off[t]
    n = rel_off[t + 1] - r0
    return r0, n, seg_base[t] + (v - node_off[t]) * n


@numba.njit(cache=True, nogil=True, inline="always")
def usable_count(w, s, d):
    """How many of the weights ``w[s:s+d]`` can be drawn (``cpu.usable``), branch-free."""
    nz = 0
    for e in range(s, s + d):
        x = np.float64(w[e])
        nz += (x > 0) & (x <= W_MAX)
    return nz


@numba.njit(cache=True, nogil=True, inline="always")
def admissible_count(etime, ntime, indices, by_node, s, d, bound):
    """How many entries of the time-sorted segment ``[s, s + d)`` have time <= ``bound``, by a
    branch-free binary search: no branch waits on a time read (with the segments prefetched
    ahead, measured 5% faster than a branching one)."""
    base = s
    n = d
    while n > 1:
        half = n >> 1
        t = ntime[indices[base + half]] if by_node else etime[base + half]
        base += half * (t <= bound)
        n -= half
    if d <= 0:
        return 0
    t = ntime[indices[base]] if by_node else etime[base]
    return base - s + (t <= bound)


PREFETCH_AHEAD = 16  # pairs between a segment's prefetch and its search (8 to 32 measured alike)
# cpu's, for a node's indptr entries (untimed counts): a node's relations make the loop body
# long, so without it few nodes' misses were in flight (measured, rmat:18 typed into 3 types,
# 9 relations: phase 0 11.5 -> 5.1 ms)
INDPTR_AHEAD = cpu.INDPTR_AHEAD


def _pair_counts_py(node_off, rel_off, seg_base, indptr, indices, etime, ntime, by_node, w,
                    wflag, rows, bounds, req, fan, replace, last, width, starts, degs, nzs,
                    counts, scounts, rels):
    # Phase 0: node i's relation j is pair i * width + j (width: the most relations of a type),
    # so no pass is needed to place the pairs; a type with fewer relations leaves count 0.
    # ``bounds is None`` (no time) is pruned at compile time: the prefix is the whole segment.
    n = rows.shape[0]
    m = rels.shape[0]
    if bounds is not None:
        # (a) each pair's segment (in ``starts``) and relation (-1: none), for the time cut
        for i in numba.prange(n):
            r0, R_t, s0 = node_relations(node_off, rel_off, seg_base, rows[i])
            for j in range(width):
                p = i * width + j
                starts[p] = s0 + j
                rels[p] = r0 + j if j < R_t else -1
        # (t) time: every pair's segment from indptr, then its degree cut to the admissible
        # prefix. A search's loads depend on indptr's, so it waits for its own misses; the
        # segment PREFETCH_AHEAD pairs on is prefetched (its middle, the first probe)
        # meanwhile, so the misses of many rows overlap (measured: the time search's cost per
        # row divided by about 3). Pairs of no relation get an empty segment at 0, which the
        # search reads nothing of. Written out here, once per kind of time, with a constant
        # ``by_node``: numba parallelises no prange of an inlined helper, and the search with
        # the flag as a variable cost half as much again (measured). Across a thread's chunk
        # end the read ahead may see a degree another thread already cut: only the prefetched
        # address differs (a prefetch never faults and changes no value).
        for p in numba.prange(m):
            s = 0
            d = 0
            if rels[p] >= 0:
                sg = starts[p]
                u = np.uint64(sg)  # unsigned: no wraparound guard (as ops/cpu.py)
                s = indptr[u]
                d = indptr[u + np.uint64(1)] - s
            starts[p] = s
            degs[p] = d
        if by_node:
            for i in numba.prange(n):
                for j in range(width):
                    p = i * width + j
                    a = p + PREFETCH_AHEAD
                    if a < m:
                        prefetch(indices, starts[a] + (degs[a] >> 1))
                    degs[p] = admissible_count(etime, ntime, indices, True,
                                                          starts[p], degs[p], bounds[i])
        else:
            for i in numba.prange(n):
                for j in range(width):
                    p = i * width + j
                    a = p + PREFETCH_AHEAD
                    if a < m:
                        prefetch(etime, starts[a] + (degs[a] >> 1))
                    degs[p] = admissible_count(etime, ntime, indices, False,
                                                          starts[p], degs[p], bounds[i])
    # (b) the random reads of indptr, independent, so their misses overlap (with time they
    # were read by the cut above; without, each node's segments are found here and the
    # entries of the node INDPTR_AHEAD on are prefetched). The count is written out here: a
    # helper returning (count, scratch) cost the timed kernel a third of its time (measured)
    for i in numba.prange(n):
        q = req[i]
        rep = replace[q] != 0
        tail = False
        r0 = R_t = s0 = 0
        if bounds is not None:
            tail = last[q] != 0
        else:
            if i + INDPTR_AHEAD < n:
                _, R_a, s_a = node_relations(node_off, rel_off, seg_base, rows[i + INDPTR_AHEAD])
                prefetch(indptr, s_a)
                prefetch(indptr, s_a + R_a)
            r0, R_t, s0 = node_relations(node_off, rel_off, seg_base, rows[i])
        for j in range(width):
            p = i * width + j
            if bounds is None:
                r = r0 + j if j < R_t else -1
                rels[p] = r
            else:
                r = rels[p]
            k = 0
            sc = 0
            if r >= 0:
                if bounds is None:
                    u = np.uint64(s0 + j)
                    s = indptr[u]
                    d = indptr[u + np.uint64(1)] - s
                    starts[p] = s
                    degs[p] = d
                else:
                    s = starts[p]
                    d = degs[p]
                f = fan[q, r]
                if tail:
                    k = d if f < 0 else min(f, d)
                elif wflag[r] != 0:
                    nz = usable_count(w, s, d)
                    nzs[p] = nz
                    k = weighted_count(nz, f, rep)
                    if draws_needed(nz, k, f, rep):
                        sc = d
                else:
                    k = sample_count(d, f, rep)
            counts[p + 1] = k  # the scratch is reused: unused slots must count nothing
            scounts[p + 1] = sc


def _positions_py(ws, part, wflag, nodes, keys, req, fan, replace, last, seed, hop, width,
                  starts, degs, nzs, offsets, soffs, rels, c, pos, rel_out):
    # Phase 1: the CSR positions of every pair's draws (its stream: hop + r * 2**32); "last"
    # (only with time; ``last is None`` is pruned) takes the prefix's tail. Weights: the
    # array ``ws[part[i]]`` of node i's part (``ops.typed_parts``), ``ws[0]`` when ``part``
    # is None (one CSR).
    n = nodes.shape[0]
    for i in numba.prange(n):
        q = req[i]
        rep = replace[q]
        tail = False
        if last is not None:
            tail = last[q] != 0
        for j in range(width):
            p = i * width + j
            o = offsets[p]
            k = offsets[p + 1] - o
            if k == 0:
                continue
            r = rels[p]
            hop_r = hop + (np.uint64(r) << np.uint64(HOP_RELATION_SHIFT))
            start = starts[p]
            f = fan[q, r]
            if tail:
                first = start + degs[p] - k
                for m in range(k):
                    pos[np.uint64(o + m)] = first + m
            elif wflag[r] != 0:
                if part is None:  # one CSR (pruned at compile time)
                    w = ws[0]
                else:
                    w = ws[part[i]]
                base = stream_base(seed, keys[i], hop_r, nodes[i])
                weighted_positions(pos, o, w, start, degs[p], nzs[p], k, f, rep != 0, base, c,
                                   soffs[p])
                for m in range(o, o + k):
                    pos[np.uint64(m)] += start
            else:
                node_positions(pos, o, k, start, degs[p], f, rep, seed, keys[i], hop_r,
                               nodes[i])
            for m in range(o, o + k):
                rel_out[np.uint64(m)] = r


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


def sample_typed_neighbors(graph, rows: np.ndarray, nodes: np.ndarray, keys: np.ndarray,
                           req: np.ndarray, fanouts: np.ndarray, replace: np.ndarray, seed: int,
                           hop: int, *, with_eids: bool = True, bounds: np.ndarray | None = None,
                           last: np.ndarray | None = None
                           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Sample one hop of a typed graph for every ``rows[i]``, along every relation of its type.

    Args:
        nodes: the id each node's RNG is keyed on (the internal id in one process).
        req: int64 row of ``fanouts`` / ``replace`` for each node (its request).
        fanouts: int64 ``[Q, R]``: per request and relation, neighbors to draw (-1 all, 0 none).
        replace: uint8 ``[Q]``.
        with_eids: ``False`` skips the edge-id reads (``edge_ids`` comes back empty).
        bounds: int64 ``[n]``: each node's latest admissible time (timed graph); ``None``: no time.
        last: uint8 ``[Q]`` with ``bounds``: ``"last"`` (1) or ``"uniform"`` (0) per request.

    Returns:
        ``(counts, neighbors, relations, edge_ids)``: per-node sample counts (all relations),
        then per sampled edge its neighbor's internal id, its relation and its per-relation edge
        id, in node order and relation order within a node (int64).
    """
    times = (_NO_TIMES, _NO_TIMES, False) if bounds is None else time_arrays(graph)
    return sample_relations(graph.node_type_offset, graph.rel_offset, graph.seg_base,
                            graph.indptr, graph.indices, graph.edge_ids, graph.weights,
                            graph.weighted, rows, nodes, keys, req, fanouts, replace, seed, hop,
                            with_eids=with_eids, bounds=bounds, last=last, times=times)


def sample_relations(node_off, rel_off, seg_base, indptr, indices, edge_ids, weights, wflag,
                     rows, nodes, keys, req, fanouts, replace, seed: int, hop: int, *,
                     with_eids: bool = True, bounds=None, last=None, times=None
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`sample_typed_neighbors` on a typed CSR's arrays (``weights`` ``None`` when no
    relation is weighted, ``wflag`` one uint8 per relation, ``edge_ids`` empty for CSR
    positions, ``times`` :func:`time_arrays`'s triple). A homogeneous CSR is ``node_off = [0,
    n]``, ``rel_off = [0, 1]``, ``seg_base = [0]``."""
    rows = cpu._ids(rows)
    nodes = cpu._ids(nodes)
    keys = np.ascontiguousarray(keys, dtype=np.int64)
    req = np.ascontiguousarray(req, dtype=np.int64)
    fan = np.ascontiguousarray(fanouts, dtype=np.int64)
    repl = np.ascontiguousarray(replace, dtype=np.uint8)
    etime, ntime, by_node = _NO_TIMES, _NO_TIMES, False
    if bounds is not None:
        bounds = np.ascontiguousarray(bounds, dtype=np.int64)
        last = np.ascontiguousarray(np.zeros(repl.shape[0], np.uint8) if last is None else last,
                                    dtype=np.uint8)
        etime, ntime, by_node = times
    else:
        last = None
    n = rows.shape[0]
    counts_k, positions_k = _KERNELS[cpu._parallel(n)]
    w = _NO_WEIGHTS if weights is None else weights
    wflag = np.ascontiguousarray(wflag, dtype=np.uint8)
    width = int(np.diff(rel_off).max(initial=0))
    m = n * width
    starts, degs, nzs, offsets, soffs, rels = cpu.scratch_int64(m + 1, 6)  # per pair
    starts, degs, nzs, rels = starts[:m], degs[:m], nzs[:m], rels[:m]
    offsets[0] = soffs[0] = 0
    counts_k(node_off, rel_off, seg_base, indptr, indices, etime, ntime, by_node, w, wflag, rows,
             bounds, req, fan, repl, last, width, starts, degs, nzs, offsets, soffs, rels)
    np.cumsum(offsets, out=offsets)
    if wflag.any():
        np.cumsum(soffs, out=soffs)
    total = int(offsets[-1])
    pos = np.empty(total, np.int64)
    rel_out = np.empty(total, np.int64)
    eid_out = np.empty(total if with_eids else 0, np.int64)
    c = cpu.scratch_float64(int(soffs[-1]))
    positions_k((w,), None, wflag, nodes, keys, req, fan, repl, last, np.uint64(seed),
                np.uint64(hop), width, starts, degs, nzs, offsets, soffs, rels, c, pos, rel_out)
    gather_k = cpu._KERNELS[cpu._parallel(n)][2]
    gather_k(indices, edge_ids, pos, pos, eid_out, with_eids)
    counts = np.diff(offsets[::width]) if width else np.zeros(n, np.int64)
    return counts, pos, rel_out, eid_out


@numba.njit(cache=True, nogil=True)
def _count_hop(rel, h, per_hop):
    for e in range(rel.shape[0]):
        per_hop[rel[e], h] += 1


@numba.njit(cache=True, nogil=True)
def _scatter_hop(src, dst0, counts, rel, eid, loc, cursor, bounds, ei, eid_out):
    # a node's edges come in runs of one relation (its draws along it): one cursor update per
    # run, its destination read once per node (not per edge: measured 8.0 -> 6.5 ns per edge
    # on rmat:18, 3 types) and unsigned indices (no wraparound guards) in the copy
    e = 0
    for i in range(counts.shape[0]):
        d = loc[dst0 + i]
        end = e + counts[i]
        while e < end:
            r = rel[e]
            f = e + 1
            while f < end and rel[f] == r:
                f += 1
            p = cursor[r]
            cursor[r] = p + (f - e)
            s0 = np.uint64(bounds[r] + p)  # row 0 of relation r's [2, n] block, then row 1
            d0 = np.uint64(bounds[r + 1] + p)
            o = np.uint64(p)
            for m in range(f - e):
                u = np.uint64(e + m)
                j = np.uint64(m)
                ei[s0 + j] = loc[np.uint64(src[u])]
                ei[d0 + j] = d
                eid_out[o + j] = eid[u]
            e = f


def group_hops_by_relation(hops, loc: np.ndarray, num_relations: int
                           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A batch's sampled edges grouped by relation, in sampling order within each, in one pass
    over each hop's (a counting sort). ``hops[h] = (src, dst0, counts, rel, eid)``: hop ``h``'s
    edges, ``counts[i]`` of them from frontier node ``dst0 + i`` (batch index), in frontier
    order; ``src`` their batch indices. Returns ``(edge_index buffer, edge ids, per-relation
    offsets [R + 1], edges per relation and hop [R, H])``: with ``a, b = offsets[r], offsets[r +
    1]``, relation ``r``'s ``edge_index`` is ``buffer[2 * a: 2 * b].reshape(2, b - a)`` (row 0
    ``loc[src]``, row 1 ``loc[dst]``), its edge ids ``eid[a:b]``."""
    H = len(hops)
    per_hop = np.zeros((num_relations, H), np.int64)
    for h, (_, _, _, rel, _) in enumerate(hops):
        _count_hop(rel, h, per_hop)
    bounds = np.zeros(num_relations + 1, np.int64)
    np.cumsum(per_hop.sum(axis=1), out=bounds[1:])
    E = int(bounds[-1])
    ei = np.empty(2 * E, np.int64)
    eid_out = np.empty(E, np.int64)
    cursor = bounds[:num_relations].copy()
    if loc.dtype != np.int32 and loc.shape[0] < 2**31:  # half the bytes of its random reads
        loc = loc.astype(np.int32)
    for src, dst0, counts, rel, eid in hops:
        _scatter_hop(src, dst0, counts, rel, eid, loc, cursor, bounds, ei, eid_out)
    return ei, eid_out, bounds, per_hop


@numba.njit(cache=True, nogil=True)
def _group_nodes(nid, off, n_nodes, ids, loc, per_hop, bounds):
    T = off.shape[0] - 1
    i = 0
    for h in range(n_nodes.shape[0]):
        for _ in range(n_nodes[h]):
            t = type_of(off, nid[i])
            loc[i] = t  # the type, until pass 2 puts the index there
            per_hop[t, h] += 1
            i += 1
    for t in range(T):
        bounds[t + 1] = bounds[t] + per_hop[t].sum()
    cursor = bounds[:T].copy()
    for i in range(nid.shape[0]):
        t = loc[i]
        c = cursor[t]
        cursor[t] = c + 1
        ids[c] = nid[i] - off[t]
        loc[i] = c - bounds[t]


def group_nodes_by_type(nid: np.ndarray, node_type_offset: np.ndarray, n_nodes
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A batch's nodes (internal ids ``nid``, hop by hop, ``n_nodes`` per hop) grouped by type,
    in ``nid`` order within each, in two passes: ``(per-type ids, per-type offsets [T + 1],
    nodes per type and hop [T, H + 1], loc)``; type ``t``'s ids are ``ids[offsets[t]:offsets[t +
    1]]``, ``loc[i]`` is node ``i``'s index among its type's (int32 when it fits: the random
    reads of :func:`group_hops_by_relation` move half the bytes)."""
    nid = np.ascontiguousarray(nid, np.int64)
    off = np.ascontiguousarray(node_type_offset, np.int64)
    n_nodes = np.asarray(n_nodes, np.int64)
    if int(n_nodes.sum()) != nid.shape[0]:
        raise ValueError(f"{int(n_nodes.sum())} nodes per hop for {nid.shape[0]} nodes")
    T = off.shape[0] - 1
    ids = np.empty(nid.shape[0], np.int64)
    loc = np.empty(nid.shape[0], np.int32 if nid.shape[0] < 2**31 else np.int64)
    per_hop = np.zeros((T, n_nodes.shape[0]), np.int64)
    bounds = np.zeros(T + 1, np.int64)
    _group_nodes(nid, off, n_nodes, ids, loc, per_hop, bounds)
    return ids, bounds, per_hop, loc
