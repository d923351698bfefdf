"""Interpreter exit without ``shutdown()`` or ``destroy_process_group()``: stop, then tear down.

A process group alive at interpreter exit can abort in C++ static destruction ("terminate called
without an active exception"), mostly on the rank hosting the store. One exit hook (one, so the
order cannot depend on registration) runs every registered stopper (a sampling service's thread
leaves its rounds, bounded), destroys the default group, and last waits (bounded) until gloo's
worker threads are idle: a worker drops its reference to a finished collective *after* waking
the caller and may need the GIL for it; once the interpreter finalizes, such a thread ends in
``pthread_exit``, whose unwinding through C++ aborts the process (pytorch/pytorch#190489). DDP
keeps the default group alive, so ``destroy_process_group()`` does not prevent it.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch.distributed as dist

log = logging.getLogger(__name__)

_lock = threading.Lock()
_stoppers: dict[int, Callable[[], bool]] = {}
_next = [0]
_hooked = [False]

GLOO_WORKERS = ("pt_gloo_runloop",)  # the name torch gives ProcessGroupGloo's worker threads
DRAIN_LIMIT_S = 2.0
_TASKS = Path("/proc/self/task")


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
    drain_gloo_workers()


def _gloo_worker_states() -> list[str] | None:
    """Scheduler states (R, S, D, ...) of this process's gloo threads; ``None`` off Linux."""
    try:
        tasks = list(_TASKS.iterdir())
    except OSError:
        return None
    states = []
    for t in tasks:
        try:
            if (t / "comm").read_text().strip() in GLOO_WORKERS:
                # "pid (comm) S ...": the state follows the last parenthesis
                states.append((t / "stat").read_text().rsplit(")", 1)[1].split()[0])
        except (OSError, IndexError):  # the thread ended meanwhile
            continue
    return states


def drain_gloo_workers(limit_s: float = DRAIN_LIMIT_S) -> bool:
    """Release the GIL until gloo's worker threads are idle: True if they were, within ``limit_s``.

    Idle means no gloo thread running or runnable in two checks in a row, with a sleep (the
    GIL free) between them: a worker that was waiting for the GIL at the first check has had
    it by the second. Off Linux there is nothing to read; one short sleep does what it can.
    """
    states = _gloo_worker_states()
    if states is None:
        time.sleep(0.05)
        return True
    if not states:
        return True
    deadline = time.monotonic() + limit_s
    quiet = 0
    while quiet < 2:
        if time.monotonic() > deadline:
            log.debug("gloo worker threads still busy after %.1f s at exit", limit_s)
            return False
        time.sleep(0.002)
        busy = any(s in "RD" for s in _gloo_worker_states() or ())
        quiet = 0 if busy else quiet + 1
    return True
