"""The loaders' prefetch (``EpochCursor``): requests go to the service in bursts, so a burst
shares one sampling round, and every batch is still handed out once, in order."""

from __future__ import annotations

from concurrent.futures import Future

import numpy as np
import pytest

from mnmg_sampler.loaders.epoch_cursor import EpochCursor, refill


class _Service:
    """Records every submit; a result is available once submitted (a service that keeps up)."""

    def __init__(self) -> None:
        self.log: list[tuple[str, int]] = []

    def submit_all(self, requests: list[int], source=None) -> list[Future]:
        """One call per burst: the log marks where a burst ends."""
        futs = []
        for r in requests:
            self.log.append(("submit", r))
            f: Future = Future()
            f.set_result(r)
            futs.append(f)
        self.log.append(("burst", len(requests)))
        return futs

    def result(self, fut: Future) -> int:
        self.log.append(("wait", fut.result()))
        return fut.result()


class _Cursor(EpochCursor):
    def __init__(self, n: int, prefetch: int) -> None:
        self.service, self.prefetch, self.seed, self.world_size = _Service(), prefetch, 0, 1
        self.n = n
        self._init_cursor()

    def _num_my_batches(self) -> int:
        return self.n

    def _my_batch(self, j: int, epoch: int) -> tuple[int, np.ndarray]:
        return j, np.array([j])

    def __iter__(self):
        return self._iterate(lambda g, pos, epoch: (g, None), lambda res, extra: res)


def _bursts(log: list[tuple[str, int]]) -> list[list[int]]:
    """The requests submitted between two waits, in order (empty runs left out)."""
    out: list[list[int]] = [[]]
    for kind, j in log:
        if kind == "wait":
            out.append([])
        elif kind == "submit":
            out[-1].append(j)
        else:  # a burst is one submit_all call: it never spans a wait
            assert j == len(out[-1]) > 0
    return [b for b in out if b]


@pytest.mark.parametrize("prefetch, want", [
    # the first batch alone, then a refill up to prefetch, then bursts of prefetch - prefetch//2
    (4, [[0], [1, 2, 3, 4], [5, 6], [7, 8], [9]]),
    (5, [[0], [1, 2, 3, 4, 5], [6, 7, 8], [9]]),
    (2, [[0], [1, 2], [3], [4], [5], [6], [7], [8], [9]]),
    (1, [[j] for j in range(10)]),  # prefetch 0 or 1: each batch when it is wanted
])
def test_requests_go_in_bursts_and_every_batch_comes_once_in_order(prefetch, want):
    c = _Cursor(10, prefetch)
    assert list(c) == list(range(10))
    assert _bursts(c.service.log) == want
    # never more than prefetch requests in flight (submitted, not yet waited for)
    inflight = most = 0
    for kind, _ in c.service.log:
        inflight += {"submit": 1, "wait": -1}.get(kind, 0)
        most = max(most, inflight)
    assert most == min(prefetch, 10)
    # a full burst once running is refill(prefetch): what the feature cache plans rounds of
    assert len(_bursts(c.service.log)[2]) == refill(prefetch)
