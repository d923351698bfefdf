"""The epoch cursor both distributed loaders share: epoch, resume point, prefetched iteration.

A node loader and a link loader differ only in how a rank's batches are chosen and what a batch
request is; which batch comes next, how an interrupted epoch resumes and how requests are kept in
flight ahead of the consumer are the same, and live here once.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import numpy as np

from ..errors import PartitionMismatchError, SamplingInputError

__all__ = ["PREFETCH", "EpochCursor", "refill"]

T = TypeVar("T")
PREFETCH = 8  # the loaders' default requests in flight


def refill(prefetch: int = PREFETCH) -> int:
    """Requests of a loader's refill once it runs (:meth:`EpochCursor._prefetched`): the
    requests of it that a round takes, which a feature cache plans for."""
    p = max(1, int(prefetch))
    return p - p // 2


class EpochCursor:
    """Mixin of a loader over a rank's batches ``(g, positions)``, served by ``self.service``.

    The loader sets ``service``, ``prefetch``, ``seed`` and ``world_size``, calls
    :meth:`_init_cursor` and defines ``_num_my_batches()`` (this rank's batch count),
    ``_my_batch(j, epoch)`` (its batch ``j`` of ``epoch`` as ``(g, positions)``, computed when
    it is requested: no epoch's worth of positions is held) and ``_num_seeds()`` (the size of
    the seed set, checked on resume); ``_partition_fingerprint()`` when its batches depend on
    the partitioning (checked on resume too).
    """

    _seeds_word = "seeds"  # the seed set in messages: "12 seeds"
    _seeds_fix = "seed set"  # ... and in the fix: "the same world size and seed set"

    def _init_cursor(self) -> None:
        self.epoch = 0
        self._next = 0  # index (on this rank) of the next batch to hand out
        self._resume = 0
        self._resume_epoch: int | None = None

    def _num_my_batches(self) -> int:
        raise NotImplementedError

    def _my_batch(self, j: int, epoch: int) -> tuple[int, np.ndarray]:
        raise NotImplementedError

    def _partition_fingerprint(self) -> list[int] | None:
        """Fingerprint of the partitioning the batches depend on (``None``: they do not)."""
        return None

    def _num_seeds(self) -> int:
        raise NotImplementedError

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch's shuffle and request keys (call before iterating, like PyTorch's);
        a resume point from :meth:`load_state_dict` survives ``set_epoch`` of the same epoch."""
        self.epoch = int(epoch)
        if self._resume_epoch != self.epoch:
            self._resume = 0
        self._resume_epoch = None

    def _iterate(self, plan: Callable[[int, np.ndarray, int], tuple[Any, T]],
                 finish: Callable[[Any, T], Any]) -> Iterator:
        """This rank's batches from the resume point: ``plan(g, pos, epoch)`` gives the request
        of global batch ``g`` and what ``finish(result, that)`` needs to make the item."""
        start, epoch, count = self._resume, self.epoch, self._num_my_batches()
        self._resume, self._resume_epoch = 0, None
        units = (plan(*self._my_batch(j, epoch), epoch) for j in range(start, count))
        for j, (result, extra) in enumerate(self._prefetched(units)):
            self._next = start + j + 1
            yield finish(result, extra)
        self._next = 0

    def _prefetched(self, units: Iterator[tuple[Any, T]]) -> Iterator[tuple[Any, T]]:
        """``(result, extra)`` of each ``(request, extra)`` of ``units``, in order, with up to
        ``prefetch`` requests in flight at the service.

        The first request goes alone, so it is not delayed by a merged burst; the rest are
        submitted when a result arrives, before it is handed to the caller, so sampling runs
        while the caller trains. Refills come in bursts (once at most half of ``prefetch`` is
        left in flight): a burst reaches the service before its next round starts, so its
        requests share one round (one agreement and one exchange per hop, whose fixed cost
        dominated rounds of one request over the wire), and a round takes one burst of this
        loader, so every rank's round takes as many of its requests."""
        inflight: deque = deque()

        def top_up(n: int) -> None:  # one burst: a round takes all of it or none
            burst = list(itertools.islice(units, max(0, n - len(inflight))))
            futs = self.service.submit_all([u[0] for u in burst], source=id(self)) \
                if burst else []
            inflight.extend(zip(futs, (u[1] for u in burst), strict=True))

        top_up(1)
        while inflight:
            fut, extra = inflight.popleft()
            result = self.service.result(fut)
            if len(inflight) <= self.prefetch // 2:
                top_up(self.prefetch)
            yield result, extra

    def state_dict(self) -> dict:
        """Where the iteration stands: resuming yields exactly the batches not yet handed out
        (with ``split="owner"``, ``partition`` holds the partitioning's fingerprint)."""
        state = {"epoch": self.epoch, "next_batch": self._next, "seed": self.seed,
                 "world_size": self.world_size, "num_seeds": self._num_seeds()}
        fp = self._partition_fingerprint()
        if fp is not None:
            state["partition"] = list(fp)
        return state

    def load_state_dict(self, state: dict) -> None:
        """Resume mid-epoch: the next ``iter()`` starts at the saved batch of the saved epoch.

        Raises :class:`SamplingInputError` for another world size or seed set, and
        :class:`PartitionMismatchError` when the batches depend on the partitioning and the
        state was saved on another one (or records none).
        """
        fp = self._partition_fingerprint()
        if fp is not None and [int(v) for v in state.get("partition") or []] != list(fp):
            saved = ("records no partitioning" if not state.get("partition")
                     else "was saved on another partitioning")
            raise PartitionMismatchError(
                f"loader state {saved}, but this loader's seeds are split by owner",
                "each rank's seeds, and so the remaining batches, follow the partitioning; "
                "they would differ from the interrupted run",
                "resume on the partition directory the state was saved with, or start the "
                "epoch afresh (set_epoch) instead of loading the state")
        n = self._num_seeds()
        if state.get("world_size") != self.world_size or state.get("num_seeds") != n:
            raise SamplingInputError(
                f"loader state was saved with world size {state.get('world_size')} and "
                f"{state.get('num_seeds')} {self._seeds_word}; this loader has "
                f"{self.world_size} and {n}",
                "the remaining batches would differ from the interrupted run",
                f"resume with the same world size and {self._seeds_fix}",
            )
        self.epoch = int(state["epoch"])
        self.seed = int(state["seed"])
        self._resume = int(state["next_batch"])
        self._resume_epoch = self.epoch
