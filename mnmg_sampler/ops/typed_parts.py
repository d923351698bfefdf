"""The typed kernel over several typed parts at once: one call samples a hop for every relation,
every merged request and frontier nodes of any part (the shared topology of typed parts).

Node ``v`` (a new id) is local row ``v - bounds[p]`` of part ``p`` (``bounds[p] <= v <
bounds[p + 1]``); its relations and segments come from that part's ``type_offset`` and
``seg_base`` (:mod:`mnmg_sampler.graph.typed_partition`), its RNG id is the part's
``orig_ids[row]`` (the internal id). Per (node, relation) the draws are those of
:func:`~mnmg_sampler.ops.typed.sample_typed_neighbors` (the same helpers, streams
``hop + r * 2**32`` and node-then-relation order), so the output equals one call of that kernel
per part put back in frontier order, bit for bit. Two passes, as the typed CUDA twin: counts per
node (all its relations) and weighted scratch, then draws and gather.

Time, as :func:`~mnmg_sampler.ops.typed.sample_typed_neighbors` with ``bounds``: each degree is
cut to the admissible prefix (:func:`~mnmg_sampler.ops.typed.admissible_count` on the part's
edge times, or on the neighbors' node times by new id) and ``last`` takes the prefix's tail.
``bounds=None`` compiles a specialisation without the time branches. No CUDA twin: the shared
topology runs the CPU kernel only.
"""

from __future__ import annotations

import numba
import numpy as np

from ..errors import SamplingInputError
from . import cpu, typed, weighted
from .prefetch import prefetch
from .typed import (
    INDPTR_AHEAD,
    admissible_count,
    draws_needed,
    node_positions,
    node_relations,
    sample_count,
    stream_base,
    usable_count,
    weighted_count,
    weighted_positions,
)

__all__ = ["sample_typed_parts"]

SHIFT = np.uint64(typed.HOP_RELATION_SHIFT)
_NO_TIMES = np.zeros(0, np.int64)
_NO_TIMES.flags.writeable = False  # the type of the parts' mapped (read-only) arrays


@numba.njit(cache=True, nogil=True, inline="always")
def part_of(v, bounds, last):
    """The part ``p`` with ``bounds[p] <= v < bounds[p + 1]`` (empty parts skipped)."""
    p = 0
    while p < last and v >= bounds[p + 1]:
        p += 1
    return p


def _counts_py(bounds, type_offs, seg_bases, rel_off, indptrs, indices, etimes, ntime, by_node,
               ws, wflag, nodes, tbounds, last, req, fan, replace, counts, scounts):
    # counts[i + 1]: node i's samples over all its relations; scounts[i + 1]: its weighted
    # scratch (the degree of every relation that draws, as ops.typed sizes it per pair).
    # ``tbounds is None`` (no time) is pruned at compile time. The indptr entries of the node
    # INDPTR_AHEAD on are prefetched, so the random reads' misses overlap (as ops.typed's).
    n = nodes.shape[0]
    lp = bounds.shape[0] - 2
    for i in numba.prange(n):
        if i + INDPTR_AHEAD < n:
            va = nodes[i + INDPTR_AHEAD]
            pa = part_of(va, bounds, lp)
            _, R_a, s_a = node_relations(type_offs[pa], rel_off, seg_bases[pa], va - bounds[pa])
            prefetch(indptrs[pa], s_a)
            prefetch(indptrs[pa], s_a + R_a)
        v = nodes[i]
        p = part_of(v, bounds, lp)
        r0, R_t, s0 = node_relations(type_offs[p], rel_off, seg_bases[p], v - bounds[p])
        indptr = indptrs[p]
        q = req[i]
        rep = replace[q] != 0
        tail = False
        if tbounds is not None:
            tail = last[q] != 0
        total = 0
        scratch = 0
        for j in range(R_t):
            r = r0 + j
            s = indptr[s0 + j]
            d = indptr[s0 + j + 1] - s
            if tbounds is not None:
                d = admissible_count(etimes[p], ntime, indices[p], by_node, s, d, tbounds[i])
            f = fan[q, r]
            if tail:
                k = d if f < 0 else min(f, d)
            elif wflag[r] != 0:
                nz = usable_count(ws[p], s, d)
                k = weighted_count(nz, f, rep)
                if draws_needed(nz, k, f, rep):
                    scratch += d
            else:
                k = sample_count(d, f, rep)
            total += k
        counts[i + 1] = total
        scounts[i + 1] = scratch


