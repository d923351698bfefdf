"""The typed CPU kernel: one call samples one hop for every relation and every merged request.

Each frontier node is expanded along every relation that ends at its type, in relation order,
with its request's fanout for that relation; per (node, relation) the draws are those of
:mod:`mnmg_sampler.ops.cpu` or, where the relation has weights, :mod:`mnmg_sampler.ops.weighted`.

RNG keying: relation ``r`` of node ``v`` draws from stream ``stream_base(seed, key, hop + r *
2**32, v)``: relation 0 is exactly the homogeneous stream (a one-type, one-relation graph is
bit-identical to ``ops.cpu`` and ``ops.weighted``), and the relations of one node draw
independently (the hop counter goes through the 64-bit mix).

Phases, as in ``ops.cpu``: (0) per (node, relation) pair its segment, degree and sample count
(the only random reads of ``indptr``; the count is :func:`pair_count`, the CUDA kernel's too);
(1) the draws' CSR positions; (2) ``ops.cpu``'s gather. Pair ``j`` of node ``i`` is slot ``i *
width + j`` (``width``: the most relations of any type), so a one-type graph has exactly the
homogeneous kernel's passes. :func:`sample_typed_parts` runs the same phases over several
mapped parts at once.

Time (docs/temporal.md#sampling): a timed graph's segments are sorted by time, so with ``bounds``
each degree is cut to the admissible prefix (:func:`admissible_count`). Per request
(:data:`STRATEGIES`), ``"uniform"`` (0) draws as above on the prefix (bit-identical to the untimed
kernel when the bound is >= every time), ``"last"`` (1) takes the ``min(k, a)`` latest admissible
neighbors in ascending time. ``bounds=None`` compiles without the time branches.
"""

from __future__ import annotations

import numba
import numpy as np

from ..errors import SamplingInputError
from . import cpu
from .prefetch import prefetch

__all__ = ["sample_typed_neighbors", "sample_relations", "sample_typed_parts",
           "HOP_RELATION_SHIFT", "STRATEGIES", "admissible_count", "pair_count", "time_arrays",
           "group_hops_by_relation", "group_nodes_by_type"]

HOP_RELATION_SHIFT = 32  # relation r keys its stream with hop + (r << 32)
STRATEGIES = ("uniform", "last")  # temporal strategies, ``last[q]`` 0 and 1

sample_count = cpu.sample_count
node_positions = cpu.node_positions
stream_base = cpu.stream_base
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
def pair_count(w, s, d, f, rep, tail, weighted):
    """``(k, nz, scratch)`` of a (node, relation) pair with segment ``[s, s + d)`` and fanout
    ``f``: the neighbors it yields, its usable weights (weighted) and the running sums its
    weighted draws need (``d`` or 0); ``tail`` ("last") takes the latest ``min(f, d)``. The
    one count decision of the CPU and CUDA kernels."""
    if weighted and not tail:
        nz = usable_count(w, s, d)
        k = sample_count(nz, f, rep)
        return k, nz, d if draws_needed(nz, k, f, rep) else 0
    return sample_count(d, f, rep and not tail), 0, 0


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
    # entries of the node INDPTR_AHEAD on are prefetched)
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
                k, nz, sc = pair_count(w, s, d, fan[q, r], rep, tail, wflag[r] != 0)
                nzs[p] = nz
            counts[p + 1] = k  # the scratch is reused: unused slots must count nothing
            scounts[p + 1] = sc


def _positions_py(ws, part, wflag, nodes, keys, req, fan, replace, last, seed, hop, width,
                  starts, degs, nzs, offsets, soffs, rels, c, pos, rel_out):
    # Phase 1: the CSR positions of every pair's draws (its stream: hop + r * 2**32); "last"
    # (only with time; ``last is None`` is pruned) takes the prefix's tail. Weights: the
    # array ``ws[part[i]]`` of node i's part (:func:`sample_typed_parts`), ``ws[0]`` when ``part``
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


# --- the same hop over several typed parts at once (the shared topology of typed parts)
_NO_PART_TIMES = np.zeros(0, np.int64)
_NO_PART_TIMES.flags.writeable = False  # the type of the parts' mapped (read-only) arrays


