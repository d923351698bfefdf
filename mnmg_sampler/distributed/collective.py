"""Symmetric collectives: all-to-all-v exchange and error agreement.

Two rules keep ranks from hanging: counts travel before payloads, and a user error found on one
rank is shared with every rank (:func:`agree`) before anyone enters the next collective.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TypeVar

import torch
import torch.distributed as dist

from ..errors import MnmgError, ServiceError

T = TypeVar("T")


def backend_device(group: dist.ProcessGroup | None = None) -> torch.device:
    """Where exchange buffers must live for ``group``: the current GPU for NCCL, else the CPU."""
    backend = dist.get_backend(group)
    if str(backend).lower() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


class Exchanger:
    """All-to-all-v over one process group; the one place that counts what the data path sends.

    ``exchange(payload, send_counts)`` sends rows ``payload[sum(c[:r]):sum(c[:r+1])]`` to rank
    ``r``; payload rows may be multi-column. Buffers are moved to the backend's device and results
    come back on the caller's device.

    Counters (read by ``service.stats()``, the benchmarks and the tests): ``bytes_sent`` (every
    row handed to a collective), ``bytes[tag] = [to self, to others]`` per traffic class
    (``ids``, ``features``, ...), ``calls`` (collectives), ``host_transfers`` (host <-> device
    copies made by staging, see :meth:`to_host`).
    """

    def __init__(self, group: dist.ProcessGroup | None = None,
                 device: torch.device | None = None) -> None:
        self.group = group
        self.world_size = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.device = device if device is not None else backend_device(group)
        self.bytes_sent = 0
        self.bytes: dict[str, list[int]] = {}
        self.calls = 0
        self.host_transfers = 0
        self.t_exchange = 0.0

    # -- accounting ---------------------------------------------------------------------------
    def _count(self, tag: str, row_bytes: int, send_counts: Sequence[int]) -> None:
        mine = int(send_counts[self.rank]) * row_bytes
        total = sum(int(c) for c in send_counts) * row_bytes
        b = self.bytes.setdefault(tag, [0, 0])
        b[0] += mine
        b[1] += total - mine
        self.bytes_sent += total

    @property
    def remote_bytes(self) -> int:
        """Bytes sent to other ranks, all tags."""
        return sum(b[1] for b in self.bytes.values())

    def to_host(self, t: torch.Tensor) -> torch.Tensor:
        """The data path's only way to bring a tensor to the host: counts device -> host copies."""
        if t.device.type != "cpu":
            self.host_transfers += 1
            return t.cpu()
        return t

    def _stage(self, t: torch.Tensor) -> torch.Tensor:
        """Move a send buffer to the backend's device (no copy when it is there already)."""
        if t.device != self.device:
            self.host_transfers += 1
        return t.to(self.device, non_blocking=True)

    def _unstage(self, t: torch.Tensor, device: torch.device) -> torch.Tensor:
        """Bring a received buffer back to the caller's device."""
        if t.device != device:
            self.host_transfers += 1
        return t.to(device)

    # -- collectives --------------------------------------------------------------------------
    def counts(self, send_counts: torch.Tensor, tag: str = "counts") -> torch.Tensor:
        """Exchange per-rank row counts (int64 ``[world_size]``); returns the received counts."""
        t0 = time.perf_counter()
        send = self._stage(send_counts.to(torch.int64))
        if self.world_size == 1:  # a group of one: the exchange is the identity
            self.t_exchange += time.perf_counter() - t0
            return send
        recv = torch.empty_like(send)
        dist.all_to_all_single(recv, send, group=self.group)
        self.t_exchange += time.perf_counter() - t0
        self.calls += 1
        self._count(tag, 8, [1] * self.world_size)
        return recv

    def payload(self, payload: torch.Tensor, send_counts: Sequence[int],
                recv_counts: Sequence[int], tag: str = "data") -> torch.Tensor:
        """Exchange rows whose per-rank counts both sides already know."""
        t0 = time.perf_counter()
        src_dev = payload.device
        row = payload.element_size()
        for d in payload.shape[1:]:
            row *= int(d)
        self._count(tag, row, send_counts)
        if self.world_size == 1:  # a group of one: the exchange is the identity
            self.t_exchange += time.perf_counter() - t0
            return payload
        send = self._stage(payload).contiguous()
        out = send.new_empty((int(sum(recv_counts)), *send.shape[1:]))
        dist.all_to_all_single(out, send, [int(c) for c in recv_counts],
                               [int(c) for c in send_counts], group=self.group)
        self.calls += 1
        out = self._unstage(out, src_dev)
        self.t_exchange += time.perf_counter() - t0
        return out

    def exchange(self, payload: torch.Tensor, send_counts: torch.Tensor, tag: str = "data"
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """Counts first, then payload; returns ``(received rows, received counts per rank)``."""
        recv_counts = self.to_host(self.counts(send_counts, tag))
        send_counts = self.to_host(send_counts)
        return self.payload(payload, send_counts.tolist(), recv_counts.tolist(), tag), \
            recv_counts


def agree(fn: Callable[[], T], group: dist.ProcessGroup | None = None) -> T:
    """Run ``fn`` on every rank; if it raises an :class:`MnmgError` on any rank, raise on all.

    The failing rank raises its own error; the others raise the same type, prefixed with the
    failing rank, so no rank is left waiting in a collective that will never complete.
    """
    err: BaseException | None = None
    result = None
    try:
        result = fn()
    except MnmgError as e:
        err = e
    raise_if_any(err, group)
    return result  # type: ignore[return-value]


def raise_if_any(err: BaseException | None, group: dist.ProcessGroup | None = None) -> None:
    """Collective: raise on every rank if ``err`` is set on any rank."""
    flag = torch.tensor([1 if err is not None else 0], dtype=torch.int64,
                        device=backend_device(group))
    dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
    if int(flag.item()) != 0:
        raise_agreed(err, group)


def raise_agreed(err: BaseException | None, group: dist.ProcessGroup | None = None) -> None:
    """Collective, once every rank knows that some rank failed: raise on every rank.

    For callers that already agreed on a failure flag (e.g. inside a larger all-reduce).
    """
    world = dist.get_world_size(group)
    errs: list = [None] * world
    dist.all_gather_object(errs, _portable(err), group=group)
    if err is not None:
        raise err
    rank, first = next((r, e) for r, e in enumerate(errs) if e is not None)
    if isinstance(first, MnmgError):
        raise type(first)(f"rank {rank}: {first.what}", first.consequence, first.fix)
    raise ServiceError(f"rank {rank} failed: {first}", "every rank stops",
                       "see rank {rank}'s log for the traceback")


def _portable(err: BaseException | None):
    if err is None or isinstance(err, MnmgError):
        return err
    return repr(err)
