"""Run a function on real ranks: spawned processes, gloo over a FileStore, hard timeout.

A child's exception comes back with its traceback and fails the test; a child that does not
finish in time is killed and the test fails naming it. No ports are used, so parallel runs never
collide.

Spawned ranks are kept for the next call (a pool): starting a process, importing torch and
loading numba's compiled kernels costs seconds per rank, more than most tests' sampling. Every
call still runs on as many separate processes as it has ranks, in a new gloo process group over
a new store, with the rank's environment restored afterwards. A rank is not reused (it exits)
when its call failed, left a thread running, changed the working directory or ``sys.path``,
rebound a global of mnmg_sampler, torch.distributed or sys (a test's patch such as
``sys.platform = "darwin"`` or ``dist.all_reduce = counting`` not undone), or changed
process-wide state (:func:`_process_state`: resource limits, signal handlers, thread
counts). A call whose result depends on the process's history (an address-space cap set
relative to what the process holds, as the memory tests do) passes ``fresh=True``. Ranks inherit
the test process's environment and working directory when spawned, so they are kept per
environment (e.g. one with ``monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")``; the last
``KEEP`` ones); a call with ``env`` gets fresh ranks. ``MNMG_TEST_RANK_POOL=0`` turns the pool
off (every call on fresh ranks); ``MNMG_TEST_RANK_POOL_LOG=file`` appends a line per rank per call
saying whether it was new or reused and why it was not kept.
"""

from __future__ import annotations

import atexit
import multiprocessing as mp
import os
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import wait
from typing import Any

POOL_ENV = "MNMG_TEST_RANK_POOL"  # 0: every call on fresh ranks (see above)
LOG_ENV = "MNMG_TEST_RANK_POOL_LOG"  # a file: a line per rank per call, reused or not and why
_VOLATILE = ("PYTEST_CURRENT_TEST",)  # changes per test, read by no rank


def _run_one(fn, rank, world_size, store_path, args, env):
    """One call on this rank: ``("ok", result)`` or ``("err", (exception?, traceback))``."""
    os.environ.update(env)
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank),
                       "LOCAL_WORLD_SIZE": str(world_size)})
    try:
        import torch.distributed as dist

        store = dist.FileStore(store_path, world_size)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size)
        # every rank's connections are up before any rank can finish and close its own (a
        # call without collectives would otherwise race a slower rank's connect)
        dist.barrier()
        try:
            out = fn(rank, world_size, *args)
        finally:
            if dist.is_initialized():  # a command that ends its job destroys the group itself
                dist.destroy_process_group()
        return "ok", out
    except BaseException as e:  # report everything, including typed errors, to the parent
        return "err", (e if _picklable(e) else None, traceback.format_exc())


def _serve(conn) -> None:
    """A pooled rank: run calls until told to stop or until a call leaves it unfit for reuse."""
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        environ, cwd, path = dict(os.environ), os.getcwd(), list(sys.path)
        os.environ.update(task[-1])  # before the first import of numba below reads it
        threads, names, state = set(threading.enumerate()), _globals(), _process_state()
        status, out = _run_one(*task)
        os.environ.clear()
        os.environ.update(environ)
        rebound = _rebound(names)
        unfit = [why for why, bad in (
            ("failed", status != "ok"), ("cwd", os.getcwd() != cwd), ("sys.path", sys.path != path),
            ("rebound " + ", ".join(rebound), rebound),
            ("process state", _process_state() != state)) if bad]
        if not unfit and _new_threads(threads):
            unfit.append("thread left running")
        try:
            conn.send((status, out, unfit))
        except Exception:  # the result does not pickle: the call's error, not a hang
            conn.send(("err", (None, traceback.format_exc()), ["result does not pickle"]))
            return
        if unfit:
            return


_WATCHED = ("mnmg_sampler", "torch.distributed", "sys")
# set on every call by torch or mnmg_sampler themselves, not by a test's patch
_SET_BY_CALLS = {"sys.excepthook"}


def _globals() -> dict[str, dict[str, object]]:
    """Every global of the watched modules (a call that patches one, e.g. ``sys.platform`` or
    ``dist.all_reduce``, and does not undo it must not hand it to the next call)."""
    return {m: {k: v for k, v in vars(mod).items() if not k.startswith("last_")}
            for m, mod in list(sys.modules.items())
            if mod is not None and any(m == w or m.startswith(w + ".") for w in _WATCHED)}


def _rebound(before: dict[str, dict[str, object]]) -> list[str]:
    """Functions, classes and ``sys`` attributes present before the call that now name another
    object or are gone (module state that calls set, such as c10d's ``_backend``, is not a
    patch)."""
    out = []
    for m, names in before.items():
        now = vars(sys.modules[m]) if sys.modules.get(m) is not None else {}
        out += [f"{m}.{k}" for k, v in names.items()
                if (k not in now or now[k] is not v) and f"{m}.{k}" not in _SET_BY_CALLS
                and (callable(v) or m == "sys")]
    return out


def _process_state() -> dict[str, object]:
    """Process-wide settings a call may change and a later call would inherit: resource limits
    (an address-space cap), signal handlers, the umask, the cores the process may run on,
    torch's and numba's thread counts and torch's default dtype and grad mode."""
    import resource
    import signal

    import numba
    import torch

    umask = os.umask(0)
    os.umask(umask)
    return {
        "rlimits": {n: resource.getrlimit(getattr(resource, n)) for n in dir(resource)
                    if n.startswith("RLIMIT_")},
        "signals": {s: signal.getsignal(s) for s in signal.valid_signals()
                    if s not in (signal.SIGKILL, signal.SIGSTOP)},
        "umask": umask,
        "cores": os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None,
        "torch": (torch.get_num_threads(), torch.get_default_dtype(), torch.is_grad_enabled()),
        "numba": numba.get_num_threads(),
    }


