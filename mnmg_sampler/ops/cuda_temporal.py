"""Temporal sampling on the GPU: the typed twin (:mod:`mnmg_sampler.ops.cuda_typed`) with a time
bound per node, the twin of :mod:`mnmg_sampler.ops.temporal`. One kernel serves both; its output
is bit-identical to the CPU kernel's (``tests/gpu_sim/test_cuda_temporal.py``, Numba's CUDA
simulator).
"""

from __future__ import annotations

import torch

from . import cuda_typed

__all__ = ["sample_temporal_neighbors_cuda"]


def sample_temporal_neighbors_cuda(graph, rows, nodes, keys, bounds, req, fanouts, replace, last,
                                   seed: int, hop: int, *, with_eids: bool = True
                                   ) -> tuple[torch.Tensor, ...]:
    """One temporal hop on the GPU; arguments and results as
    :func:`mnmg_sampler.ops.temporal.sample_temporal_neighbors` (int64 tensors on the device)."""
    return cuda_typed.sample_typed_neighbors_cuda(graph, rows, nodes, keys, req, fanouts,
                                                  replace, seed, hop, with_eids=with_eids,
                                                  bounds=bounds, last=last)
