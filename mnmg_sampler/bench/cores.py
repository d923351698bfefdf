"""Cores of emulated hosts: each emulated host runs on its own share of this machine's cores.

Real hosts do not share cores; emulated on one machine, a host's ranks and gloo threads would
wait for cores another "host" holds, and collectives with them (``docs/performance.md``, where a
wire round's time goes). So ``bench dist --hosts H`` pins host ``h``'s ranks to the ``h``-th of
``H`` equal runs of the bench's cores, and times the single process on host 0's cores. Linux only
(``os.sched_setaffinity``); elsewhere, or with fewer cores than hosts, every rank runs on every
core and the bench says so.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence


def usable_cores() -> list[int] | None:
    """The cores this process may run on, or None where the platform cannot pin."""
    if not hasattr(os, "sched_getaffinity") or not hasattr(os, "sched_setaffinity"):
        return None
    return sorted(os.sched_getaffinity(0))


def host_cores(world: int, hosts: int | None, cores: Sequence[int] | None
               ) -> list[list[int]] | None:
    """Per rank, the cores of its emulated host (contiguous ranks per host, as ``--hosts``
    lays them out); None when every rank should run on every core: one host, no pinning on
    this platform (``cores`` None) or fewer cores than hosts."""
    if not hosts or cores is None:
        return None
    h = min(hosts, world)
    if h < 2 or len(cores) < h:
        return None
    c = sorted(cores)
    runs = [c[i * len(c) // h:(i + 1) * len(c) // h] for i in range(h)]
    return [runs[r * h // world] for r in range(world)]


def pin(cores: Sequence[int] | None) -> None:
    """Run this thread, and every thread it starts from now on, on ``cores`` (None: no-op)."""
    if cores:
        os.sched_setaffinity(0, set(cores))


@contextlib.contextmanager
def pinned(cores: Sequence[int] | None) -> Iterator[None]:
    """:func:`pin` for the duration of the block, then back to the cores before it."""
    if not cores:
        yield
        return
    before = os.sched_getaffinity(0)
    pin(cores)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)
