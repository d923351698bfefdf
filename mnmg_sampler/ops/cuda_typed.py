"""The typed kernel on the GPU (numba.cuda): the twin of :mod:`mnmg_sampler.ops.typed`.

One thread per frontier node walks the relations of its type in order, with the device helpers
:mod:`mnmg_sampler.ops.cuda` compiles from the CPU kernels' Python source (RNG, Floyd, weighted
draws, gather), so the output is bit-identical to the CPU kernel's: same streams
(``hop + r * 2**32`` for relation ``r``), same slots, same node-then-relation order. Two
launches, as the homogeneous twin: ``counts`` sizes each node's output (all its relations) and
weighted scratch, then ``fill`` draws and gathers. With ``bounds`` it is also the twin of
temporal kernel (degrees cut to the admissible prefix, ``"last"`` the tail),
switched by one flag per launch. Tested under Numba's CUDA simulator
(``tests/gpu_sim/test_cuda_typed.py``, ``tests/gpu_sim/test_cuda_temporal.py``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from numba import cuda

from . import cuda as ocuda
from . import typed

__all__ = ["sample_typed_neighbors_cuda", "make_typed_kernels"]

type_of = ocuda.device_function(typed.type_of.py_func)
node_relations = ocuda.device_function(typed.node_relations.py_func)
usable_count = ocuda.device_function(typed.usable_count.py_func)
admissible_count = ocuda.device_function(typed.admissible_count.py_func)
sample_count = ocuda.sample_count
sample_positions = ocuda.sample_positions
weighted_count = ocuda.weighted_count
draws_needed = ocuda.draws_needed
weighted_positions = ocuda.weighted_positions
stream_base = ocuda.stream_base
gather = ocuda.gather
SHIFT = np.uint64(typed.HOP_RELATION_SHIFT)
_NONE = np.zeros(0, np.int64)  # the time arrays of an untimed call (never read)


def make_typed_kernels(positions: Callable = sample_positions) -> tuple[Callable, Callable]:
    """The ``(counts, fill)`` kernels around a device uniform ``positions`` (tests pass a wrong
    one to show the CPU/CUDA comparison can fail). ``timed`` (one flag for the launch, so every
    thread takes the same branch) cuts each degree to the admissible prefix; without it the
    time arrays, ``bounds`` and ``last`` are empty and never read."""

    def counts_kernel(node_off, rel_off, seg_base, indptr, indices, etime, ntime, by_node, w,
                      wflag, rows, timed, bounds, req, fan, replace, last, counts, scounts):
        i = cuda.grid(1)
        if i >= rows.shape[0]:
            return
        r0, R_t, s0 = node_relations(node_off, rel_off, seg_base, rows[i])
        q = req[i]
        rep = replace[q] != 0
        tail = timed and last[q] != 0
        total = 0
        scratch = 0
        for j in range(R_t):
            r = r0 + j
            s = indptr[s0 + j]
            d = indptr[s0 + j + 1] - s
            if timed:
                d = admissible_count(etime, ntime, indices, by_node, s, d, bounds[i])
            f = fan[q, r]
            if tail:
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

    def fill_kernel(node_off, rel_off, seg_base, indptr, indices, eids, etime, ntime, by_node, w,
                    wflag, rows, nodes, keys, timed, bounds, req, fan, replace, last, seed, hop,
                    offsets, soffs, c, nbr, rel_out, eid_out, with_eids):
        i = cuda.grid(1)
        if i >= rows.shape[0]:
            return
        r0, R_t, s0 = node_relations(node_off, rel_off, seg_base, rows[i])
        q = req[i]
        rep = replace[q] != 0
        tail = timed and last[q] != 0
        o = offsets[i]
        so = soffs[i]
        for j in range(R_t):
            r = r0 + j
            start = indptr[s0 + j]
            d = indptr[s0 + j + 1] - start
            if timed:
                d = admissible_count(etime, ntime, indices, by_node, start, d, bounds[i])
            f = fan[q, r]
            base = stream_base(seed, keys[i], hop + (np.uint64(r) << SHIFT), nodes[i])
            if tail:
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
                    positions(nbr, o, d, k, f, rep, base)
            if k > 0:
                gather(start, indices, eids, nbr, eid_out, o, k, with_eids)
                for m in range(o, o + k):
                    rel_out[m] = r
            o += k

    return cuda.jit(counts_kernel), cuda.jit(fill_kernel)


_counts_kernel, _fill_kernel = make_typed_kernels()


def sample_typed_neighbors_cuda(graph, rows, nodes, keys, req, fanouts, replace, seed: int,
                                hop: int, *, with_eids: bool = True,
                                kernels: tuple[Callable, Callable] | None = None,
                                bounds=None, last=None
                                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One typed hop on the GPU; arguments (``bounds`` / ``last`` for time) and results as
    :func:`mnmg_sampler.ops.typed.sample_typed_neighbors` (int64 tensors on the device)."""
    # _Call broadcasts one int64 per node into its ``fanouts`` slot: here that is the request
    # row of each node (the per-relation fanouts are the 2-D table below)
    a = ocuda._Call(graph.indptr, graph.indices, graph.edge_ids, rows, nodes, keys, req, 0)
    if a.n == 0:
        e = a.empty()
        return e, e, a.empty(), a.empty()
    req_d = a.fanouts

    def dev(x, dt=torch.int64):
        return torch.as_tensor(np.asarray(x)).to(a.device, dt).contiguous()

    timed = bounds is not None
    if timed:
        etime_h, ntime_h, by_node = typed.time_arrays(graph)
        last_h = np.zeros(len(replace), np.uint8) if last is None else last
    else:
        etime_h, ntime_h, by_node, bounds, last_h = _NONE, _NONE, False, _NONE, _NONE
    etime, ntime, bnd, lst = dev(etime_h), dev(ntime_h), dev(bounds), dev(last_h, torch.uint8)
    node_off, rel_off, seg_base = (dev(x) for x in (graph.node_type_offset, graph.rel_offset,
                                                    graph.seg_base))
    w = dev(np.zeros(0, np.float32) if graph.weights is None else graph.weights, torch.float32)
    wflag, fan, rep = dev(graph.weighted, torch.uint8), dev(fanouts), dev(replace, torch.uint8)
    counts_k, fill_k = kernels if kernels is not None else (_counts_kernel, _fill_kernel)
    flag = np.uint8(1 if with_eids else 0)
    bn, tm = np.bool_(by_node), np.bool_(timed)

    def body(launch):
        counts, scounts = a.empty(a.n), a.empty(a.n)
        launch(counts_k, node_off, rel_off, seg_base, a.indptr, a.indices, etime, ntime, bn, w,
               wflag, a.rows, tm, bnd, req_d, fan, rep, lst, counts, scounts)
        offsets, soffs = a.offsets(counts), a.offsets(scounts)
        total, scratch = torch.stack([offsets[-1], soffs[-1]]).tolist()  # one device -> host read
        nbr, rel = a.empty(total), a.empty(total)
        eid_out = a.empty(total if with_eids else 0)
        c = a.empty(scratch, torch.float64)
        if total:
            launch(fill_k, node_off, rel_off, seg_base, a.indptr, a.indices, a.eids, etime,
                   ntime, bn, w, wflag, a.rows, a.nodes, a.keys, tm, bnd, req_d, fan, rep, lst,
                   np.uint64(seed), np.uint64(hop), offsets, soffs, c, nbr, rel, eid_out, flag)
        return counts, nbr, rel, eid_out

    return a.run(body)
