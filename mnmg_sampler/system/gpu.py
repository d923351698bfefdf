"""Lazy loaders for the GPU extra (cupy, numba.cuda).

``import mnmg_sampler`` must stay light and must work on machines without CUDA, so nothing here
imports a GPU package at module import time. Each ``require_*`` imports its package on first use
and turns a missing or broken install into one :class:`MissingDependencyError` that names the pip
extra, instead of an ``ImportError`` from deep inside a kernel.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

from ..errors import MissingDependencyError

__all__ = [
    "GPU_EXTRA",
    "numpy_compat",
    "require_cupy",
    "require_numba_cuda",
    "simulator_enabled",
]

GPU_EXTRA = "pip install 'mnmg-sampler[gpu]'"


def numpy_compat() -> None:
    """Give NumPy >= 2.5 back ``np.row_stack`` (removed there), which numba-cuda <= 0.30 needs.

    numba-cuda registers an overload for ``np.row_stack`` when it first compiles a kernel; on
    NumPy 2.5 that raises ``AttributeError`` and no CUDA kernel compiles (seen on the GPU
    machine: numba-cuda 0.30.4, NumPy 2.5.2). A distinct function, so the overload does not
    collide with the one numba-cuda registers for ``np.vstack``.
    """
    import numpy as np

    if not hasattr(np, "row_stack"):
        def row_stack(tup, *, dtype=None, casting="same_kind"):
            return np.vstack(tup, dtype=dtype, casting=casting)
        np.row_stack = row_stack


def simulator_enabled() -> bool:
    """Whether Numba's CUDA simulator is on (``NUMBA_ENABLE_CUDASIM=1``, read before numba.cuda)."""
    try:
        from numba.core import config
    except ImportError:  # pragma: no cover - numba is a core dependency
        return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")
    return bool(config.ENABLE_CUDASIM)


def _import(module: str, purpose: str, package: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as exc:  # also covers a wheel whose CUDA libraries do not load
        raise MissingDependencyError(
            f"{purpose} needs {package}, which could not be imported ({exc})",
            "the GPU path cannot run in this environment",
            f"install the GPU extra with `{GPU_EXTRA}` (CUDA 12 wheels), or use device='cpu'",
        ) from exc


def require_cupy() -> ModuleType:
    """Import and return ``cupy`` (GPU extra), or raise an actionable error."""
    return _import("cupy", "routing CuPy allocations into the PyTorch pool", "cupy (cupy-cuda12x)")


def require_numba_cuda(need_device: bool = True) -> ModuleType:
    """Import and return ``numba.cuda``; with ``need_device``, also check that a GPU is usable.

    Under the simulator (``NUMBA_ENABLE_CUDASIM=1``) no device is needed. Without it, importing
    numba.cuda works everywhere, but launching a kernel needs a CUDA driver, a device and the
    NVVM compiler: checking here gives one clear error instead of a driver traceback mid-epoch.
    """
    numpy_compat()
    cuda = _import("numba.cuda", "the CUDA sampling kernels", "numba.cuda")
    if need_device and not simulator_enabled() and not cuda.is_available():
        raise MissingDependencyError(
            "numba.cuda found no usable CUDA device or driver",
            "the CUDA sampling kernels cannot run here",
            f"run on a machine with an NVIDIA GPU and driver and `{GPU_EXTRA}`; use "
            "device='cpu' otherwise (NUMBA_ENABLE_CUDASIM=1 runs the kernels in the slow "
            "simulator, for tests only)",
        )
    return cuda
