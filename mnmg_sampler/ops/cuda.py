"""CUDA sampling kernels (numba.cuda): the GPU twin of :mod:`mnmg_sampler.ops.typed`, and so of
``ops.cpu`` and ``ops.weighted``, its one-relation cases.

Bit-identical to the CPU kernels by construction: the device functions are compiled from the
**same Python source** (docs/rng.md#one-source-two-devices-compile_rng): the RNG,
``cpu.sample_positions``, the count, the weighted draws and the typed helpers (the count
decision ``typed.pair_count`` among them), re-bound to the device RNG. ``tests/gpu_sim``
compares both bit for bit under the simulator.

One call is two launches, one thread per node of the hop walking its type's relations in the
CPU's order (same streams and slots): ``counts`` sizes each node's output and weighted scratch, a
device ``torch.cumsum`` gives the offsets, ``fill`` draws and gathers; with ``bounds`` it is also
the temporal kernel's twin (one flag per launch). The output size is read back once per call
(the only synchronisation) to allocate the outputs from PyTorch's caching allocator.

Importing this module needs no GPU; one is checked for when a kernel runs. Under
``NUMBA_ENABLE_CUDASIM=1`` the kernels run in the simulator on CPU arrays (slow: tests only).
"""

from __future__ import annotations

import types
from collections.abc import Callable

import numpy as np
import torch
from numba import cuda

from ..system.gpu import numpy_compat, require_numba_cuda, simulator_enabled
from . import cpu, rng, typed, weighted

numpy_compat()  # before any kernel here compiles

__all__ = ["sample_neighbors_cuda", "sample_neighbors_weighted_cuda",
           "sample_typed_neighbors_cuda", "make_typed_kernels", "make_kernels",
           "make_weighted_kernels", "THREADS_PER_BLOCK"]

THREADS_PER_BLOCK = 128
_SIM_THREADS_PER_BLOCK = 32  # the simulator runs one Python thread per CUDA thread

_device = cuda.jit(device=True)
# The RNG and the CPU helpers' namespace, with every callee replaced by its device version.
_ns = rng.compile_rng(_device)
stream_base = _ns["stream_base"]


def device_function(py_func: Callable, name: str | None = None) -> Callable:
    """Compile a pure-Python helper for the device against the device RNG (``draw``, ...)."""
    f = types.FunctionType(py_func.__code__, _ns, name or py_func.__name__, py_func.__defaults__)
    compiled = _device(f)
    _ns[f.__name__] = compiled
    return compiled


sample_positions = device_function(cpu.sample_positions.py_func)


def _gather(indptr_r0, indices, eids, nbr, eid_out, o, k, with_eids):
    """Turn the ``k`` row positions at ``nbr[o:]`` into neighbor ids (and edge ids)."""
    has_eid = eids.shape[0] > 0
    for j in range(o, o + k):
        p = indptr_r0 + nbr[j]
        nbr[j] = indices[p]
        if with_eids:
            if has_eid:
                eid_out[j] = eids[p]
            else:
                eid_out[j] = p


gather = _device(_gather)


# the count, weighted sampling and the typed helpers, compiled for the device from the same
# source
weighted.compile_helpers(_device, _ns)
weighted_positions = _ns["weighted_positions"]
type_of = device_function(typed.type_of.py_func)
node_relations = device_function(typed.node_relations.py_func)
usable_count = device_function(typed.usable_count.py_func)
pair_count = device_function(typed.pair_count.py_func)
admissible_count = device_function(typed.admissible_count.py_func)
SHIFT = np.uint64(typed.HOP_RELATION_SHIFT)
_NONE = np.zeros(0, np.int64)  # the time arrays of an untimed call (never read)


