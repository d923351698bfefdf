"""What this process may allocate, checked before an allocation whose size comes from input.

An edge list with one id of 10**10, ``num_nodes=10**12`` in an npz or ``rmat:40`` would otherwise
reach numpy's or torch's allocator and die there with a traceback (or, on Linux with overcommit,
succeed and be killed later). :func:`check_allocation` compares an estimate with what the machine
has (``MemAvailable``; the address-space limit, when one is set, wins) and raises a typed one-line
:class:`~mnmg_sampler.errors.MemoryBudgetError` that says what, how many bytes and what to do.
"""

from __future__ import annotations

import os
import resource

from ..errors import MemoryBudgetError

__all__ = ["available_bytes", "check_allocation", "format_bytes"]


def format_bytes(n: float) -> str:
    """``n`` bytes in the largest binary unit that keeps it >= 1 (``74.5 GiB``)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:,.1f} PiB"  # pragma: no cover


def _meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def available_bytes() -> int:
    """Bytes this process can still allocate: the smaller of free RAM and its address-space room.

    Falls back to ``os.sysconf`` page counts where ``/proc/meminfo`` is missing (not Linux).
    """
    avail = _meminfo_available()
    if avail is None:
        try:
            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):  # pragma: no cover - exotic platforms
            avail = 1 << 62
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        avail = min(avail, max(0, soft - _address_space_in_use()))
    return int(avail)


def _address_space_in_use() -> int:
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def check_allocation(what: str, nbytes: float, fix: str) -> None:
    """Raise :class:`MemoryBudgetError` if ``nbytes`` exceed 90% of the available bytes.

    ``what`` names the allocation and the input that sized it (``"a CSR of 10,000,000,001 nodes
    (largest id in edges.txt)"``); ``fix`` says what to do. Nothing is allocated either way.
    """
    nbytes = float(nbytes)
    avail = available_bytes()
    if nbytes > 0.9 * avail:
        raise MemoryBudgetError(
            f"{what} needs {format_bytes(nbytes)}, above the {format_bytes(avail)} this process "
            "can allocate", "nothing was allocated", fix)
