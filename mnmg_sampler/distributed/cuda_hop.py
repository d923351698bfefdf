"""The hop kernel on a CUDA device, as a rank's :class:`~.sampler.DistSampler` runs it with
``kernel="cuda"``: the part's CSR on the device, one counted copy each way per hop."""

from __future__ import annotations

import copy

import numpy as np
import torch

from .collective import Exchanger

__all__ = ["CudaHop"]


class CudaHop:
    """The hop kernel on a CUDA device: the partition's CSR (and edge weights) live there;
    each hop costs one counted copy each way (:meth:`~Exchanger.h2d` / :meth:`~Exchanger.d2h`);
    draws run on a dedicated stream. A typed part (``graph``) runs the typed twin
    (:meth:`typed`); its small tables stay on the host. Tested under Numba's CUDA simulator
    (``NUMBA_ENABLE_CUDASIM=1``); it has not run on a real GPU.
    """

    def __init__(self, csr: tuple, device: torch.device | None,
                 weights: np.ndarray | None = None, graph=None) -> None:
        from ..system.gpu import require_numba_cuda, simulator_enabled

        require_numba_cuda()
        if device is None:
            device = torch.device("cpu") if simulator_enabled() else torch.device(
                "cuda", torch.cuda.current_device())
        self.device = device
        # a writable host copy first: the mapped arrays are read-only, and the simulator writes
        # kernel arguments back to the host
        dt = None if graph is None else np.int64
        self.arrays = tuple(torch.from_numpy(np.array(a, dt)).to(device) for a in csr)
        self.weights = None if weights is None or graph is not None else torch.from_numpy(
            np.array(weights, np.float32)).to(device)
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self.graph = None if graph is None else copy.copy(graph)
        if graph is not None:  # the typed tables stay on the host (small), writable
            for name in ("node_type_offset", "rel_offset", "seg_base", "weighted", "weights",
                         "edge_time", "node_time"):
                a = getattr(graph, name)
                setattr(self.graph, name, None if a is None else np.array(a))
            self.graph.indptr, self.graph.indices, self.graph.edge_ids = self.arrays[:3]

    def typed(self, ex: Exchanger, rows, keys, req, fanouts, replace, seed: int, hop: int,
              bounds=None, last=None):
        """The typed kernel's four host arrays
        (:func:`~mnmg_sampler.ops.typed.sample_typed_neighbors`; ``bounds`` / ``last`` for time
        are passed to the twin as they are: not tested over ranks)."""
        from ..ops.cuda import sample_typed_neighbors_cuda

        n = rows.shape[0]
        packed = np.empty((3, n), np.int64)
        packed[0], packed[1], packed[2] = rows, keys, req
        t = ex.h2d(torch.from_numpy(packed), self.device)
        r = t[0]
        c, nb, rel, eid = sample_typed_neighbors_cuda(self.graph, r, self.arrays[3][r], t[1],
                                                      t[2], fanouts, replace, seed, hop,
                                                      bounds=bounds, last=last)
        out = ex.d2h(torch.cat([c, nb, rel, eid])).numpy()
        E = nb.shape[0]
        return out[:n], out[n:n + E], out[n + E:n + 2 * E], out[n + 2 * E:]

    def __call__(self, ex: Exchanger, rows, keys, seed, hop, fanouts, replace, edge_ids: bool):
        from ..ops.cuda import sample_neighbors_cuda, sample_neighbors_weighted_cuda

        indptr, indices, eids, orig = self.arrays
        w = self.weights
        n = rows.shape[0]

        def run():
            packed = np.empty((4, n), np.int64)
            packed[0], packed[1], packed[2], packed[3] = rows, keys, fanouts, replace
            t = ex.h2d(torch.from_numpy(packed), self.device)
            r = t[0]
            args = (r, orig[r], t[1], seed, hop, t[2], t[3].to(torch.uint8))
            if w is None:
                c, nb, e = sample_neighbors_cuda(indptr, indices, eids, *args,
                                                 with_eids=edge_ids)
            else:
                c, nb, e = sample_neighbors_weighted_cuda(indptr, indices, eids, w, *args,
                                                          with_eids=edge_ids)
            out = ex.d2h(torch.cat([c, nb, e]) if edge_ids else torch.cat([c, nb])).numpy()
            E = nb.shape[0]
            return out[:n], out[n:n + E], (out[n + E:] if edge_ids else None)

        if self.stream is None:
            return run()
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.stream):
            return run()
