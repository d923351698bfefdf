"""The temporal kernel on the GPU (numba.cuda): the twin of :mod:`mnmg_sampler.ops.temporal`.

The typed twin (:mod:`mnmg_sampler.ops.cuda_typed`) with each (node, relation) degree cut to the
admissible prefix (the CPU kernel's ``admissible_count``, compiled as a device function), and
``"last"`` taking the prefix's tail. Same streams, slots and order as the CPU kernel, so the
output is bit-identical (``tests/gpu_sim/test_cuda_temporal.py``, Numba's CUDA simulator).
"""

from __future__ import annotations

import numpy as np
import torch
from numba import cuda

from . import cuda as ocuda
from . import cuda_typed, temporal

__all__ = ["sample_temporal_neighbors_cuda"]

admissible_count = ocuda.device_function(temporal.admissible_count.py_func)
node_relations = cuda_typed.node_relations
usable_count = cuda_typed.usable_count
sample_count = cuda_typed.sample_count
sample_positions = cuda_typed.sample_positions
weighted_count = cuda_typed.weighted_count
draws_needed = cuda_typed.draws_needed
weighted_positions = cuda_typed.weighted_positions
stream_base = cuda_typed.stream_base
gather = cuda_typed.gather
SHIFT = cuda_typed.SHIFT


@cuda.jit
def _counts_kernel(node_off, rel_off, seg_base, indptr, indices, etime, ntime, by_node, w, wflag,
                   rows, bounds, req, fan, replace, last, counts, scounts):
    i = cuda.grid(1)
    if i >= rows.shape[0]:
        return
    r0, R_t, s0 = node_relations(node_off, rel_off, seg_base, rows[i])
    q = req[i]
    rep = replace[q] != 0
    total = 0
    scratch = 0
    for j in range(R_t):
        r = r0 + j
        s = indptr[s0 + j]
        d = admissible_count(etime, ntime, indices, by_node, s, indptr[s0 + j + 1] - s,
                             bounds[i])
        f = fan[q, r]
        if last[q] != 0:
            k = d if f < 0 else min(f, d)
        elif wflag[r] != 0:
            nz = usable_count(w, s, d)
            k = weighted_count(nz, f, rep)
            if draws_needed(nz, k, f, rep):
                scratch += d
        else:
            k = sample_count(d, f, rep)
        total += k
    counts[i] = total
    scounts[i] = scratch


@cuda.jit
def _fill_kernel(node_off, rel_off, seg_base, indptr, indices, eids, etime, ntime, by_node, w,
                 wflag, rows, nodes, keys, bounds, req, fan, replace, last, seed, hop, offsets,
                 soffs, c, nbr, rel_out, eid_out, with_eids):
    i = cuda.grid(1)
    if i >= rows.shape[0]:
        return
    r0, R_t, s0 = node_relations(node_off, rel_off, seg_base, rows[i])
    q = req[i]
    rep = replace[q] != 0
    o = offsets[i]
    so = soffs[i]
    for j in range(R_t):
        r = r0 + j
        start = indptr[s0 + j]
        d = admissible_count(etime, ntime, indices, by_node, start, indptr[s0 + j + 1] - start,
                             bounds[i])
        f = fan[q, r]
        base = stream_base(seed, keys[i], hop + (np.uint64(r) << SHIFT), nodes[i])
        if last[q] != 0:
            k = d if f < 0 else min(f, d)
            for m in range(k):
                nbr[o + m] = d - k + m
        elif wflag[r] != 0:
            nz = usable_count(w, start, d)
            k = weighted_count(nz, f, rep)
            if k > 0:
                weighted_positions(nbr, o, w, start, d, nz, k, f, rep, base, c, so)
            if draws_needed(nz, k, f, rep):
                so += d
        else:
            k = sample_count(d, f, rep)
            if k > 0:
                sample_positions(nbr, o, d, k, f, rep, base)
        if k > 0:
            gather(start, indices, eids, nbr, eid_out, o, k, with_eids)
            for m in range(o, o + k):
                rel_out[m] = r
        o += k


def sample_temporal_neighbors_cuda(graph, rows, nodes, keys, bounds, req, fanouts, replace, last,
                                   seed: int, hop: int, *, with_eids: bool = True
                                   ) -> tuple[torch.Tensor, ...]:
    """One temporal hop on the GPU; arguments and results as
    :func:`mnmg_sampler.ops.temporal.sample_temporal_neighbors` (int64 tensors on the device)."""
    a = ocuda._Call(graph.indptr, graph.indices, graph.edge_ids, rows, nodes, keys, req, 0)
    if a.n == 0:
        e = a.empty()
        return e, e, a.empty(), a.empty()
    req_d = a.fanouts

    def dev(x, dt=torch.int64):
        return torch.as_tensor(np.asarray(x)).to(a.device, dt).contiguous()

    etime_h, ntime_h, by_node = temporal.time_arrays(graph)
    etime, ntime, bnd = dev(etime_h), dev(ntime_h), dev(bounds)
    node_off, rel_off, seg_base = (dev(x) for x in (graph.node_type_offset, graph.rel_offset,
                                                    graph.seg_base))
    w = dev(np.zeros(0, np.float32) if graph.weights is None else graph.weights, torch.float32)
    wflag, fan, rep = dev(graph.weighted, torch.uint8), dev(fanouts), dev(replace, torch.uint8)
    lst = dev(last, torch.uint8)
    flag = np.uint8(1 if with_eids else 0)
    bn = np.bool_(by_node)

    def body(launch):
        counts, scounts = a.empty(a.n), a.empty(a.n)
        launch(_counts_kernel, node_off, rel_off, seg_base, a.indptr, a.indices, etime, ntime,
               bn, w, wflag, a.rows, bnd, req_d, fan, rep, lst, counts, scounts)
        offsets, soffs = a.offsets(counts), a.offsets(scounts)
        total, scratch = torch.stack([offsets[-1], soffs[-1]]).tolist()
        nbr, rel = a.empty(total), a.empty(total)
        eid_out = a.empty(total if with_eids else 0)
        c = a.empty(scratch, torch.float64)
        if total:
            launch(_fill_kernel, node_off, rel_off, seg_base, a.indptr, a.indices, a.eids,
                   etime, ntime, bn, w, wflag, a.rows, a.nodes, a.keys, bnd, req_d, fan, rep,
                   lst, np.uint64(seed), np.uint64(hop), offsets, soffs, c, nbr, rel, eid_out,
                   flag)
        return counts, nbr, rel, eid_out

    return a.run(body)
