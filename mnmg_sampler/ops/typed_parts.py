"""The typed kernel over several typed parts at once (the shared topology of typed parts): one
call samples a hop for every relation, every merged request and frontier nodes of any part.

Node ``v`` (a new id) is local row ``v - bounds[p]`` of the part ``p`` whose ``bounds`` hold it;
its relations and segments come from that part's ``type_offset`` and ``seg_base``, its RNG id is
the part's ``orig_ids[row]``. The draws are :func:`~mnmg_sampler.ops.typed.sample_typed_neighbors`'s
(same helpers, streams, order and time handling), so the output equals one call of that kernel
per part put back in frontier order, bit for bit; but (0) first groups the nodes by part (a
counting sort: no branch on a random owner per node) and (2) gathers part by part. No CUDA twin:
the shared topology runs the CPU kernel only.
"""

from __future__ import annotations

import numba
import numpy as np

from ..errors import SamplingInputError
from . import cpu, typed
from .typed import (
    admissible_count,
    draws_needed,
    node_relations,
    sample_count,
    usable_count,
    weighted_count,
)

__all__ = ["sample_typed_parts", "part_of"]

_NO_TIMES = np.zeros(0, np.int64)
_NO_TIMES.flags.writeable = False  # the type of the parts' mapped (read-only) arrays


@numba.njit(cache=True, nogil=True, inline="always")
def part_of(v, bounds, last):
    """The part ``p`` with ``bounds[p] <= v < bounds[p + 1]`` (empty parts skipped)."""
    p = 0
    while p < last and v >= bounds[p + 1]:
        p += 1
    return p


@numba.njit(cache=True, nogil=True)
def _pair_counts(bounds, type_offs, seg_bases, rel_off, indptrs, indices, origs, etimes, ntime,
                 by_node, ws, wflag, nodes, tbounds, last, req, fan, replace, width, order, part,
                 rng_ids, starts, degs, nzs, offsets, soffs, rels):
    # Phase 0, part by part: node i's relation j is pair i * width + j (``ops.typed``'s slots);
    # per part the offsets of its nodes in ``order``. ``tbounds is None`` (no time) is pruned.
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
                s = starts[x]
                d = degs[x]
                f = fan[q, r]
                if tail:
                    k = d if f < 0 else min(f, d)
                elif wflag[r] != 0:
                    nz = usable_count(ws[part[i]], s, d)
                    nzs[x] = nz
                    k = weighted_count(nz, f, rep)
                    if draws_needed(nz, k, f, rep):
                        sc = d
                else:
                    k = sample_count(d, f, rep)
            offsets[x + 1] = k  # the scratch is reused: unused slots must count nothing
            soffs[x + 1] = sc
    return per


def _gather_py(indices, eids, per, order, width, offsets, pos, nbr, eid_out, with_eids):
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


_GATHER = {par: cpu._compile(_gather_py, par) for par in (True, False)}


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
        type_offs, seg_bases: each part's ``type_offset`` and ``seg_base`` (``[P, T + 1]``,
            ``[P, T]``).
        rel_offset, weighted_rel: the graph's ``rel_offset`` ``[T + 1]`` and uint8 per relation.
        indptrs, indices, eids, origs: one array per part, all of one type; weights: one
            float32 array per part (empty when unweighted).
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
    width = int(np.diff(rel_offset).max(initial=0))
    m = n * width
    node_scr = cpu.scratch_int64(n)
    pair_scr = cpu.scratch_int64(m + 1, 6)
    offsets, soffs = pair_scr[3], pair_scr[4]
    offsets[0] = soffs[0] = 0
    per = _pair_counts(np.ascontiguousarray(bounds, np.int64), type_offs, seg_bases, rel_offset,
                       indptrs, indices, origs, etimes, ntime, by_node, weights, wflag, nodes,
                       time_bounds, last, req, fan, repl, width, *node_scr, *pair_scr)
    np.cumsum(offsets, out=offsets)
    if wflag.any():
        np.cumsum(soffs, out=soffs)
    total = int(offsets[m])
    pos = np.empty(total, np.int64)
    rel = np.empty(total, np.int64)
    eid = np.empty(total if with_eids else 0, np.int64)
    c = cpu.scratch_float64(int(soffs[m]))
    parallel = cpu._parallel(n)
    typed._KERNELS[parallel][1](weights, node_scr[1], wflag, node_scr[2], keys, req, fan, repl,
                                last, np.uint64(seed), np.uint64(hop), width, pair_scr[0],
                                pair_scr[1], pair_scr[2], offsets, soffs, pair_scr[5], c, pos,
                                rel)
    _GATHER[parallel](indices, eids, per, node_scr[0], width, offsets, pos, pos, eid, with_eids)
    counts = np.diff(offsets[:m + 1:width]) if width else np.zeros(n, np.int64)
    return counts, pos, rel, eid

