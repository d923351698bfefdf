"""The typed hop kernel on a CUDA device for :class:`~.typed_sampler.DistTypedSampler`.

The part's typed CSR (``indptr``, ``indices``, ``edge_ids``) and its internal ids live on the
device; each hop costs one counted host -> device copy (rows, keys and request rows packed in
one buffer) and one counted device -> host copy (counts, neighbors, relations and edge ids in
one buffer), through the exchanger's :meth:`~.collective.Exchanger.h2d` /
:meth:`~.collective.Exchanger.d2h`. The per-request tables (fanouts per relation, replace) and
the typed tables are small and copied by
:func:`~mnmg_sampler.ops.cuda_typed.sample_typed_neighbors_cuda` itself (so are the edge
weights of a weighted part, every hop). Output bit-identical to the CPU kernel's; tested under
Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) only, never on a GPU.
"""

from __future__ import annotations

import copy

import numpy as np
import torch

__all__ = ["TypedCudaHop"]


class TypedCudaHop:
    """Call with ``(ex, rows, keys, req, fanouts, replace, seed, hop, bounds, last)``: the
    typed kernel's four host arrays (:func:`~mnmg_sampler.ops.typed.sample_typed_neighbors`;
    ``bounds``/``last`` for time, passed to the twin as they are: not tested over ranks)."""

    def __init__(self, graph, orig: np.ndarray, device: torch.device | None = None) -> None:
        from ..gpu import require_numba_cuda, simulator_enabled

        require_numba_cuda()
        if device is None:
            device = torch.device("cpu") if simulator_enabled() else torch.device(
                "cuda", torch.cuda.current_device())
        self.device = device

        def dev(a):  # a writable host copy first: the simulator writes kernel arguments back
            return torch.from_numpy(np.array(a, np.int64)).to(device)

        self.graph = copy.copy(graph)  # the typed tables stay on the host (small), writable
        for name in ("node_type_offset", "rel_offset", "seg_base", "weighted", "weights",
                     "edge_time", "node_time"):
            a = getattr(graph, name)
            setattr(self.graph, name, None if a is None else np.array(a))
        self.graph.indptr, self.graph.indices, self.graph.edge_ids = (
            dev(graph.indptr), dev(graph.indices), dev(graph.edge_ids))
        self.orig = dev(orig)

    def __call__(self, ex, rows, keys, req, fanouts, replace, seed: int, hop: int, bounds=None,
                 last=None):
        from ..ops.cuda_typed import sample_typed_neighbors_cuda

        n = rows.shape[0]
        packed = np.empty((3, n), np.int64)
        packed[0], packed[1], packed[2] = rows, keys, req
        t = ex.h2d(torch.from_numpy(packed), self.device)
        r = t[0]
        c, nb, rel, eid = sample_typed_neighbors_cuda(self.graph, r, self.orig[r], t[1], t[2],
                                                      fanouts, replace, seed, hop,
                                                      bounds=bounds, last=last)
        out = ex.d2h(torch.cat([c, nb, rel, eid])).numpy()
        E = nb.shape[0]
        return out[:n], out[n:n + E], out[n + E:n + 2 * E], out[n + 2 * E:]