def _new_threads(before: set, grace: float = 2.0) -> list:
    """Threads the call started that are still alive after ``grace`` seconds."""
    end = time.monotonic() + grace
    while True:
        left = [t for t in threading.enumerate() if t not in before and t.is_alive()]
        if not left or time.monotonic() > end:
            return left
        time.sleep(0.05)


def _log(line: str) -> None:
    if os.environ.get(LOG_ENV):
        with open(os.environ[LOG_ENV], "a") as f:
            f.write(line + "\n")


def _picklable(obj) -> bool:
    import pickle

    try:
        pickle.loads(pickle.dumps(obj))
        return True
    except Exception:
        return False


class RankFailure(AssertionError):
    """One or more ranks raised; ``errors`` maps rank -> (exception or None, traceback)."""

    def __init__(self, errors: dict[int, tuple]):
        self.errors = errors
        msg = "\n".join(f"--- rank {r} ---\n{tb}" for r, (_, tb) in sorted(errors.items()))
        super().__init__(msg)


class _Rank:
    """A spawned rank process and the parent's end of its pipe."""

    def __init__(self) -> None:
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child,), daemon=False)
        self.proc.start()
        child.close()
        self.calls = 0  # calls sent to it

    def stop(self, kill: bool = False) -> None:
        if not kill:
            try:
                self.conn.send(None)
            except OSError:
                pass
            self.proc.join(timeout=5)
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join()
        self.conn.close()


_idle: dict[tuple, list[_Rank]] = {}  # environment -> ranks spawned in it, waiting for a call
KEEP = 3  # environments whose ranks are kept
MAX_IDLE = 6  # idle ranks kept in all (each holds torch and numba: a few hundred MB); room for
# the usual 2-3 beside a simulator environment's 2, so neither evicts the other


def _key() -> tuple:
    """What a spawned rank inherits from this process and a call cannot reset."""
    return (os.getcwd(), tuple(sorted((k, v) for k, v in os.environ.items()
                                      if k not in _VOLATILE)))


def _take(n: int, key: tuple | None) -> list[_Rank]:
    """``n`` ranks: idle ones of this environment first, then new ones."""
    got = []
    if key is not None:
        idle = _idle.pop(key, [])
        _idle[key] = idle  # the newest environment last: the oldest is stopped first
        while len(_idle) > KEEP:
            _stop_idle(next(iter(_idle)))
        while idle and len(got) < n:
            w = idle.pop()
            if w.proc.is_alive():
                got.append(w)
            else:
                w.stop(kill=True)
    return got + [_Rank() for _ in range(n - len(got))]


def _trim() -> None:
    """Stop idle ranks, those of the oldest environment first, beyond ``MAX_IDLE``."""
    for k in list(_idle):
        while sum(len(v) for v in _idle.values()) > MAX_IDLE and _idle[k]:
            _idle[k].pop().stop()


def _stop_idle(key: tuple | None = None) -> None:
    for k in [key] if key is not None else list(_idle):
        for w in _idle.pop(k, []):
            w.stop()


atexit.register(_stop_idle)


def run_ranks(fn: Callable, world_size: int, *args: Any, timeout: float = 120.0,
              env: dict[str, str] | None = None, fresh: bool = False) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` spawned ranks; return results by rank.

    ``env`` (set in the ranks) or ``fresh`` run the call on new ranks that exit after it.
    Raises :class:`RankFailure` if any rank raised, ``TimeoutError`` if any rank hung.
    """
    pooled = env is None and not fresh and os.environ.get(POOL_ENV, "1") != "0"
    key = _key() if pooled else None  # a rank serves any world size and rank
    ranks = _take(world_size, key)
    new = {r for r, w in enumerate(ranks) if w.calls == 0}
    results: dict[int, tuple] = {}
    reusable: set[int] = set()
    with tempfile.TemporaryDirectory() as d:
        store = os.path.join(d, "store")
        for r, w in enumerate(ranks):
            w.conn.send((fn, r, world_size, store, args, env or {}))
            w.calls += 1
        pending = {w.conn: r for r, w in enumerate(ranks)}
        deadline = time.monotonic() + timeout
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            for c in wait(list(pending), timeout=min(left, 1.0)):
                r = pending.pop(c)
                try:
                    status, out, unfit = c.recv()
                except (EOFError, OSError):  # died without a result (its exit code below)
                    continue
                results[r] = (status, out)
                if not unfit:
                    reusable.add(r)
                _log(f"{fn.__module__}.{fn.__qualname__} W={world_size} rank {r}: "
                     f"{'new' if r in new else 'reused'}, {'; '.join(unfit) or 'kept'}")
        failed = len(results) < world_size or any(s == "err" for s, _ in results.values())
        for r, w in enumerate(ranks):
            if key is not None and not failed and r in reusable:
                _idle[key].append(w)
                _trim()
            else:  # a failed call's ranks may be stuck in a collective: never reused
                w.stop(kill=r in pending.values())
    missing = [r for r in range(world_size) if r not in results]
    errors = {r: out for r, (status, out) in results.items() if status == "err"}
    if errors:
        raise RankFailure(errors)
    if missing:
        codes = {r: ranks[r].proc.exitcode for r in missing}
        if all(c is not None and c != -9 for c in codes.values()):
            raise RankFailure({r: (None, f"exited with code {c} without a result")
                               for r, c in codes.items()})
        raise TimeoutError(f"ranks {missing} did not finish within {timeout:.0f}s (hang?)")
    return [results[r][1] for r in range(world_size)]
