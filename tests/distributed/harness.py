"""Run a function on real ranks: spawned processes, gloo over a FileStore, hard timeout.

A child's exception comes back with its traceback and fails the test; a child that does not
finish in time is killed and the test fails naming it. No ports are used, so parallel runs never
collide.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import tempfile
import traceback
from collections.abc import Callable
from typing import Any


def _child(fn, rank, world_size, store_path, args, q, env):
    os.environ.update(env)
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank),
                       "LOCAL_WORLD_SIZE": str(world_size)})
    try:
        import torch.distributed as dist

        store = dist.FileStore(store_path, world_size)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size)
        try:
            out = fn(rank, world_size, *args)
        finally:
            dist.destroy_process_group()
        q.put((rank, "ok", out))
    except BaseException as e:  # report everything, including typed errors, to the parent
        q.put((rank, "err", (e if _picklable(e) else None, traceback.format_exc())))


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


def run_ranks(fn: Callable, world_size: int, *args: Any, timeout: float = 120.0,
              env: dict[str, str] | None = None) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` spawned ranks; return results by rank.

    Raises :class:`RankFailure` if any rank raised, ``TimeoutError`` if any rank hung.
    """
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    with tempfile.TemporaryDirectory() as d:
        store = os.path.join(d, "store")
        procs = [ctx.Process(target=_child, args=(fn, r, world_size, store, args, q, env or {}),
                             daemon=False) for r in range(world_size)]
        for p in procs:
            p.start()
        results: dict[int, tuple] = {}
        import queue
        import time

        deadline = time.monotonic() + timeout
        while len(results) < world_size:
            left = deadline - time.monotonic()
            try:
                rank, status, out = q.get(timeout=max(0.1, min(left, 1.0)))
                results[rank] = (status, out)
            except queue.Empty:
                dead = [i for i, p in enumerate(procs) if not p.is_alive() and i not in results]
                if dead and all(not p.is_alive() for p in procs):
                    time.sleep(0.5)
                    if q.empty():
                        break
                if left <= 0:
                    break
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join()
    missing = [r for r in range(world_size) if r not in results]
    errors = {r: out for r, (status, out) in results.items() if status == "err"}
    if errors:
        raise RankFailure(errors)
    if missing:
        codes = {r: procs[r].exitcode for r in missing}
        if all(c is not None and c != -9 for c in codes.values()):
            raise RankFailure({r: (None, f"exited with code {c} without a result")
                               for r, c in codes.items()})
        raise TimeoutError(f"ranks {missing} did not finish within {timeout:.0f}s (hang?)")
    return [results[r][1] for r in range(world_size)]
