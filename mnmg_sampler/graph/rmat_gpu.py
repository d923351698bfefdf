"""R-MAT on the GPU with ``pylibraft.random.rmat``, and the choice between it and the CPU generator.

:func:`generate_rmat` uses the GPU when the device is CUDA and the GPU extra is installed, and
:func:`mnmg_sampler.graph.rmat.rmat_edges` otherwise. Both take the same parameters (``scale``,
``edge_factor``, Graph500 ``a, b, c``, ``seed``) and draw from the same distribution, but **not
the same random stream**: RAFT's generator and NumPy's ``default_rng`` differ, so one seed gives
different (equally distributed) graphs on the two paths. The GPU path also permutes node ids, as
the CPU one does, with ``torch.randperm`` seeded by ``seed`` on the device. Use the CPU path when
the exact graph must be reproduced on any machine (tests, partition files shared across hosts).
"""

from __future__ import annotations

import logging

import torch

from ..system.gpu import require_pylibraft

__all__ = ["generate_rmat", "rmat_edges_gpu"]

log = logging.getLogger(__name__)


def rmat_edges_gpu(
    scale: int,
    edge_factor: int = 16,
    a: float = 0.57,
    b: float = 0.19,
    c: float = 0.19,
    seed: int = 0,
    device: torch.device | str = "cuda",
) -> tuple[torch.Tensor, torch.Tensor]:
    """``edge_factor * 2**scale`` R-MAT edges generated on ``device``; int64 ``(src, dst)`` tensors.

    The output and the per-level probabilities live in PyTorch tensors (PyTorch's pool) and are
    handed to RAFT through ``__cuda_array_interface__``; RAFT synchronises before returning.
    """
    from .rmat import _check  # same validation and messages as the CPU generator

    _check(scale, edge_factor, a, b, c)
    rmat = require_pylibraft().rmat
    scale, edge_factor = int(scale), int(edge_factor)
    dev = torch.device(device)
    n_edges = edge_factor << scale
    d = max(0.0, 1.0 - a - b - c)
    theta = torch.tensor([a, b, c, d] * scale, dtype=torch.float32, device=dev)
    out = torch.empty((n_edges, 2), dtype=torch.int64, device=dev)
    rmat(out, theta, scale, scale, seed=int(seed))
    gen = torch.Generator(device=dev)
    gen.manual_seed(int(seed))
    perm = torch.randperm(1 << scale, generator=gen, device=dev)
    return perm[out[:, 0]], perm[out[:, 1]]


def generate_rmat(
    scale: int, edge_factor: int = 16, seed: int = 0, device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """R-MAT ``(src, dst)`` int64 tensors on ``device``: RAFT on CUDA when available, else NumPy.

    Falls back to the CPU generator (then moves the result to ``device``) when the device is not
    CUDA or the GPU extra is missing; the fallback is logged, never silent.
    """
    dev = torch.device(device)
    if dev.type == "cuda":
        try:
            return rmat_edges_gpu(scale, edge_factor, seed=seed, device=dev)
        except ImportError as exc:  # MissingDependencyError: no pylibraft here
            log.warning("GPU R-MAT unavailable (%s); generating on the CPU instead", exc)
    from .rmat import rmat_edges

    src, dst = rmat_edges(scale, edge_factor=edge_factor, seed=seed)
    return torch.from_numpy(src).to(dev), torch.from_numpy(dst).to(dev)
