"""One memory pool per GPU: PyTorch's caching allocator, with CuPy and Numba routed into it, so
that sampler and trainer never each hold memory the other cannot use (why and how:
docs/gpu.md#one-memory-pool-per-gpu-mnmg_samplersystemmemorypy).

Nothing here imports cupy or numba.cuda at module import time.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import warnings
from typing import Any

import torch

from .gpu import require_cupy, require_numba_cuda

__all__ = [
    "ALLOC_CONF_VARS",
    "configure_expandable_segments",
    "effective_alloc_conf_var",
    "numba_memory_manager_class",
    "route_cupy",
    "route_numba",
    "setup_memory_pool",
]

log = logging.getLogger(__name__)

# torch >= 2.9 reads PYTORCH_ALLOC_CONF first and falls back to PYTORCH_CUDA_ALLOC_CONF (see
# c10/core/AllocatorConfig.h); older releases read only PYTORCH_CUDA_ALLOC_CONF.
ALLOC_CONF_VARS = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")


# --------------------------------------------------------------------------- expandable_segments

def split_alloc_conf(conf: str) -> list[tuple[str, str]]:
    """Parse ``key:value,...`` allocator settings (commas inside ``[...]`` stay in a value)."""
    parts = (p.strip().partition(":") for p in re.split(r",(?![^\[]*\])", conf))
    return [(k.strip(), v.strip()) for k, _, v in parts if k.strip()]


def join_alloc_conf(items: list[tuple[str, str]]) -> str:
    return ",".join(f"{k}:{v}" if v else k for k, v in items)


def effective_alloc_conf_var() -> str:
    """The environment variable this torch reads its allocator settings from."""
    return "PYTORCH_ALLOC_CONF" if "PYTORCH_ALLOC_CONF" in os.environ else "PYTORCH_CUDA_ALLOC_CONF"


def configure_expandable_segments(enabled: bool = True) -> bool:
    """Ask PyTorch's CUDA allocator for ``expandable_segments:<enabled>``; True if it will apply.

    Torch reads the setting once, when CUDA initialises, from :func:`effective_alloc_conf_var`.
    Before that, the value is merged into that variable, the user's other options kept; an
    other ``expandable_segments`` the user set there wins, with a warning naming both (the
    environment is the most specific place to say it). After that nothing changes and, unless
    already asked for, a ``RuntimeWarning`` gives the ``export`` line to use before the start.
    """
    want = "True" if enabled else "False"
    var = effective_alloc_conf_var()
    current = os.environ.get(var, "")
    items = split_alloc_conf(current)
    have = {k: v for k, v in items}.get("expandable_segments")
    if have is not None and have != want:
        warnings.warn(
            f"{var}={current!r} sets expandable_segments:{have}, so the configured "
            f"expandable_segments:{want} is not applied; remove it from {var} to let the "
            "config decide",
            RuntimeWarning,
            stacklevel=2,
        )
        return False
    if have == want:
        return True  # already asked for: it applies (or applied) when CUDA initialises
    merged = join_alloc_conf(items + [("expandable_segments", want)])
    if torch.cuda.is_initialized():
        warnings.warn(
            f"CUDA is already initialised, so expandable_segments:{want} cannot take effect in "
            f"this process (PyTorch reads {var} once, at CUDA start). Set it before the process "
            f"starts: export {var}={merged!r}",
            RuntimeWarning,
            stacklevel=2,
        )
        return False
    os.environ[var] = merged
    log.info("set %s=%s (before CUDA initialisation)", var, merged)
    return True


# --------------------------------------------------------------------------- CuPy routing

def _torch_malloc(size: int, device_id: int) -> int:
    """Allocate ``size`` bytes on ``device_id`` from PyTorch's pool, on its current stream."""
    if size == 0:
        return 0
    return int(torch.cuda.caching_allocator_alloc(size, device_id))


def _torch_free(ptr: int, device_id: int) -> None:
    if ptr:
        torch.cuda.caching_allocator_delete(ptr)


