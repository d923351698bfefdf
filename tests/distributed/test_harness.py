"""The rank pool of harness.run_ranks: a call's ranks are separate processes with their own rank
and environment; they are reused by the next call of any world size (their environment
restored), never after a failure, a leftover thread, a patch of ``sys`` or a changed resource
limit, nor when the call asks for fresh ranks."""

from __future__ import annotations

import os
import threading
import time

import pytest

from .harness import POOL_ENV, RankFailure, run_ranks


def _who(rank, world, tag):
    import torch
    import torch.distributed as dist

    t = torch.tensor([rank + 1])
    dist.all_reduce(t)
    os.environ["LEAKED_BY_A_CALL"] = tag  # restored after the call
    return os.getpid(), os.environ["RANK"], int(t)


def _fail_on_1(rank, world):
    if rank == 1:
        raise ValueError("rank 1 refuses")
    return os.getpid()


def _exit_on_1(rank, world):
    if rank == 1:
        os._exit(3)
    return os.getpid()


def _patch_platform(rank, world):
    import sys

    sys.platform = "darwin"  # a patch the call does not undo
    return os.getpid()


def _leave_thread(rank, world):
    threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
    return os.getpid()


def _cap_files(rank, world):
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, 512), hard))  # not undone
    return os.getpid()


def _seen_env(rank, world):
    return os.getpid(), os.environ.get("LEAKED_BY_A_CALL")


def test_ranks_are_reused_only_when_clean(monkeypatch):
    monkeypatch.delenv(POOL_ENV, raising=False)  # the pool on, in the suite's environment
    a = run_ranks(_who, 2, "a", timeout=120)
    assert [r[1:] for r in a] == [("0", 3), ("1", 3)]
    assert a[0][0] != a[1][0]  # two processes
    b = run_ranks(_seen_env, 2, timeout=120)
    assert {p for p, _ in b} == {p for p, *_ in a}  # the same processes, reused
    assert all(leak is None for _, leak in b)  # the environment of a call is restored
    with pytest.raises(RankFailure, match="rank 1 refuses"):
        run_ranks(_fail_on_1, 2, timeout=120)
    c = run_ranks(_leave_thread, 2, timeout=120)
    assert not set(c) & {p for p, *_ in a}  # after a failure: new ranks
    d = run_ranks(_seen_env, 2, timeout=120)
    assert not {p for p, *_ in d} & set(c)  # a rank that left a thread running is not reused
    p = run_ranks(_patch_platform, 2, timeout=120)
    assert set(p) == {q for q, _ in d}
    q = run_ranks(_seen_env, 2, timeout=120)
    assert not {r for r, _ in q} & set(p)  # a rank whose call patched sys is not reused
    with pytest.raises(RankFailure, match="exited with code 3 without a result"):
        run_ranks(_exit_on_1, 2, timeout=120)


def test_changed_limits_and_fresh_calls_get_new_ranks(monkeypatch):
    monkeypatch.delenv(POOL_ENV, raising=False)  # the pool on, in the suite's environment
    first = run_ranks(_seen_env, 2, timeout=120)
    capped = run_ranks(_cap_files, 2, timeout=120)
    assert set(capped) == {p for p, _ in first}
    after = run_ranks(_seen_env, 2, timeout=120)
    assert not {p for p, _ in after} & set(capped)  # a changed resource limit: not reused
    fresh = run_ranks(_seen_env, 2, timeout=120, fresh=True)
    assert not {p for p, _ in fresh} & {p for p, _ in after}  # fresh=True: new ranks
    assert {p for p, _ in run_ranks(_seen_env, 2, timeout=120)} == {p for p, _ in after}
    three = run_ranks(_seen_env, 3, timeout=120)  # any world size: the two idle ranks and one new
    assert len({p for p, _ in three} & {p for p, _ in after}) == 2
