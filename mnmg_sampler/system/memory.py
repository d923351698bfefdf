"""One memory pool per GPU: PyTorch's caching allocator, with CuPy and Numba routed into it.

Why: in a Dask + DDP setup every process on a GPU keeps its own pool (RMM for the sampler,
PyTorch's for the trainer), and each pool holds on to memory the other cannot use. Here the sampler
lives in the trainer's process and every GPU allocation goes to PyTorch's caching allocator:

* CuPy: :func:`route_cupy` installs ``cupy.cuda.set_allocator`` over
  ``torch.cuda.caching_allocator_alloc`` / ``caching_allocator_delete``.
* Numba: :func:`route_numba` installs an External Memory Management (EMM) plugin whose
  ``memalloc`` draws from the same allocator.
  ``NUMBA_CUDA_MEMORY_MANAGER=mnmg_sampler.system.memory``
  does the same before Numba starts (this module exposes ``_numba_memory_manager`` lazily).
* Irregular minibatch sizes fragment a caching pool; ``expandable_segments:True`` lets segments
  grow instead. :func:`configure_expandable_segments` writes it into the allocator's environment
  variable before CUDA initialises, and warns with the exact ``export`` line when it is too late.

Nothing here imports cupy or numba.cuda at module import time.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from .gpu import require_cupy, require_numba_cuda

__all__ = [
    "ALLOC_CONF_VARS",
    "configure_expandable_segments",
    "effective_alloc_conf_var",
    "memory_report",
    "numba_memory_manager_class",
    "nbytes_of",
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

    The setting is read once, when CUDA initialises, from ``PYTORCH_ALLOC_CONF`` (or the older
    ``PYTORCH_CUDA_ALLOC_CONF`` when the former is unset). So:

    * CUDA not initialised: the value is merged into that variable, keeping the user's other
      options; an ``expandable_segments`` the user already set explicitly wins (a warning
      names both values), because the environment is the most specific place to say it.
    * CUDA already initialised: nothing changes; unless the variable already asked for the
      same value, a ``RuntimeWarning`` says the setting cannot take effect and gives the exact
      ``export`` line to use before the process starts.
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
    """Route Numba's device allocations into PyTorch's pool (call before Numba's first kernel).

    Numba binds a memory manager to a context when it creates that context, so this must run
    before the first Numba CUDA call in the process; ``setup_memory_pool`` does it at start-up.
    """
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
    """Start-up hook of a GPU rank: allocator settings first, then route CuPy and Numba.

    CuPy is routed only when it is installed (it is optional); Numba is always present. Returns
    what was done, for logs.
    """
    done = {"expandable_segments": configure_expandable_segments(expandable_segments),
            "numba": route_numba() is not None, "cupy": False}
    try:
        route_cupy()
        done["cupy"] = True
    except ImportError:  # MissingDependencyError is an ImportError: CuPy is optional
        log.debug("CuPy not installed; nothing to route")
    return done


# --------------------------------------------------------------------------- report

def nbytes_of(obj: Any, _seen: set[int] | None = None) -> int:
    """Bytes held by the arrays/tensors of ``obj`` (a tensor, array, mapping, sequence, object)."""
    seen = set() if _seen is None else _seen
    if id(obj) in seen or obj is None or isinstance(obj, (str, bytes, int, float, bool)):
        return 0
    seen.add(id(obj))
    if torch.is_tensor(obj):
        return obj.element_size() * obj.numel()
    if isinstance(obj, np.ndarray):
        return int(obj.nbytes)
    if isinstance(obj, Mapping):
        return sum(nbytes_of(v, seen) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(nbytes_of(v, seen) for v in obj)
    if hasattr(obj, "__dict__"):
        return sum(nbytes_of(v, seen) for v in vars(obj).values())
    return 0


def memory_report(
    device: torch.device | str | int | None = None, partition: Any = None
) -> dict[str, Any]:
    """The pool's figures on ``device`` and the partition's bytes, as a plain dict.

    Keys: ``device``, ``partition_bytes`` and, on CUDA, ``allocated_bytes``, ``reserved_bytes``,
    ``max_reserved_bytes``, ``inactive_split_bytes`` (fragmentation), ``alloc_retries``,
    ``num_ooms``, ``free_bytes``, ``total_bytes`` and ``alloc_conf`` (the settings in force).
    On CPU only the partition's bytes are meaningful; the pool figures are 0.
    """
    dev = torch.device("cuda", device) if isinstance(device, int) else torch.device(
        device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
    report: dict[str, Any] = {"device": str(dev), "partition_bytes": nbytes_of(partition)}
    keys = ("allocated_bytes", "reserved_bytes", "max_reserved_bytes", "inactive_split_bytes",
            "alloc_retries", "num_ooms", "free_bytes", "total_bytes")
    if dev.type != "cuda":
        report.update(dict.fromkeys(keys, 0))
        report["alloc_conf"] = ""
        return report
    stats = torch.cuda.memory_stats(dev)
    free, total = torch.cuda.mem_get_info(dev)
    report.update(
        allocated_bytes=int(torch.cuda.memory_allocated(dev)),
        reserved_bytes=int(torch.cuda.memory_reserved(dev)),
        max_reserved_bytes=int(torch.cuda.max_memory_reserved(dev)),
        inactive_split_bytes=int(stats.get("inactive_split_bytes.all.current", 0)),
        alloc_retries=int(stats.get("num_alloc_retries", 0)),
        num_ooms=int(stats.get("num_ooms", 0)),
        free_bytes=int(free),
        total_bytes=int(total),
        alloc_conf=os.environ.get(effective_alloc_conf_var(), ""),
    )
    return report