def make_typed_kernels(positions: Callable = sample_positions,
                       wpositions: Callable = weighted_positions) -> tuple[Callable, Callable]:
    """The ``(counts, fill)`` kernels around device ``positions`` and ``wpositions`` (tests pass
    a wrong one to show the CPU/CUDA comparison can fail). ``timed`` is one flag per launch, so
    every thread takes the same branch; without it the time arrays, ``bounds`` and ``last`` are
    empty and never read. ``rel_out`` empty: the relations are not written."""

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
            k, _, sc = pair_count(w, s, d, fan[q, r], rep, tail, wflag[r] != 0)
            total += k
            scratch += sc
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
            k, nz, sc = pair_count(w, start, d, f, rep, tail, wflag[r] != 0)
            if k > 0:
                if tail:
                    for m in range(k):
                        nbr[o + m] = d - k + m
                elif wflag[r] != 0:
                    wpositions(nbr, o, w, start, d, nz, k, f, rep, base, c, so)
                else:
                    positions(nbr, o, d, k, f, rep, base)
                gather(start, indices, eids, nbr, eid_out, o, k, with_eids)
                if rel_out.shape[0] > 0:
                    for m in range(o, o + k):
                        rel_out[m] = r
            o += k
            so += sc

    return cuda.jit(counts_kernel), cuda.jit(fill_kernel)


_counts_kernel, _fill_kernel = make_typed_kernels()


def make_kernels(positions: Callable = sample_positions) -> tuple[Callable, Callable]:
    """The kernels of :func:`sample_neighbors_cuda` around a device uniform ``positions``."""
    return make_typed_kernels(positions)


def make_weighted_kernels(positions: Callable = weighted_positions) -> tuple[Callable, Callable]:
    """The kernels of :func:`sample_neighbors_weighted_cuda` around a device ``positions``."""
    return make_typed_kernels(wpositions=positions)


def _as_device_tensor(a, device: torch.device) -> torch.Tensor:
    t = torch.as_tensor(a)
    return t.to(device=device, dtype=torch.int64).contiguous()