@numba.njit(cache=True, nogil=True)
def _parts_pair_counts(bounds, type_offs, seg_bases, rel_off, indptrs, indices, origs, etimes,
                       ntime, by_node, ws, wflag, nodes, tbounds, last, req, fan, replace, width,
                       order, part, rng_ids, starts, degs, nzs, offsets, soffs, rels):
    # Phase 0, part by part: node i's relation j is pair i * width + j (as one CSR's); per
    # part the offsets of its nodes in ``order``. ``tbounds is None`` (no time) is pruned.
    per = cpu.group_by_part(nodes, bounds, part, order)
    for p in range(bounds.shape[0] - 1):
        indptr, orig, lo = indptrs[p], origs[p], bounds[p]
        t_off, s_base = type_offs[p], seg_bases[p]
        for g in range(per[p], per[p + 1]):  # (a) each pair's segment and relation (-1: none)
            ii = order[g]
            r0, R_t, s0 = node_relations(t_off, rel_off, s_base, nodes[ii] - lo)
            for j in range(width):
                x = np.uint64(ii * width + j)  # unsigned: no wraparound guards (as ops.cpu)
                starts[x] = s0 + j
                rels[x] = r0 + j if j < R_t else -1
        # (b) the random reads of indptr and orig_ids, independent, so their misses overlap
        # (with (a) in the same loop, each waited for the small tables' loads: measured 1.4x)
        for g in range(per[p], per[p + 1]):
            ii = order[g]
            i = np.uint64(ii)
            rng_ids[i] = orig[np.uint64(nodes[i] - lo)]
            for j in range(width):
                x = np.uint64(ii * width + j)
                s = d = 0
                if rels[x] >= 0:
                    u = np.uint64(starts[x])
                    s = indptr[u]
                    d = indptr[u + np.uint64(1)] - s
                    if tbounds is not None:
                        d = admissible_count(etimes[p], ntime, indices[p], by_node, s, d,
                                             tbounds[i])
                starts[x] = s
                degs[x] = d
    for i in range(nodes.shape[0]):  # the counts, in node order
        q = req[i]
        rep = replace[q] != 0
        tail = False
        if tbounds is not None:
            tail = last[q] != 0
        for j in range(width):
            x = i * width + j
            r = rels[x]
            k = 0
            sc = 0
            if r >= 0:
                k, nz, sc = pair_count(ws[part[i]], starts[x], degs[x], fan[q, r], rep, tail,
                                       wflag[r] != 0)
                nzs[x] = nz
            offsets[x + 1] = k  # the scratch is reused: unused slots must count nothing
            soffs[x + 1] = sc
    return per


def _parts_gather_py(indices, eids, per, order, width, offsets, pos, nbr, eid_out, with_eids):
    # Phase 2, part by part: independent random reads of the part's indices (and edge ids;
    # a part without them reports CSR positions).
    for p in range(per.shape[0] - 1):
        ind, eid = indices[p], eids[p]
        own_e = eid.shape[0] > 0
        for g in numba.prange(per[p], per[p + 1]):
            i = order[g]
            for m in range(offsets[i * width], offsets[(i + 1) * width]):
                u = np.uint64(m)
                q = np.uint64(pos[u])
                if with_eids:
                    eid_out[u] = eid[q] if own_e else q
                nbr[u] = ind[q]


_PARTS_GATHER = {par: cpu._compile(_parts_gather_py, par) for par in (True, False)}