def _fill_py(bounds, type_offs, seg_bases, rel_off, indptrs, indices, eids, origs, etimes,
             ntime, by_node, ws, wflag, nodes, tbounds, last, keys, req, fan, replace, seed, hop,
             offsets, soffs, c, nbr, rel_out, eid_out, with_eids):
    n = nodes.shape[0]
    lp = bounds.shape[0] - 2
    for i in numba.prange(n):
        v = nodes[i]
        p = part_of(v, bounds, lp)
        row = v - bounds[p]
        r0, R_t, s0 = node_relations(type_offs[p], rel_off, seg_bases[p], row)
        indptr = indptrs[p]
        idx = indices[p]
        eid = eids[p]
        w = ws[p]
        node = origs[p][row]
        q = req[i]
        rep = replace[q]
        tail = False
        if tbounds is not None:
            tail = last[q] != 0
        o = offsets[i]
        so = soffs[i]
        for j in range(R_t):
            r = r0 + j
            start = indptr[s0 + j]
            d = indptr[s0 + j + 1] - start
            if tbounds is not None:
                d = admissible_count(etimes[p], ntime, idx, by_node, start, d, tbounds[i])
            f = fan[q, r]
            hop_r = hop + (np.uint64(r) << SHIFT)
            if tail:
                k = d if f < 0 else min(f, d)
                for m in range(k):
                    nbr[o + m] = start + d - k + m
            elif wflag[r] != 0:
                nz = usable_count(w, start, d)
                k = weighted_count(nz, f, rep != 0)
                if k > 0:
                    base = stream_base(seed, keys[i], hop_r, node)
                    weighted_positions(nbr, o, w, start, d, nz, k, f, rep != 0, base, c, so)
                    for m in range(o, o + k):
                        nbr[m] += start
                if draws_needed(nz, k, f, rep != 0):
                    so += d
            else:
                k = sample_count(d, f, rep != 0)
                node_positions(nbr, o, k, start, d, f, rep, seed, keys[i], hop_r, node)
            for m in range(o, o + k):
                e = nbr[m]
                if with_eids:
                    eid_out[m] = eid[e]
                nbr[m] = idx[e]
                rel_out[m] = r
            o += k


_KERNELS = {par: tuple(cpu._compile(f, par) for f in (_counts_py, _fill_py))
            for par in (True, False)}


def sample_typed_parts(bounds: np.ndarray, type_offs: np.ndarray, seg_bases: np.ndarray,
                       rel_offset: np.ndarray, weighted_rel: np.ndarray, indptrs: tuple,
                       indices: tuple, eids: tuple, origs: tuple, weights: tuple,
                       nodes: np.ndarray, keys: np.ndarray, req: np.ndarray,
                       fanouts: np.ndarray, replace: np.ndarray, seed: int, hop: int, *,
                       with_eids: bool = True, time_bounds: np.ndarray | None = None,
                       last: np.ndarray | None = None, edge_times: tuple | None = None,
                       node_time: np.ndarray | None = None
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One typed hop over every part (module docstring).

    Args:
        bounds: int64 ``[P + 1]``: part ``p`` owns new ids ``[bounds[p], bounds[p + 1])``.
        type_offs, seg_bases: int64 ``[P, T + 1]`` and ``[P, T]``: each part's
            ``type_offset`` and ``seg_base``.
        rel_offset, weighted_rel: the graph's ``rel_offset`` ``[T + 1]`` and uint8 per relation.
        indptrs, indices, eids, origs: one array per part, all of one type (e.g. read-only
            contiguous int64); weights: one float32 array per part (empty when unweighted).
        nodes: frontier new ids; keys, req, fanouts, replace: as
            :func:`~mnmg_sampler.ops.typed.sample_typed_neighbors`.
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
    etimes, ntime, by_node = tuple(_NO_TIMES for _ in indptrs), _NO_TIMES, False
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
    counts_k, fill_k = _KERNELS[cpu._parallel(n)]
    offsets = np.zeros(n + 1, np.int64)
    soffs = np.zeros(n + 1, np.int64)
    counts_k(bounds, type_offs, seg_bases, rel_offset, indptrs, indices, etimes, ntime, by_node,
             weights, wflag, nodes, time_bounds, last, req, fan, repl, offsets, soffs)
    counts = offsets[1:].copy()
    np.cumsum(offsets, out=offsets)
    np.cumsum(soffs, out=soffs)
    total = int(offsets[-1])
    nbr = np.empty(total, np.int64)
    rel = np.empty(total, np.int64)
    eid = np.empty(total if with_eids else 0, np.int64)
    c = weighted._scratch(int(soffs[-1]))
    if total:
        fill_k(bounds, type_offs, seg_bases, rel_offset, indptrs, indices, eids, origs, etimes,
               ntime, by_node, weights, wflag, nodes, time_bounds, last, keys, req, fan, repl,
               np.uint64(seed), np.uint64(hop), offsets, soffs, c, nbr, rel, eid, with_eids)
    return counts, nbr, rel, eid