def route_cupy() -> Any:
    """Route every later CuPy allocation into PyTorch's caching allocator; returns the allocator
    (a ``cupy.cuda.memory.PythonFunctionAllocator``).

    Blocks belong to PyTorch's *current stream* at allocation time (the caching allocator's
    rule), so run CuPy work on that stream (``cupy.cuda.ExternalStream(
    torch.cuda.current_stream().cuda_stream)``) to keep block reuse safe.
    """
    cupy = require_cupy()
    allocator = cupy.cuda.memory.PythonFunctionAllocator(_torch_malloc, _torch_free)
    cupy.cuda.set_allocator(allocator.malloc)
    log.info("CuPy allocations are routed into PyTorch's caching allocator")
    return allocator


# --------------------------------------------------------------------------- Numba routing

def _device_pointer(value: int) -> Any:
    """A device pointer object of the kind this Numba's driver binding expects."""
    from numba.cuda.cudadrv import driver, drvapi

    if getattr(driver, "USE_NV_BINDING", False):
        return driver.binding.CUdeviceptr(value)
    return drvapi.cu_device_ptr(value)


@functools.cache
def numba_memory_manager_class() -> type:
    """The Numba EMM plugin class backed by PyTorch's caching allocator (built once, lazily).

    It subclasses ``numba.cuda.HostOnlyCUDAMemoryManager``: device memory comes from PyTorch,
    pinned/mapped host memory stays with Numba. Building (and instantiating with
    ``context=None``) needs no GPU; ``memalloc`` needs one.
    """
    cuda = require_numba_cuda(need_device=False)
    from numba.cuda.cudadrv.driver import MemoryInfo, MemoryPointer

    class TorchNumbaMemoryManager(cuda.HostOnlyCUDAMemoryManager):
        """Numba device allocations served by ``torch.cuda.caching_allocator_alloc``."""

        def initialize(self) -> None:
            # PyTorch owns the pool; make sure its CUDA state exists on this device.
            torch.cuda.init()

        def memalloc(self, size: int):
            device = torch.cuda.current_device()
            ptr = _torch_malloc(size, device)

            def finalizer(ptr=ptr):
                _torch_free(ptr, device)

            return MemoryPointer(self.context, _device_pointer(ptr), size, finalizer=finalizer)

        def get_memory_info(self):
            free, total = torch.cuda.mem_get_info(torch.cuda.current_device())
            return MemoryInfo(free=free, total=total)

        def get_ipc_handle(self, memory):
            raise NotImplementedError(
                "IPC handles of PyTorch-pool memory are not supported by the mnmg-sampler Numba "
                "plugin; share tensors with torch.multiprocessing instead"
            )

        @property
        def interface_version(self) -> int:
            return 1

    return TorchNumbaMemoryManager


def route_numba() -> type:
    """Route Numba's device allocations into PyTorch's pool: before the first Numba CUDA call
    (Numba binds a memory manager when it creates a context); ``setup_memory_pool`` does it."""
    cuda = require_numba_cuda(need_device=False)
    cls = numba_memory_manager_class()
    cuda.set_memory_manager(cls)
    log.info("Numba CUDA allocations are routed into PyTorch's caching allocator")
    return cls


def __getattr__(name: str):
    # NUMBA_CUDA_MEMORY_MANAGER=mnmg_sampler.system.memory makes Numba read this attribute.
    if name == "_numba_memory_manager":
        return numba_memory_manager_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def setup_memory_pool(expandable_segments: bool = True) -> dict[str, bool]:
    """Start-up hook of a GPU rank: allocator settings first, then route Numba and (when
    installed: it is optional) CuPy. Returns what was done, for logs."""
    done = {"expandable_segments": configure_expandable_segments(expandable_segments),
            "numba": route_numba() is not None, "cupy": False}
    try:
        route_cupy()
        done["cupy"] = True
    except ImportError:  # MissingDependencyError is an ImportError: CuPy is optional
        log.debug("CuPy not installed; nothing to route")
    return done

