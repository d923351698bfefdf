"""Host malloc: keep glibc from returning a sampler's multi-MB buffers to the kernel each call.

Every hop allocates arrays of 0.1-10 MB. glibc serves a request above its mmap threshold with a
fresh ``mmap`` and trims a free heap top above its trim threshold; either way the next batch pays
a page fault per 4 KiB. Both start at 128 KiB and rise only when a mapped chunk is freed, so
whether a process settles depends on its history (measured: 1,000 faults and 1.5x the CPU per
batch when it does not, docs/performance.md#page-faults-and-the-host-channel).

:func:`tune_host_malloc` (once per sampler process) sets the mmap threshold to glibc's maximum,
32 MiB, and the trim threshold to twice that, where glibc's own rule ends after a 32 MiB buffer
is freed. ``MNMG_SAMPLER_MALLOC=default`` leaves malloc as it is; off glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import logging
import os
import platform

__all__ = ["MALLOC_ENV", "MMAP_THRESHOLD", "TRIM_THRESHOLD", "malloc_state", "tune_host_malloc"]

log = logging.getLogger(__name__)

MALLOC_ENV = "MNMG_SAMPLER_MALLOC"
MMAP_THRESHOLD = 32 << 20  # glibc's largest dynamic mmap threshold on 64-bit
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD
_M_TRIM_THRESHOLD = -1  # mallopt parameters, from glibc's malloc.h
_M_MMAP_THRESHOLD = -3

_state = "untouched"


def malloc_state() -> str:
    """``tuned``, ``default`` (left as it is by ``MNMG_SAMPLER_MALLOC=default``),
    ``unsupported`` (not glibc, or ``mallopt`` refused) or ``untouched`` (not called yet)."""
    return _state


def tune_host_malloc() -> str:
    """Set glibc's mmap and trim thresholds for sampling (once per process; see the module
    docstring). Returns :func:`malloc_state`."""
    global _state
    if _state != "untouched":
        return _state
    if os.environ.get(MALLOC_ENV, "tuned") == "default":
        _state = "default"
        return _state
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        _state = "unsupported"
        return _state
    try:
        mallopt = ctypes.CDLL(None).mallopt
        mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
        ok = (mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
              and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1)
    except (OSError, AttributeError):
        ok = False
    _state = "tuned" if ok else "unsupported"
    log.debug("host malloc: %s (mmap threshold %d MiB, trim threshold %d MiB)", _state,
              MMAP_THRESHOLD >> 20, TRIM_THRESHOLD >> 20)
    return _state
