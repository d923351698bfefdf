"""CUDA sampling kernels (numba.cuda): the GPU twin of :mod:`mnmg_sampler.ops.cpu`.

Bit-identical to the CPU kernel by construction where possible: the device functions are
compiled from the **same Python source** as the CPU ones. :func:`rng.compile_rng` compiles the RNG
with ``cuda.jit(device=True)``, and ``cpu.sample_positions`` (Floyd's algorithm, its slot order,
the ``fanout=-1`` and ``deg <= fanout`` cases) is re-bound to that device RNG and compiled for the
device too. Only ``sample_count`` is mirrored by hand, because numba's CUDA ``min`` does not
compile. Tests run both under Numba's CUDA simulator and compare outputs bit for bit
(``tests/gpu_sim``), and compile both kernels to PTX when an NVVM is available.

One call is two launches over every node of the hop (all merged requests at once), one thread
per node: ``_counts`` sizes each node's output, a device ``torch.cumsum`` gives the offsets, and
``_fill`` writes neighbors and edge ids. The output size is read back to the host once per call
(the only synchronisation), to allocate the outputs from PyTorch's caching allocator.

Importing this module needs numba (a core dependency) but no GPU; a GPU is checked for when
:func:`sample_neighbors_cuda` runs. Under ``NUMBA_ENABLE_CUDASIM=1`` the kernels run in the
simulator on CPU tensors or numpy arrays (slow: tests only).
"""

from __future__ import annotations

import types
from collections.abc import Callable

import numpy as np
import torch
from numba import cuda

from ..system.gpu import numpy_compat, require_numba_cuda, simulator_enabled
from . import cpu, rng, weighted

numpy_compat()  # before any kernel here compiles

