"""Symmetric collectives: all-to-all-v exchange and error agreement.

Two rules keep ranks from hanging: a receiver always knows how much to take (counts travel
before payloads, or a bound both sides compute sizes the receive: :class:`Exchanger`), and an
error found on one rank reaches every rank (:func:`agree`) before anyone enters the next
collective. Errors cross ranks as UTF-8 JSON in uint8 tensors (never pickled), rebuilt only as
:mod:`mnmg_sampler.errors` classes. A collective that fails because a peer died or stopped
answering becomes a :class:`~mnmg_sampler.errors.PeerError` naming the step (:func:`peer_errors`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

import numpy as np
import torch
import torch.distributed as dist

from .. import errors as _errors
from ..errors import MnmgError, PeerError, ServiceError
from ..ops import bitpack

T = TypeVar("T")


def uses_nccl(group: dist.ProcessGroup | None = None) -> bool:
    """Whether ``group`` sends through NCCL (alone, or as ``cpu:gloo,cuda:nccl``)."""
    return "nccl" in str(dist.get_backend(group)).lower()


def backend_device(group: dist.ProcessGroup | None = None) -> torch.device:
    """Where exchange buffers must live for ``group``: the current GPU for NCCL, else the CPU."""
    if uses_nccl(group):
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


class Exchanger:
    """All-to-all-v over one process group; the one place that counts what the data path sends.

    ``exchange(payload, send_counts)`` sends rows ``payload[sum(c[:r]):sum(c[:r+1])]`` (of any
    width) to rank ``r``, counts first, then payload; results come back on the caller's
    device. The data path avoids the count exchange with :meth:`bounded` and :meth:`payload`.
    Integer words to ranks of other hosts travel bit-packed on gloo (:meth:`_packs`; see
    docs/architecture.md#bit-packed-words-between-hosts).

    Counters (read by ``service.stats()``, the benchmarks and the tests; see
    docs/architecture.md#counters): ``bytes_sent`` (packed blocks at their encoded size),
    ``bytes[tag] = [to self, to others]``, ``cross_bytes[tag]`` (to other hosts), ``calls``
    (``agreements`` of them all-reduces), ``transfers`` (:meth:`h2d` / :meth:`d2h` copies).
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
        self.agreements = 0  # of the calls: agreements (all-reduces), each one exchange alone
        self.transfers = {"h2d": 0, "d2h": 0}
        self.t_exchange = 0.0
        self.cpu_exchange = 0.0  # this thread's CPU seconds inside collectives
        # gloo takes a message shorter than its receive (NCCL needs the exact size)
        self.short_receives = self.device.type == "cpu" and not uses_nccl(group)
        # agreements of ranks known to share a host go over a host channel when one is set
        # (:mod:`.host_channel`, with the shared topology): no gloo threads involved
        self.host_channel = None
        # bool per rank, True for ranks on another host (set with the host layout,
        # :mod:`.host_groups`): ``cross_bytes[tag]`` counts the bytes sent to them
        self.far: Sequence[bool] | None = None
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
    def _all_to_all(self, out: torch.Tensor, send: torch.Tensor, recv_splits=None,
                    send_splits=None) -> None:
        """One all-to-all over the group, counted (a call, this thread's CPU in it)."""
        c0 = time.thread_time()
        dist.all_to_all_single(out, send, recv_splits, send_splits, group=self.group)
        self.cpu_exchange += time.thread_time() - c0
        self.calls += 1

    def counts(self, send_counts: torch.Tensor, tag: str = "counts") -> torch.Tensor:
        """Exchange per-rank row counts (int64 ``[world_size]``); returns the received counts."""
        t0 = time.perf_counter()
        send = self._stage(send_counts.to(torch.int64))
        if self.world_size == 1:  # a group of one: the exchange is the identity
            self.t_exchange += time.perf_counter() - t0
            return send
        recv = torch.empty_like(send)
        self._all_to_all(recv, send)
        self.t_exchange += time.perf_counter() - t0
        self._count(tag, 8, [1] * self.world_size)
        return recv

    def payload(self, payload: torch.Tensor, send_counts: Sequence[int],
                recv_counts: Sequence[int], tag: str = "data",
                out: torch.Tensor | None = None) -> torch.Tensor:
        """Exchange rows whose per-rank counts both sides already know; ``out``: a contiguous
        buffer of the received rows' shape on the backend's device to receive into (a caller's
        reused buffer; not for bit-packed payloads)."""
        if self._packs(payload):
            return self._packed(payload, send_counts, send_counts, recv_counts, True, tag)
        t0 = time.perf_counter()
        src_dev = payload.device
        row = _row_bytes(payload)
        self._count(tag, row, send_counts)
        if self.world_size == 1:  # a group of one: the exchange is the identity
            self.t_exchange += time.perf_counter() - t0
            return payload
        send = self._stage(payload).contiguous()
        if out is None:
            out = send.new_empty((int(sum(recv_counts)), *send.shape[1:]))
        self._all_to_all(out, send, [int(c) for c in recv_counts], [int(c) for c in send_counts])
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

    def bounded(self, payload: torch.Tensor, send_counts: Sequence[int],
                send_bounds: Sequence[int], recv_bounds: Sequence[int], tag: str = "data"
                ) -> torch.Tensor:
        """One all-to-all of blocks that say their own size inside (the receiver parses them):
        ``send_counts[r]`` rows to rank ``r``, at most ``send_bounds[r]``, which rank ``r``
        passes as its ``recv_bounds``. Block ``r`` of the result starts after
        ``recv_bounds[:r]`` rows; rows past a block's own size are undefined. On gloo only the
        rows travel (a receive takes a shorter message; integer words to other hosts
        bit-packed); on other backends every block is padded with zeros to its bound. Rows to
        self must equal their bound."""
        W, me = self.world_size, self.rank
        send = [int(c) for c in send_counts]
        sb, rb = [int(c) for c in send_bounds], [int(c) for c in recv_bounds]
        if any(c > b for c, b in zip(send, sb, strict=True)) or send[me] != rb[me]:
            raise RuntimeError(f"a block is longer than its bound: {send} rows, bounds {sb}")
        sb[me] = send[me]  # rows to self are copied, never padded
        if W == 1:
            self._count(tag, _row_bytes(payload), send)
            return payload
        if self._packs(payload):
            return self._packed(payload, send, sb, rb, False, tag)
        t0 = time.perf_counter()
        src_dev = payload.device
        send_t = self._stage(payload).contiguous()
        if not self.short_receives:  # pad every block to its bound
            padded = send_t.new_zeros((sum(sb), *send_t.shape[1:]))
            o = p = 0
            for c, b in zip(send, sb, strict=True):
                padded[p:p + c] = send_t[o:o + c]
                o, p = o + c, p + b
            send_t, send = padded, sb
        self._count(tag, _row_bytes(payload), send)
        out = send_t.new_empty((sum(rb), *send_t.shape[1:]))
        self._all_to_all(out, send_t, rb, send)
        out = self._unstage(out, src_dev)
        self.t_exchange += time.perf_counter() - t0
        return out

    # -- bit-packed ids ----------------------------------------------------------------------
    def _packs(self, payload: torch.Tensor) -> bool:
        """Whether ``payload`` travels bit-packed (:mod:`..ops.bitpack`): integer words
        (1-D int32/int64: ids, counts, headers, lookups) on gloo, to at least one peer."""
        return (self.short_receives and self.world_size > 1 and payload.dim() == 1
                and payload.dtype in (torch.int32, torch.int64)
                and payload.device.type == "cpu" and bool(self._pack_peers().any()))

    def _pack_peers(self) -> np.ndarray:
        """Per rank, True where blocks to and from it are bit-packed: the ranks of other hosts
        (``far``, symmetric: rank ``a`` packs for ``b`` exactly when ``b`` packs for ``a``).
        Ranks of one host exchange raw words: packing costs CPU and saves no scarce bytes."""
        if self.far is None:
            return np.zeros(self.world_size, bool)
        return np.asarray(self.far, bool)

    def _packed(self, payload: torch.Tensor, send_counts: Sequence[int],
                send_bounds: Sequence[int], recv_bounds: Sequence[int], exact: bool,
                tag: str) -> torch.Tensor:
        """:meth:`bounded` (``exact`` False) or :meth:`payload` (``exact``) of integer words,
        bit-packed to the peers of :meth:`_pack_peers`: byte bounds follow from the word
        bounds, so nothing travels first; the block to self is copied, never sent."""
        t0 = time.perf_counter()
        me = self.rank
        vals = payload.contiguous().numpy()
        isz = vals.itemsize
        send = [int(c) for c in send_counts]
        sb, rb = [int(c) for c in send_bounds], [int(c) for c in recv_bounds]
        if send[me] != rb[me]:
            raise RuntimeError(f"{send[me]} rows to self, {rb[me]} expected")
        peers = self._pack_peers().tolist()
        # a block of bound 0 is empty: nothing travels; the block to self never travels
        to = [p and b > 0 for p, b in zip(peers, sb, strict=True)]
        frm = [p and b > 0 for p, b in zip(peers, rb, strict=True)]
        rbb = bitpack.block_bytes(rb, frm, isz)
        rbb[me] = 0
        buf, sizes = bitpack.encode_blocks(vals, send, to, me)
        got = torch.empty(sum(rbb), dtype=torch.uint8)
        self._all_to_all(got, torch.from_numpy(buf), rbb, sizes.tolist())
        sizes[me] = send[me] * isz
        self._count(tag, 1, sizes)
        out = np.empty(sum(rb), vals.dtype)
        bitpack.decode_blocks(got.numpy(), rbb, rb, frm, out, me, exact)
        s0, r0 = sum(send[:me]), sum(rb[:me])
        out[r0:r0 + rb[me]] = vals[s0:s0 + send[me]]
        self.t_exchange += time.perf_counter() - t0
        return torch.from_numpy(out)

    def agree_max(self, values: Sequence[int]) -> list[int]:
        """Collective: the element-wise maximum of ``values`` (same length on every rank): an
        all-reduce, or through the host channel when one is set."""
        if self.host_channel is not None:
            c0 = time.thread_time()
            out = self.host_channel.agree_max(values)
            self.cpu_exchange += time.thread_time() - c0
            self.calls += 1
            self.agreements += 1
            return out
        t = torch.tensor([int(v) for v in values], dtype=torch.int64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.group)
        self.calls += 1
        self.agreements += 1
        return [int(v) for v in t.tolist()]


def _row_bytes(t: torch.Tensor) -> int:
    row = t.element_size()
    for d in t.shape[1:]:
        row *= int(d)
    return row


def agree(fn: Callable[[], T], group: dist.ProcessGroup | None = None,
          step: str | None = None) -> T:
    """Collective: run ``fn`` on every rank; if it raises on any rank, raise on all.

    The failing rank raises its own error; the others the same :class:`MnmgError` type (any
    other exception: :class:`ServiceError`), prefixed with the failing rank. ``step`` names
    ``fn`` in the :class:`PeerError` raised when a peer dies during the agreement itself.
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
    """Collective, once every rank agreed that some rank failed (e.g. inside a larger
    all-reduce): raise on every rank; the ranks that did not fail raise the lowest failing
    rank's error."""
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
    """Collective: every rank's 1-D tensor (any length, same dtype on every rank), by rank,
    on the CPU (lengths first, then payloads padded to the longest)."""
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
    """True for the errors a collective raises when another rank died or stopped answering
    (torch's ``DistError``, or gloo's plain ``RuntimeError`` whose text names the transport)."""
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
