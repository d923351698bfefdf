"""One selfcheck line: its verdict, timing and figures; running a check; the test-only injection.

A check is a function that returns a :class:`Check` (or raises: the line then fails with the
exception's text, and the other checks still run). Verdicts are ``pass``, ``fail`` and
``skipped`` (always with why). Lines from several ranks are merged into one line per check:
``fail`` if any rank failed, ``pass`` if any passed and none failed, else ``skipped``.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

PASS, FAIL, SKIPPED = "pass", "fail", "skipped"
VERDICTS = (PASS, FAIL, SKIPPED)

#: Test-only: ``MNMG_SELFCHECK_INJECT=NAME[@RANK][,NAME...]`` makes check ``NAME`` see a wrong
#: result (one value of the output under test changed), on every rank or only on ``RANK``, so a
#: test can show that the line fails and the exit code is non-zero. Read by selfcheck only.
INJECT_ENV = "MNMG_SELFCHECK_INJECT"


@dataclass
class Check:
    """One line of the report (one rank's view)."""

    name: str
    verdict: str
    detail: str = ""
    seconds: float | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


def skipped(name: str, why: str, **data: Any) -> Check:
    return Check(name, SKIPPED, why, None, dict(data))


def run_check(name: str, fn: Callable[[], Check], *, reraise: Callable[[BaseException], bool]
              = lambda e: False) -> Check:
    """``fn()`` timed; an exception becomes a failed line naming it, unless ``reraise(e)``
    (a peer that stopped answering must stop the whole run, not one line)."""
    t0 = time.perf_counter()
    try:
        c = fn()
    except Exception as e:  # the line fails; the run goes on
        if reraise(e):
            raise
        c = Check(name, FAIL, f"{type(e).__name__}: {' '.join(str(e).split())}"[:500])
    if c.seconds is None and c.verdict != SKIPPED:
        c.seconds = time.perf_counter() - t0
    return c


def injected(name: str, rank: int = 0) -> bool:
    """Whether the test-only injection (:data:`INJECT_ENV`) targets check ``name`` here."""
    for item in os.environ.get(INJECT_ENV, "").split(","):
        target, _, at = item.strip().partition("@")
        if target == name and (not at or at.strip() == str(rank)):
            return True
    return False


def inject(name: str, arr: np.ndarray, rank: int = 0) -> np.ndarray:
    """``arr``, or when the injection targets ``name``, a copy with its first value changed."""
    if not injected(name, rank) or arr.size == 0:
        return arr
    out = np.array(arr, copy=True)
    out.reshape(-1)[0] += 1
    return out


def compare(want: Sequence[np.ndarray], got: Sequence[np.ndarray],
            names: Sequence[str]) -> str | None:
    """``None`` when every pair is equal in dtype, shape and value, else what differs first."""
    for n, a, b in zip(names, want, got, strict=True):
        a, b = np.asarray(a), np.asarray(b)
        if a.dtype != b.dtype or a.shape != b.shape:
            return f"{n}: {b.dtype}{list(b.shape)} instead of {a.dtype}{list(a.shape)}"
        if not np.array_equal(a, b):
            at = int(np.flatnonzero(a.reshape(-1) != b.reshape(-1))[0])
            return (f"{n} differs at {at}: {b.reshape(-1)[at]} instead of {a.reshape(-1)[at]} "
                    f"({int((a != b).sum())} of {a.size} values)")
    return None


@contextmanager
def quiet_wraparound() -> Iterator[None]:
    """Numba's CUDA simulator runs the RNG's intended uint64 wrap-around as numpy scalars, which
    warn, on the simulator's own threads (so ``np.errstate``, per thread, does not reach them)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "overflow encountered", RuntimeWarning)
        yield


def median_seconds(fn: Callable[[], Any], repeats: int, sync: Callable[[], None] = lambda: None
                   ) -> float:
    """Median wall time of ``repeats`` calls of ``fn`` (``sync`` waits for a device)."""
    times = []
    for _ in range(max(1, repeats)):
        sync()
        t = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def merge(per_rank: Sequence[Sequence[dict]]) -> list[dict]:
    """One line per check from every rank's lines (rank order); the detail shown is the first
    failing rank's, else rank 0's."""
    by: dict[str, list[tuple[int, dict]]] = {}  # in order of first appearance
    for rank, lines in enumerate(per_rank):
        for c in lines:
            by.setdefault(c["name"], []).append((rank, c))
    out = []
    for name, lines in by.items():
        verdicts = [c["verdict"] for _, c in lines]
        verdict = FAIL if FAIL in verdicts else PASS if PASS in verdicts else SKIPPED
        rank, shown = next(((r, c) for r, c in lines if c["verdict"] == FAIL), lines[0])
        detail = shown["detail"]
        if len(per_rank) > 1 and verdict == FAIL:
            bad = [r for r, c in lines if c["verdict"] == FAIL]
            detail = f"rank {', '.join(map(str, bad))} failed; rank {rank}: {detail}"
        secs = [c["seconds"] for _, c in lines if c["seconds"] is not None]
        out.append({"name": name, "verdict": verdict, "detail": detail,
                    "seconds": max(secs) if secs else None,
                    "ranks": [{"rank": r, **c} for r, c in lines]})
    return out


def table(lines: Sequence[dict]) -> list[str]:
    """The report's table: check, verdict, time, detail (aligned)."""
    rows = [("check", "verdict", "time", "detail")]
    for c in lines:
        t = "" if c["seconds"] is None else f"{c['seconds']:.2f}s"
        rows.append((c["name"], c["verdict"], t, c["detail"]))
    w = [max(len(r[i]) for r in rows) for i in range(3)]
    return [f"{r[0]:<{w[0]}}  {r[1]:<{w[1]}}  {r[2]:>{w[2]}}  {r[3]}".rstrip() for r in rows]