__all__ = ["sample_neighbors_cuda", "sample_neighbors_weighted_cuda", "make_kernels",
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


def _sample_count(deg, fanout, replace):
    """``cpu.sample_count`` without ``min``: numba's CUDA ``min`` overload fails to compile."""
    if deg <= 0:
        return 0
    if fanout < 0:
        return deg
    if replace:
        return fanout
    if deg < fanout:
        return deg
    return fanout


sample_count = device_function(_sample_count, "sample_count")
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


def make_kernels(positions: Callable = sample_positions) -> tuple[Callable, Callable]:
    """Build the ``(counts, fill)`` kernels around a device ``positions`` function.

    The default is the production kernel; tests pass a deliberately wrong ``positions`` to show
    that the CPU/CUDA comparison can fail.
    """

    def counts_kernel(indptr, rows, fanouts, replace, counts):
        i = cuda.grid(1)
        if i < rows.shape[0]:
            r = rows[i]
            counts[i] = sample_count(indptr[r + 1] - indptr[r], fanouts[i], replace[i] != 0)

    def fill_kernel(indptr, indices, eids, rows, nodes, keys, seed, hop, fanouts, replace,
                    offsets, nbr, eid_out, with_eids):
        i = cuda.grid(1)
        if i >= rows.shape[0]:
            return
        o = offsets[i]
        k = offsets[i + 1] - o
        if k == 0:
            return
        r = rows[i]
        start = indptr[r]
        base = stream_base(seed, keys[i], hop, nodes[i])
        positions(nbr, o, indptr[r + 1] - start, k, fanouts[i], replace[i] != 0, base)
        gather(start, indices, eids, nbr, eid_out, o, k, with_eids)

    return cuda.jit(counts_kernel), cuda.jit(fill_kernel)


_counts_kernel, _fill_kernel = make_kernels()


def _as_device_tensor(a, device: torch.device) -> torch.Tensor:
    t = torch.as_tensor(a)
    return t.to(device=device, dtype=torch.int64).contiguous()


class _Call:
    """What every call of the kernels shares: the device, the int64 inputs on it (``fanout`` and
    ``replace`` broadcast to one value per node) and how to launch there.

    Under the simulator the device is the CPU and kernels get numpy views; on a GPU they run on
    PyTorch's current stream inside numba's context for the device (the primary context PyTorch
    uses) and read the tensors zero-copy with ``sync=False``: the inputs were produced on that
    same stream.
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

    Inputs are torch tensors on one CUDA device (CPU tensors or numpy arrays are moved there;
    under the simulator everything stays on the CPU). Kernels run on PyTorch's current stream
    and read the tensors zero-copy through ``__cuda_array_interface__``; the results are int64
    tensors ``(counts, neighbors, edge_ids)`` on the same device, allocated by PyTorch
    (``edge_ids`` empty when ``with_eids=False``).
    ``kernels`` replaces the kernel pair (tests only, see :func:`make_kernels`).
    """
    a = _Call(indptr, indices, eids, rows, nodes, keys, fanout, replace)
    if a.n == 0:
        return a.nothing()
    counts_k, fill_k = kernels if kernels is not None else (_counts_kernel, _fill_kernel)
    flag = np.uint8(1 if with_eids else 0)

    def body(launch):
        counts = a.empty(a.n)
        launch(counts_k, a.indptr, a.rows, a.fanouts, a.replace, counts)
        offsets = a.offsets(counts)
        total = int(offsets[-1])  # one device -> host read, to size the outputs
        nbr, eid_out = a.empty(total), a.empty(total if with_eids else 0)
        if total:
            launch(fill_k, a.indptr, a.indices, a.eids, a.rows, a.nodes, a.keys,
                   np.uint64(seed), np.uint64(hop), a.fanouts, a.replace, offsets, nbr, eid_out,
                   flag)
        return counts, nbr, eid_out

    return a.run(body)


# --- weighted sampling: ops.weighted's helpers, compiled for the device from the same source ---
weighted.compile_helpers(_device, _ns)
weighted_count = _ns["weighted_count"]
draws_needed = _ns["draws_needed"]
usable = _ns["usable"]
weighted_positions = _ns["weighted_positions"]


def make_weighted_kernels(positions: Callable = weighted_positions) -> tuple[Callable, Callable]:
    """The ``(counts, fill)`` kernels of weighted sampling around a device ``positions``.

    ``counts`` also writes each node's number of positive weights and the float64 scratch it
    needs (its degree when it draws); ``fill`` draws into that scratch and gathers.
    """

    def wcounts_kernel(indptr, w, rows, fanouts, replace, nzs, counts, scounts):
        i = cuda.grid(1)
        if i < rows.shape[0]:
            r = rows[i]
            s = indptr[r]
            d = indptr[r + 1] - s
            nz = 0
            for p in range(s, s + d):
                if usable(np.float64(w[p])):
                    nz += 1
            nzs[i] = nz
            f = fanouts[i]
            rep = replace[i] != 0
            k = weighted_count(nz, f, rep)
            counts[i] = k
            scounts[i] = d if draws_needed(nz, k, f, rep) else 0

    def wfill_kernel(indptr, indices, eids, w, rows, nodes, keys, seed, hop, fanouts, replace,
                     nzs, offsets, soffs, c, nbr, eid_out, with_eids):
        i = cuda.grid(1)
        if i >= rows.shape[0]:
            return
        o = offsets[i]
        k = offsets[i + 1] - o
        if k == 0:
            return
        r = rows[i]
        start = indptr[r]
        base = stream_base(seed, keys[i], hop, nodes[i])
        positions(nbr, o, w, start, indptr[r + 1] - start, nzs[i], k, fanouts[i],
                  replace[i] != 0, base, c, soffs[i])
        gather(start, indices, eids, nbr, eid_out, o, k, with_eids)

    return cuda.jit(wcounts_kernel), cuda.jit(wfill_kernel)


_wcounts_kernel, _wfill_kernel = make_weighted_kernels()


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

    One thread per node, as :func:`sample_neighbors_cuda`; the running sums of a drawing node's
    weights live in a float64 scratch tensor sized by one device -> host read (with the output
    size). ``kernels`` replaces the kernel pair (tests only, see :func:`make_weighted_kernels`).
    """
    a = _Call(indptr, indices, eids, rows, nodes, keys, fanout, replace)
    if a.n == 0:
        return a.nothing()
    counts_k, fill_k = kernels if kernels is not None else (_wcounts_kernel, _wfill_kernel)
    w = torch.as_tensor(weights).to(device=a.device, dtype=torch.float32).contiguous()
    flag = np.uint8(1 if with_eids else 0)

    def body(launch):
        nzs, counts, scounts = a.empty(a.n), a.empty(a.n), a.empty(a.n)
        launch(counts_k, a.indptr, w, a.rows, a.fanouts, a.replace, nzs, counts, scounts)
        offsets, soffs = a.offsets(counts), a.offsets(scounts)
        total, scratch = torch.stack([offsets[-1], soffs[-1]]).tolist()  # one device -> host read
        nbr, eid_out = a.empty(total), a.empty(total if with_eids else 0)
        c = a.empty(scratch, torch.float64)
        if total:
            launch(fill_k, a.indptr, a.indices, a.eids, w, a.rows, a.nodes, a.keys,
                   np.uint64(seed), np.uint64(hop), a.fanouts, a.replace, nzs, offsets, soffs,
                   c, nbr, eid_out, flag)
        return counts, nbr, eid_out

    return a.run(body)
