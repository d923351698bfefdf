"""Interpreter exit without ``shutdown()`` or ``destroy_process_group()``: stop, then tear down.

A process that leaves its process group alive to the end of the interpreter can abort in C++
static destruction ("terminate called without an active exception"), most often on the rank
hosting the store. One exit hook runs, in this order: every registered stopper (a sampling
service's thread leaves its rounds, bounded by its deadline), then the default process group is
destroyed. One hook, not two, so the order cannot depend on when each was registered.
"""

from __future__ import annotations

import atexit
import logging
import threading
from collections.abc import Callable

import torch.distributed as dist

log = logging.getLogger(__name__)

_lock = threading.Lock()
_stoppers: dict[int, Callable[[], bool]] = {}
_next = [0]
_hooked = [False]


def at_exit(stop: Callable[[], bool] | None = None) -> Callable[[], None]:
    """Arm the exit hook; ``stop`` (if given) runs at exit before the group is destroyed.

    ``stop`` returns False when its collectives may still be running (a thread that did not
    end in time): the group is then left alone. Returns a function that removes ``stop`` (call
    it once the owner shut down cleanly).
    """
    with _lock:
        if not _hooked[0]:
            atexit.register(_exit)
            _hooked[0] = True
        if stop is None:
            return lambda: None
        key = _next[0]
        _next[0] += 1
        _stoppers[key] = stop

    def remove() -> None:
        with _lock:
            _stoppers.pop(key, None)

    return remove


def _exit() -> None:
    with _lock:
        stops = list(_stoppers.values())
        _stoppers.clear()
    safe = True
    for stop in stops:
        try:
            safe = stop() and safe
        except Exception:  # exiting anyway: a stopper's failure must not skip the others
            log.debug("exit stopper failed", exc_info=True)
            safe = False
    if safe and dist.is_available() and dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception:  # a dead peer may break the teardown; the process ends either way
            log.debug("destroy_process_group at exit failed", exc_info=True)