class _Call:
    """What every call of the kernels shares: the device, the int64 inputs on it (``fanout`` and
    ``replace`` one per node) and how to launch there.

    Under the simulator the device is the CPU and kernels get numpy views; on a GPU they run on
    PyTorch's current stream in its primary context and read the tensors zero-copy with
    ``sync=False``: the inputs were produced on that same stream.
    """

    def __init__(self, indptr, indices, eids, rows, nodes, keys, fanout, replace) -> None:
        self.nb_cuda = require_numba_cuda()
        self.sim = simulator_enabled()
        if self.sim:
            device = torch.device("cpu")
        elif torch.is_tensor(indptr) and indptr.is_cuda:
            device = indptr.device
        else:
            device = torch.device("cuda", torch.cuda.current_device())
        self.device = device
        self.indptr = _as_device_tensor(indptr, device)
        self.indices = _as_device_tensor(indices, device)
        self.eids = (self.empty() if eids is None else _as_device_tensor(eids, device))
        self.rows = _as_device_tensor(rows, device).reshape(-1)
        self.nodes = _as_device_tensor(nodes, device).reshape(-1)
        self.keys = _as_device_tensor(keys, device).reshape(-1)
        self.n = n = self.rows.shape[0]
        self.fanouts = _as_device_tensor(fanout, device).reshape(-1).expand(n).contiguous()
        rep = torch.as_tensor(replace).to(device=device, dtype=torch.uint8).reshape(-1)
        self.replace = rep.expand(n).contiguous()

    def empty(self, n: int = 0, dtype: torch.dtype = torch.int64) -> torch.Tensor:
        return torch.empty(n, dtype=dtype, device=self.device)

    def nothing(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The result of a call over no node."""
        return self.empty(), self.empty(), self.empty()

    def run(self, body: Callable) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``body(launch)`` where ``launch(kernel, *args)`` starts ``kernel`` with one thread
        per node (tensors passed as device arrays, other arguments as they are)."""
        if self.sim:
            return body(self._launcher(_SIM_THREADS_PER_BLOCK, 0, lambda t: t.numpy()))
        nb_cuda = self.nb_cuda
        with nb_cuda.gpus[self.device.index]:
            stream = nb_cuda.external_stream(torch.cuda.current_stream(self.device).cuda_stream)
            return body(self._launcher(THREADS_PER_BLOCK, stream,
                                       lambda t: nb_cuda.as_cuda_array(t, sync=False)))

    def _launcher(self, tpb: int, stream, view: Callable) -> Callable:
        blocks = (self.n + tpb - 1) // tpb

        def launch(kernel, *args):
            kernel[blocks, tpb, stream](*(view(a) if torch.is_tensor(a) else a for a in args))

        return launch

    def offsets(self, counts: torch.Tensor) -> torch.Tensor:
        """Exclusive prefix sum of ``counts`` with the total last (on the device)."""
        out = torch.zeros(counts.shape[0] + 1, dtype=torch.int64, device=self.device)
        torch.cumsum(counts, 0, out=out[1:])
        return out


def _hop(a: _Call, tables: tuple, weights, wflag, req, fan, rep, seed: int, hop: int,
         with_eids: bool, kernels, with_rels: bool = True, times: tuple | None = None):
    """The two launches over ``a``'s nodes: ``tables`` the CSR's ``(node_off, rel_off,
    seg_base)``, ``req`` / ``fan`` / ``rep`` each node's request, its ``[Q, R]`` fanouts and
    per-request replace (on the device); ``times``: ``(etime, ntime, by_node, bounds, last)``."""

    def dev(x, dt=torch.int64):
        x = x if torch.is_tensor(x) else np.asarray(x)
        return torch.as_tensor(x).to(a.device, dt).contiguous()

    timed = times is not None
    etime, ntime, by_node, bounds, last = times if timed else (_NONE, _NONE, False, _NONE, _NONE)
    etime, ntime, bnd, lst = dev(etime), dev(ntime), dev(bounds), dev(last, torch.uint8)
    node_off, rel_off, seg_base = (dev(x) for x in tables)
    w = dev(np.zeros(0, np.float32) if weights is None else weights, torch.float32)
    wflag = dev(wflag, torch.uint8)
    counts_k, fill_k = kernels if kernels is not None else (_counts_kernel, _fill_kernel)
    flag = np.uint8(1 if with_eids else 0)
    bn, tm = np.bool_(by_node), np.bool_(timed)

    def body(launch):
        counts, scounts = a.empty(a.n), a.empty(a.n)
        launch(counts_k, node_off, rel_off, seg_base, a.indptr, a.indices, etime, ntime, bn, w,
               wflag, a.rows, tm, bnd, req, fan, rep, lst, counts, scounts)
        offsets, soffs = a.offsets(counts), a.offsets(scounts)
        total, scratch = torch.stack([offsets[-1], soffs[-1]]).tolist()  # one device -> host read
        nbr, rel = a.empty(total), a.empty(total if with_rels else 0)
        eid_out = a.empty(total if with_eids else 0)
        c = a.empty(scratch, torch.float64)
        if total:
            launch(fill_k, node_off, rel_off, seg_base, a.indptr, a.indices, a.eids, etime,
                   ntime, bn, w, wflag, a.rows, a.nodes, a.keys, tm, bnd, req, fan, rep, lst,
                   np.uint64(seed), np.uint64(hop), offsets, soffs, c, nbr, rel, eid_out, flag)
        return counts, nbr, rel, eid_out

    return a.run(body)


def sample_typed_neighbors_cuda(graph, rows, nodes, keys, req, fanouts, replace, seed: int,
                                hop: int, *, with_eids: bool = True,
                                kernels: tuple[Callable, Callable] | None = None,
                                bounds=None, last=None
                                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One typed hop on the GPU; arguments (``bounds`` / ``last`` for time) and results as
    :func:`mnmg_sampler.ops.typed.sample_typed_neighbors` (int64 tensors on the device).
    ``kernels`` replaces the kernel pair (tests only, see :func:`make_typed_kernels`)."""
    # _Call broadcasts one int64 per node into its ``fanouts`` slot: here that is the request
    # row of each node (the per-relation fanouts are the 2-D table)
    a = _Call(graph.indptr, graph.indices, graph.edge_ids, rows, nodes, keys, req, 0)
    if a.n == 0:
        e = a.empty()
        return e, e, a.empty(), a.empty()
    times = None
    if bounds is not None:
        times = (*typed.time_arrays(graph), bounds,
                 np.zeros(len(replace), np.uint8) if last is None else last)
    tables = (graph.node_type_offset, graph.rel_offset, graph.seg_base)
    fan = torch.as_tensor(np.asarray(fanouts)).to(a.device, torch.int64).contiguous()
    rep = torch.as_tensor(np.asarray(replace)).to(a.device, torch.uint8).contiguous()
    return _hop(a, tables, graph.weights, graph.weighted, a.fanouts, fan, rep, seed, hop,
                with_eids, kernels, times=times)


def _one_relation(a: _Call, weights, seed: int, hop: int, with_eids: bool, kernels):
    """A homogeneous CSR's hop: the typed kernels on its one relation, request ``i`` being
    node ``i`` (its fanout and replace flag)."""
    if a.n == 0:
        return a.nothing()
    tables = (np.array([0, a.indptr.shape[0] - 1]), np.array([0, 1]), np.zeros(1, np.int64))
    req = torch.arange(a.n, dtype=torch.int64, device=a.device)
    wflag = np.array([weights is not None], np.uint8)
    c, nb, _, e = _hop(a, tables, weights, wflag, req, a.fanouts.reshape(a.n, 1), a.replace,
                       seed, hop, with_eids, kernels, with_rels=False)
    return c, nb, e


def sample_neighbors_cuda(
    indptr: torch.Tensor | np.ndarray,
    indices: torch.Tensor | np.ndarray,
    eids: torch.Tensor | np.ndarray | None,
    rows: torch.Tensor | np.ndarray,
    nodes: torch.Tensor | np.ndarray,
    keys: torch.Tensor | np.ndarray,
    seed: int,
    hop: int,
    fanout: int | torch.Tensor | np.ndarray,
    replace: bool | torch.Tensor | np.ndarray,
    *,
    with_eids: bool = True,
    kernels: tuple[Callable, Callable] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sample one hop on the GPU; same arguments and results as :func:`cpu.sample_neighbors`.

    Inputs are moved to one CUDA device (:class:`_Call`); the results are int64 tensors
    ``(counts, neighbors, edge_ids)`` there, allocated by PyTorch. ``kernels`` replaces the
    kernel pair (tests only, see :func:`make_kernels`).
    """
    a = _Call(indptr, indices, eids, rows, nodes, keys, fanout, replace)
    return _one_relation(a, None, seed, hop, with_eids, kernels)


def sample_neighbors_weighted_cuda(
    indptr: torch.Tensor | np.ndarray,
    indices: torch.Tensor | np.ndarray,
    eids: torch.Tensor | np.ndarray | None,
    weights: torch.Tensor | np.ndarray,
    rows: torch.Tensor | np.ndarray,
    nodes: torch.Tensor | np.ndarray,
    keys: torch.Tensor | np.ndarray,
    seed: int,
    hop: int,
    fanout: int | torch.Tensor | np.ndarray,
    replace: bool | torch.Tensor | np.ndarray,
    *,
    with_eids: bool = True,
    kernels: tuple[Callable, Callable] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Weighted sampling on the GPU; same arguments and results as
    :func:`mnmg_sampler.ops.weighted.sample_neighbors_weighted` (int64 tensors on the device).

    The running sums of a drawing node's weights live in a float64 scratch tensor sized with
    the output. ``kernels`` replaces the kernel pair (tests only, see
    :func:`make_weighted_kernels`).
    """
    a = _Call(indptr, indices, eids, rows, nodes, keys, fanout, replace)
    return _one_relation(a, weights, seed, hop, with_eids, kernels)