def sample_typed_parts(bounds: np.ndarray, type_offs: np.ndarray, seg_bases: np.ndarray,
                       rel_offset: np.ndarray, weighted_rel: np.ndarray, indptrs: tuple,
                       indices: tuple, eids: tuple, origs: tuple, weights: tuple,
                       nodes: np.ndarray, keys: np.ndarray, req: np.ndarray,
                       fanouts: np.ndarray, replace: np.ndarray, seed: int, hop: int, *,
                       with_eids: bool = True, time_bounds: np.ndarray | None = None,
                       last: np.ndarray | None = None, edge_times: tuple | None = None,
                       node_time: np.ndarray | None = None
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One typed hop over every part at once: :func:`sample_typed_neighbors` for frontier nodes
    of any part, bit for bit one call per part put back in frontier order (same helpers,
    streams, order and time handling). Node ``v`` (a new id) is local row ``v - bounds[p]`` of
    the part ``p`` whose ``bounds`` hold it; its relations and segments come from that part's
    ``type_offset`` and ``seg_base``, its RNG id is the part's ``orig_ids[row]``. The nodes are
    grouped by part first (a counting sort: no branch on a random owner per node) and gathered
    part by part. No CUDA twin: the shared topology runs the CPU kernel only.

    Args:
        bounds: int64 ``[P + 1]``: part ``p`` owns new ids ``[bounds[p], bounds[p + 1])``.
        type_offs, seg_bases: each part's ``type_offset`` and ``seg_base`` (``[P, T + 1]``,
            ``[P, T]``).
        rel_offset, weighted_rel: the graph's ``rel_offset`` ``[T + 1]`` and uint8 per relation.
        indptrs, indices, eids, origs: one array per part, all of one type; weights: one
            float32 array per part (empty when unweighted).
        nodes: frontier new ids; keys, req, fanouts, replace: as
            :func:`sample_typed_neighbors`.
        time_bounds, last: as that kernel's ``bounds`` and ``last`` (``None``: no time).
        edge_times: with ``time_bounds``, one int64 array per part (per local CSR entry, all
            of one type), or ``None`` when the graph has node time only; then ``node_time``:
            int64 node time of every node by new id.

    Returns:
        ``(counts, neighbors (new ids), relations, edge_ids)`` in frontier order (int64).
    """
    nodes = np.ascontiguousarray(nodes, np.int64)
    keys = np.ascontiguousarray(keys, np.int64)
    req = np.ascontiguousarray(req, np.int64)
    fan = np.ascontiguousarray(fanouts, np.int64)
    repl = np.ascontiguousarray(replace, np.uint8)
    wflag = np.ascontiguousarray(weighted_rel, np.uint8)
    n = nodes.shape[0]
    etimes, ntime, by_node = tuple(_NO_PART_TIMES for _ in indptrs), _NO_PART_TIMES, False
    if time_bounds is not None:
        time_bounds = np.ascontiguousarray(time_bounds, np.int64)
        last = np.ascontiguousarray(np.zeros(repl.shape[0], np.uint8) if last is None else last,
                                    np.uint8)
        if edge_times is not None:
            etimes = edge_times
        elif node_time is not None:
            ntime, by_node = node_time, True
        else:
            raise SamplingInputError("time bounds for parts with no edge or node time",
                                     "temporal sampling has nothing to compare seeds' times "
                                     "with", "partition the graph with its time "
                                     "(docs/temporal.md) or sample without time")
    else:
        last = None
    width = int(np.diff(rel_offset).max(initial=0))
    m = n * width
    node_scr = cpu.scratch_int64(n)
    pair_scr = cpu.scratch_int64(m + 1, 6)
    offsets, soffs = pair_scr[3], pair_scr[4]
    offsets[0] = soffs[0] = 0
    per = _parts_pair_counts(np.ascontiguousarray(bounds, np.int64), type_offs, seg_bases,
                             rel_offset, indptrs, indices, origs, etimes, ntime, by_node,
                             weights, wflag, nodes, time_bounds, last, req, fan, repl, width,
                             *node_scr, *pair_scr)
    np.cumsum(offsets, out=offsets)
    if wflag.any():
        np.cumsum(soffs, out=soffs)
    total = int(offsets[m])
    pos = np.empty(total, np.int64)
    rel = np.empty(total, np.int64)
    eid = np.empty(total if with_eids else 0, np.int64)
    c = cpu.scratch_float64(int(soffs[m]))
    parallel = cpu._parallel(n)
    _KERNELS[parallel][1](weights, node_scr[1], wflag, node_scr[2], keys, req, fan, repl, last,
                          np.uint64(seed), np.uint64(hop), width, pair_scr[0], pair_scr[1],
                          pair_scr[2], offsets, soffs, pair_scr[5], c, pos, rel)
    _PARTS_GATHER[parallel](indices, eids, per, node_scr[0], width, offsets, pos, pos, eid,
                            with_eids)
    counts = np.diff(offsets[:m + 1:width]) if width else np.zeros(n, np.int64)
    return counts, pos, rel, eid


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
