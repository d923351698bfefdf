"""Symmetric collectives: all-to-all-v exchange and error agreement.

Two rules keep ranks from hanging: a receiver always knows how much to take (counts travel
before payloads, or inside the same message on gloo, see :class:`Exchanger`), and an error found
on one rank is shared with every rank (:func:`agree`) before anyone enters the next collective.
Errors cross ranks as UTF-8 JSON in uint8 tensors (never pickled objects), and are rebuilt only as
classes of :mod:`mnmg_sampler.errors`. A collective that fails because a peer died or stopped
answering becomes a :class:`~mnmg_sampler.errors.PeerError` naming the step (:func:`peer_errors`).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

import numpy as np
import torch
import torch.distributed as dist

from .. import errors as _errors
from ..errors import MnmgError, PeerError, ServiceError

T = TypeVar("T")


def backend_device(group: dist.ProcessGroup | None = None) -> torch.device:
    """Where exchange buffers must live for ``group``: the current GPU for NCCL, else the CPU."""
    backend = dist.get_backend(group)
    if str(backend).lower() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


#: ``fused`` makes gloo exchanges point-to-point messages (opt-in); ``alltoall`` (default): the
#: collectives NCCL uses
EXCHANGE_ENV = "MNMG_SAMPLER_EXCHANGE"
_TAG = 0x4D4E  # point-to-point tag of fused exchanges; +1: overflow parts, +2: agreements
_MIN_CAP = 1 << 16  # first receive capacity per peer (bytes); grows to the largest message


class Exchanger:
    """All-to-all-v over one process group; the one place that counts what the data path sends.

    ``exchange(payload, send_counts)`` sends rows ``payload[sum(c[:r]):sum(c[:r+1])]`` to rank
    ``r``; payload rows may be multi-column. Buffers are moved to the backend's device and results
    come back on the caller's device.

    Two transports, chosen once per exchanger. By default (and always with NCCL) an exchange is
    two all-to-alls: counts, then payload. With gloo and ``MNMG_SAMPLER_EXCHANGE=fused`` it is
    *fused*: each peer gets one point-to-point message, an 8-byte row count followed by the
    rows, and receives into a buffer of a capacity both sides know (the largest message of the
    pair so far, at least 64 KiB); a gloo receive accepts a shorter message, and the rare longer
    one sends its tail as a second message that the receiver expects from the count. Rows a
    rank keeps never leave it, and ranks that exchange nothing with each other still send each
    other their 8 bytes. The agreement (:meth:`agree_max`) is likewise W - 1 small messages
    instead of an all-reduce. A gloo collective runs on one of the group's worker threads and
    every payload of unknown size needs a size all-to-all first; the fused path does neither.
    It is opt-in because it measured better only on a heavily loaded machine (less CPU, less
    waiting) and worse in wall time at moderate load (``docs/performance.md``).

    Counters (read by ``service.stats()``, the benchmarks and the tests): ``bytes_sent`` (every
    row handed to a collective), ``bytes[tag] = [to self, to others]`` per traffic class
    (``ids``, ``features``, ...), ``calls`` (collectives), ``transfers`` (host <-> device copies
    of the data path: ``h2d`` and ``d2h``; every one goes through :meth:`h2d` / :meth:`d2h`).
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
        self.transfers = {"h2d": 0, "d2h": 0}
        self.t_exchange = 0.0
        self.cpu_exchange = 0.0  # this thread's CPU seconds inside collectives
        self.fused = (self.world_size > 1 and self.device.type == "cpu"
                      and str(dist.get_backend(group)).lower() == "gloo"
                      and os.environ.get(EXCHANGE_ENV, "alltoall") == "fused"
                      and (group is None or isinstance(group, dist.ProcessGroup)))
        self._cap = [_MIN_CAP] * self.world_size  # receive capacity per peer (same both sides)
        # agreements of ranks known to share a host go over a host channel when one is set
        # (:mod:`.host_channel`, with the shared topology): no gloo threads involved
        self.host_channel = None
        self._bufs: dict = {}
        # bool per rank, True for ranks on another host (set with the host layout,
        # :mod:`.host_groups`): ``cross_bytes[tag]`` counts the bytes sent to them
        self.far: np.ndarray | None = None
        self.cross_bytes: dict[str, int] = {}

    # -- accounting ---------------------------------------------------------------------------
    def _count(self, tag: str, row_bytes: int, send_counts: Sequence[int]) -> None:
        mine = int(send_counts[self.rank]) * row_bytes
        total = sum(int(c) for c in send_counts) * row_bytes
        b = self.bytes.setdefault(tag, [0, 0])
        b[0] += mine
        b[1] += total - mine
        self.bytes_sent += total
        if self.far is not None and total > mine:
            far = sum(int(c) for c, f in zip(send_counts, self.far, strict=True) if f)
            self.cross_bytes[tag] = self.cross_bytes.get(tag, 0) + far * row_bytes

    @property
    def remote_bytes(self) -> int:
        """Bytes sent to other ranks, all tags."""
        return sum(b[1] for b in self.bytes.values())

    def h2d(self, t: torch.Tensor, device: torch.device) -> torch.Tensor:
        """The data path's host -> device copy (counted even when the CUDA simulator makes the
        device the CPU, so the simulator tests count what a GPU would do)."""
        self.transfers["h2d"] += 1
        return t.to(device, non_blocking=True)

    def d2h(self, t: torch.Tensor) -> torch.Tensor:
        """The data path's device -> host copy (counted like :meth:`h2d`)."""
        self.transfers["d2h"] += 1
        return t.cpu()

    def to_host(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` on the host; a counted copy only when it is on a device."""
        return self.d2h(t) if t.device.type != "cpu" else t

    def _stage(self, t: torch.Tensor) -> torch.Tensor:
        """Move a send buffer to the backend's device (no copy when it is there already)."""
        return self.h2d(t, self.device) if t.device != self.device else t

    def _unstage(self, t: torch.Tensor, device: torch.device) -> torch.Tensor:
        """Bring a received buffer back to the caller's device."""
        if t.device == device:
            return t
        return self.d2h(t) if device.type == "cpu" else t.to(device)

    # -- collectives --------------------------------------------------------------------------
    def counts(self, send_counts: torch.Tensor, tag: str = "counts") -> torch.Tensor:
        """Exchange per-rank row counts (int64 ``[world_size]``); returns the received counts."""
        t0 = time.perf_counter()
        send = self._stage(send_counts.to(torch.int64))
        if self.world_size == 1:  # a group of one: the exchange is the identity
            self.t_exchange += time.perf_counter() - t0
            return send
        recv = torch.empty_like(send)
        c0 = time.thread_time()
        dist.all_to_all_single(recv, send, group=self.group)
        self.cpu_exchange += time.thread_time() - c0
        self.t_exchange += time.perf_counter() - t0
        self.calls += 1
        self._count(tag, 8, [1] * self.world_size)
        return recv

    def payload(self, payload: torch.Tensor, send_counts: Sequence[int],
                recv_counts: Sequence[int], tag: str = "data") -> torch.Tensor:
        """Exchange rows whose per-rank counts both sides already know."""
        t0 = time.perf_counter()
        src_dev = payload.device
        row = _row_bytes(payload)
        self._count(tag, row, send_counts)
        if self.world_size == 1:  # a group of one: the exchange is the identity
            self.t_exchange += time.perf_counter() - t0
            return payload
        if self.fused:
            out = self._p2p_known(payload, [int(c) for c in send_counts],
                                  [int(c) for c in recv_counts])
            self.t_exchange += time.perf_counter() - t0
            return out
        send = self._stage(payload).contiguous()
        out = send.new_empty((int(sum(recv_counts)), *send.shape[1:]))
        c0 = time.thread_time()
        dist.all_to_all_single(out, send, [int(c) for c in recv_counts],
                               [int(c) for c in send_counts], group=self.group)
        self.cpu_exchange += time.thread_time() - c0
        self.calls += 1
        out = self._unstage(out, src_dev)
        self.t_exchange += time.perf_counter() - t0
        return out

    def exchange(self, payload: torch.Tensor, send_counts: torch.Tensor, tag: str = "data"
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """Counts first, then payload (fused into one message per peer on gloo); returns
        ``(received rows, received counts per rank)``."""
        if self.fused:
            t0 = time.perf_counter()
            out = self._p2p_fused(payload, [int(c) for c in self.to_host(send_counts).tolist()],
                                  tag)
            self.t_exchange += time.perf_counter() - t0
            return out
        recv_counts = self.to_host(self.counts(send_counts, tag))
        send_counts = self.to_host(send_counts)
        return self.payload(payload, send_counts.tolist(), recv_counts.tolist(), tag), \
            recv_counts

    def agree_max(self, values: Sequence[int]) -> list[int]:
        """Collective: the element-wise maximum of ``values`` (same length on every rank): an
        all-reduce, or on gloo W - 1 point-to-point messages each way, or through the host
        channel when one is set."""
        if self.host_channel is not None:
            c0 = time.thread_time()
            out = self.host_channel.agree_max(values)
            self.cpu_exchange += time.thread_time() - c0
            self.calls += 1
            return out
        mine = np.asarray([int(v) for v in values], np.int64)
        if not self.fused:
            t = torch.from_numpy(mine).to(self.device)
            dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.group)
            self.calls += 1
            return [int(v) for v in t.tolist()]
        c0 = time.thread_time()
        got = np.empty((self.world_size, mine.size), np.int64)
        got[self.rank] = mine
        works = [self._recv(got[p], p, _TAG + 2) for p in self._peers()]
        works += [self._send(mine, p, _TAG + 2) for p in self._peers()]
        self._wait(works)
        self.cpu_exchange += time.thread_time() - c0
        self.calls += 1
        return [int(v) for v in got.max(0)]

    # -- point-to-point transport (gloo) --------------------------------------------------------
    def _peers(self) -> list[int]:
        """Every other rank, starting after this one (spreads who is served first)."""
        W, me = self.world_size, self.rank
        return [(me + i) % W for i in range(1, W)]

    def _send(self, a: np.ndarray, peer: int, tag: int):
        """Post a send of ``a`` (kept alive by the caller until waited on)."""
        return dist.isend(torch.from_numpy(a), group=self.group, tag=tag, group_dst=peer)

    def _recv(self, a: np.ndarray, peer: int, tag: int):
        """Post a receive into ``a``: a gloo receive takes any message up to ``a``'s size."""
        return dist.irecv(torch.from_numpy(a), group=self.group, tag=tag, group_src=peer)

    def _rbuf(self, p: int, n: int) -> np.ndarray:
        b = self._bufs.get(("r", p))
        if b is None or b.size < n:
            b = self._bufs[("r", p)] = np.empty(n, np.uint8)
        return b[:n]

    def _sbuf(self, p: int, n: int) -> np.ndarray:
        b = self._bufs.get(("s", p))
        if b is None or b.size < n:
            b = self._bufs[("s", p)] = np.empty(_pow2(n), np.uint8)
        return b[:n]

    @staticmethod
    def _wait(works) -> None:
        for w in works:
            w.wait()

    def _p2p_known(self, payload: torch.Tensor, send: list[int], recv: list[int]
                   ) -> torch.Tensor:
        """Rows to every peer in one message each; both sides know every count."""
        c0 = time.thread_time()
        payload = payload.contiguous()
        row = _row_bytes(payload)
        src = _bytes(payload)
        dst = np.empty(sum(recv) * row, np.uint8)
        soff, roff = _offsets(send, row), _offsets(recv, row)
        works = []
        for p in self._peers():
            if recv[p]:
                works.append(self._recv(dst[roff[p]:roff[p + 1]], p, _TAG))
            if send[p]:
                works.append(self._send(src[soff[p]:soff[p + 1]], p, _TAG))
        me = self.rank
        dst[roff[me]:roff[me + 1]] = src[soff[me]:soff[me + 1]]
        self._wait(works)
        self.cpu_exchange += time.thread_time() - c0
        self.calls += 1
        return _rows(dst, payload)

    def _p2p_fused(self, payload: torch.Tensor, send: list[int], tag: str
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        """One message per peer: its row count (int64), then its rows (see the class doc)."""
        c0 = time.thread_time()
        payload = payload.contiguous()
        W, me, row = self.world_size, self.rank, _row_bytes(payload)
        src = _bytes(payload)
        soff = _offsets(send, row)
        peers = self._peers()
        msgs: dict[int, np.ndarray] = {}
        # receive buffers live for one exchange: only the pages a message fills are touched
        bufs = {p: self._rbuf(p, self._cap[p]) for p in peers}
        works = []
        for p in peers:
            cap = self._cap[p]
            works.append(self._recv(bufs[p], p, _TAG))
            m = self._sbuf(p, 8 + soff[p + 1] - soff[p])
            m[:8].view(np.int64)[0] = send[p]
            m[8:] = src[soff[p]:soff[p + 1]]
            msgs[p] = m
            works.append(self._send(m[:cap], p, _TAG))
        self._wait(works)
        recv = [0] * W
        recv[me] = send[me]
        tails = []
        for p in peers:
            buf = bufs[p]
            recv[p] = int(buf[:8].view(np.int64)[0])
            n_in, n_out, cap = 8 + recv[p] * row, msgs[p].size, self._cap[p]
            if n_in > cap:  # the tail of a message longer than any before: expected by count
                grown = np.empty(n_in, np.uint8)
                grown[:cap] = buf
                bufs[p] = buf = grown
                tails.append(self._recv(buf[cap:n_in], p, _TAG + 1))
            if n_out > cap:
                tails.append(self._send(msgs[p][cap:], p, _TAG + 1))
            self._cap[p] = max(cap, _pow2(max(n_in, n_out)))  # both sides compute the same
        self._wait(tails)
        roff = _offsets(recv, row)
        dst = np.empty(roff[-1], np.uint8)
        for p in range(W):
            if p == me:
                dst[roff[p]:roff[p + 1]] = src[soff[p]:soff[p + 1]]
            elif recv[p]:
                dst[roff[p]:roff[p + 1]] = bufs[p][8:8 + recv[p] * row]
        self.cpu_exchange += time.thread_time() - c0
        self.calls += 1
        # rows to self and to others, plus the 8-byte row count of every message
        mine, others = send[me] * row, (sum(send) - send[me]) * row + 8 * (W - 1)
        b = self.bytes.setdefault(tag, [0, 0])
        b[0] += mine
        b[1] += others
        self.bytes_sent += mine + others
        return _rows(dst, payload), torch.from_numpy(np.asarray(recv, np.int64))


def _row_bytes(t: torch.Tensor) -> int:
    row = t.element_size()
    for d in t.shape[1:]:
        row *= int(d)
    return row


def _bytes(t: torch.Tensor) -> np.ndarray:
    """A contiguous CPU tensor's storage as flat uint8 numpy (no copy)."""
    a = np.ascontiguousarray(t.numpy()).reshape(-1)  # any strides of empty or 1-row tensors
    return a.view(np.uint8)


def _rows(raw: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    """Flat bytes as rows shaped and typed like ``like`` (no copy)."""
    t = torch.from_numpy(raw)
    return t.view(like.dtype).reshape(-1, *like.shape[1:]) if raw.size else like.new_empty(
        (0, *like.shape[1:]))


def _offsets(counts: Sequence[int], row: int) -> list[int]:
    out = [0]
    for c in counts:
        out.append(out[-1] + int(c) * row)
    return out


def _pow2(n: int) -> int:
    return 1 << max(int(n) - 1, 1).bit_length()


def agree(fn: Callable[[], T], group: dist.ProcessGroup | None = None,
          step: str | None = None) -> T:
    """Run ``fn`` on every rank; if it raises on any rank, raise on all.

    The failing rank raises its own error; the others raise the same :class:`MnmgError` type
    (any other exception: :class:`ServiceError`), prefixed with the failing rank, so no rank is
    left waiting in a collective that will never complete. ``step`` names ``fn`` in the
    :class:`PeerError` raised when a peer dies during the agreement itself.
    """
    err: BaseException | None = None
    result = None
    try:
        result = fn()
    except Exception as e:  # shared with every rank, then re-raised here with its traceback
        err = e
    raise_if_any(err, group, step or getattr(fn, "__name__", "a step"))
    return result  # type: ignore[return-value]


def raise_if_any(err: BaseException | None, group: dist.ProcessGroup | None = None,
                 step: str = "a step") -> None:
    """Collective: raise on every rank if ``err`` is set on any rank."""
    flag = torch.tensor([1 if err is not None else 0], dtype=torch.int64,
                        device=backend_device(group))
    with peer_errors(f"the error agreement after {step}"):
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
    if int(flag.item()) != 0:
        raise_agreed(err, group)


def raise_agreed(err: BaseException | None, group: dist.ProcessGroup | None = None) -> None:
    """Collective, once every rank knows that some rank failed: raise on every rank.

    For callers that already agreed on a failure flag (e.g. inside a larger all-reduce). The
    lowest failing rank's error is raised on the ranks that did not fail.
    """
    with peer_errors("the error exchange between ranks"):
        records = all_gather_bytes(_portable(err), group)
    if err is not None:
        raise err
    rank, raw = next((r, b) for r, b in enumerate(records) if b)
    raise _rebuild(rank, raw)


_FIELD_CHARS = 2000  # per message part: errors stay small on the wire


def _portable(err: BaseException | None) -> bytes:
    """``err`` as UTF-8 JSON of plain strings (empty for no error): type name and message."""
    if err is None:
        return b""
    if isinstance(err, MnmgError):
        parts = {"what": err.what, "consequence": err.consequence, "fix": err.fix}
    else:
        parts = {"what": f"{type(err).__name__}: {err}", "consequence": "", "fix": ""}
    rec = {"type": type(err).__name__, **{k: str(v)[:_FIELD_CHARS] for k, v in parts.items()}}
    return json.dumps(rec, ensure_ascii=False).encode("utf-8")


def _rebuild(rank: int, raw: bytes) -> MnmgError:
    """The error another rank raised, as a class of :mod:`mnmg_sampler.errors` only."""
    try:
        rec = json.loads(raw.decode("utf-8", errors="replace"))
        name, what = str(rec["type"]), str(rec["what"])
        consequence, fix = str(rec.get("consequence", "")), str(rec.get("fix", ""))
    except (ValueError, KeyError, TypeError):
        name, what, consequence, fix = "?", repr(raw[:200]), "", ""
    cls = getattr(_errors, name, None) if name in _errors.__all__ else None
    if isinstance(cls, type) and issubclass(cls, MnmgError):
        try:
            return cls(f"rank {rank}: {what}", consequence, fix)
        except TypeError:  # a class with another signature: fall through to ServiceError
            pass
        what = f"{name}: {what}"
    return ServiceError(f"rank {rank} failed: {what}", "every rank stops",
                        f"see rank {rank}'s log for the traceback")


def all_gather_1d(t: torch.Tensor, group: dist.ProcessGroup | None = None
                  ) -> list[torch.Tensor]:
    """Collective: every rank's 1-D tensor (any length, same dtype on every rank), by rank.

    Lengths travel first, then payloads padded to the longest; results are on the CPU.
    """
    dev = backend_device(group)
    world = dist.get_world_size(group)
    n = torch.tensor([t.numel()], dtype=torch.int64, device=dev)
    sizes = [torch.empty_like(n) for _ in range(world)]
    dist.all_gather(sizes, n, group=group)
    lens = [int(s.item()) for s in sizes]
    longest = max(lens)
    if longest == 0:
        return [t.new_empty(0).cpu() for _ in lens]
    buf = torch.zeros(longest, dtype=t.dtype, device=dev)
    buf[: t.numel()] = t.reshape(-1).to(dev)
    outs = [torch.empty_like(buf) for _ in range(world)]
    dist.all_gather(outs, buf, group=group)
    return [o[:k].cpu() for o, k in zip(outs, lens, strict=True)]


def all_gather_bytes(data: bytes, group: dist.ProcessGroup | None = None) -> list[bytes]:
    """Collective: every rank's byte string, by rank (a uint8 tensor on the wire)."""
    t = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(
        0, dtype=torch.uint8)
    return [bytes(o.numpy().tobytes()) for o in all_gather_1d(t, group)]


# -- peers that die or stop answering ---------------------------------------------------------
_TRANSPORT_WORDS = ("gloo", "nccl", "connection closed", "connection reset", "connection refused",
                    "timed out", "timeout", "broken pipe", "socket", "store", "peer")


def is_peer_failure(exc: BaseException) -> bool:
    """True for the errors a collective raises when another rank died or stopped answering.

    torch raises ``DistError`` subclasses for store and network failures, but gloo raises a
    plain ``RuntimeError`` whose text names the transport; that text is what is matched.
    """
    if isinstance(exc, PeerError):
        return True
    if isinstance(exc, MnmgError) or not isinstance(exc, RuntimeError):
        return False
    if isinstance(exc, getattr(dist, "DistError", ())):
        return True
    text = str(exc).lower()
    return any(w in text for w in _TRANSPORT_WORDS)


def transport_message(exc: BaseException) -> str:
    """The first sentence of a transport error, without gloo's source-file prefix."""
    text = " ".join(str(exc).split())
    if text.startswith("[") and "] " in text:
        text = text.split("] ", 1)[1]
    return (text.split(". ", 1)[0].rstrip(".") or type(exc).__name__)[:_FIELD_CHARS]


def peer_error(exc: BaseException, step: str) -> PeerError:
    """``exc`` (a failed collective) as a :class:`PeerError` naming ``step``."""
    if isinstance(exc, PeerError):
        return exc
    return PeerError(f"{step} did not complete: {transport_message(exc)}",
                     "another rank died, stopped answering or never joined; this rank stops too",
                     "find the first error in the other ranks' logs (a rank killed by a signal "
                     "or the OOM killer leaves none), then restart the job (train: with "
                     "--resume to continue from the last checkpoint)")


@contextmanager
def peer_errors(step: str) -> Iterator[None]:
    """Turn a collective's transport failure inside the block into a :class:`PeerError`."""
    try:
        yield
    except Exception as e:
        if is_peer_failure(e) and not isinstance(e, PeerError):
            raise peer_error(e, step) from e
        raise


def group_timeout(group: dist.ProcessGroup | None = None) -> float:
    """The collective timeout of ``group`` in seconds (torch's default when it is unknown)."""
    try:
        pg = group if group is not None else dist.distributed_c10d._get_default_group()
        return float(pg._get_backend(backend_device(group)).options._timeout.total_seconds())
    except Exception:  # private API: another torch version, or another backend
        return float(dist.default_pg_timeout.total_seconds())
