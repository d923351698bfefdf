"""Host channel: the round's agreement between ranks of one host, over Unix sockets.

With the shared topology a sampling round's only collective is its agreement: an element-wise
maximum of a few integers, which as a gloo all-reduce costs 10-30% of the round's sampling
(docs/loader.md#shared-topology). Ranks known to share a host reduce over a star of Unix stream
sockets instead, rooted at rank 0; blocking socket calls release the GIL, nothing polls.

Failure modes match a collective's: a peer that exits closes its socket, so the others get a
:class:`~mnmg_sampler.errors.PeerError` at once (rank 0 closes every socket when it fails); a
peer that stops answering gives a ``PeerError`` after the group's collective timeout. A channel
that cannot be set up leaves every rank on gloo, agreed by all. Forked children (DataLoader
workers) close their copies of the sockets, so a parent's death is still seen by its peers.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import sys
import weakref
from collections.abc import Sequence

import numpy as np

from ..errors import PeerError
from .collective import Exchanger, group_timeout, peer_error, peer_errors

__all__ = ["HostChannel", "open_host_channel"]

log = logging.getLogger(__name__)

_I64 = np.int64
_LIVE: weakref.WeakSet[HostChannel] = weakref.WeakSet()


class HostChannel:
    """Element-wise maximum over the ranks of one host (see the module docstring)."""

    def __init__(self, rank: int, socks: dict[int, socket.socket]) -> None:
        self.rank = rank
        self._socks = socks  # rank 0: peer -> socket; others: {0: socket}
        self.calls = 0
        _LIVE.add(self)

    def agree_max(self, values: Sequence[int]) -> list[int]:
        """The element-wise maximum of ``values`` over the host's ranks (same length on each)."""
        mine = np.asarray([len(values), *(int(v) for v in values)], _I64)
        try:
            if self.rank != 0:
                s = self._socks[0]
                s.sendall(mine.tobytes())
                got = _recv_words(s, 0, mine.size)
            else:
                got = mine.copy()
                for p, s in self._socks.items():
                    np.maximum(got, _recv_words(s, p, mine.size), out=got)
                out = got.tobytes()
                for s in self._socks.values():
                    s.sendall(out)
        except PeerError:
            self.close()
            raise
        except OSError as e:  # reset, broken pipe, timeout
            self.close()
            raise peer_error(e, "the host agreement") from e
        self.calls += 1
        return [int(v) for v in got[1:]]

    def close(self) -> None:
        """Close this rank's sockets (peers see the connection close; in a forked child, only
        the child's copies close: no shutdown, so the parent's connections stay up)."""
        for s in self._socks.values():
            try:
                s.close()
            except OSError:
                pass
        self._socks = {}


def _recv_words(s: socket.socket, peer: int, n: int) -> np.ndarray:
    """Exactly ``n`` int64 words from ``peer``; the first is the length of its values."""
    buf = np.empty(n, _I64)
    view = memoryview(buf).cast("B")
    got = 0
    while got < view.nbytes:
        k = s.recv_into(view[got:])
        if k == 0:
            raise PeerError(f"the host agreement did not complete: rank {peer} closed its "
                            "connection", "another rank stopped or died; this rank stops too",
                            "find the first error in the other ranks' logs, then restart "
                            "the job")
        got += k
    if int(buf[0]) != n - 1:
        raise PeerError(f"the host agreement did not complete: rank {peer} agreed on "
                        f"{int(buf[0])} values, this rank on {n - 1}",
                        "the ranks are in different steps of the job; this rank stops",
                        "report this as a bug, with the ranks' logs")
    return buf


def _after_fork_in_child() -> None:
    for ch in list(_LIVE):
        ch.close()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _address(token: int) -> bytes:
    return b"\0mnmg-sampler-agree-%016x" % token  # Linux abstract namespace: no file


def open_host_channel(ex: Exchanger) -> HostChannel | None:
    """Collective (three agreements over ``ex``): a channel between every rank of ``ex``'s
    group, which must all run on one host, or ``None`` on every rank when one cannot be set up.
    """
    W, rank = ex.world_size, ex.rank
    if W == 1:
        return None
    timeout = group_timeout(ex.group)
    listener = None
    token = 0
    if rank == 0 and sys.platform.startswith("linux"):
        try:
            token = secrets.randbits(62) | 1
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(_address(token))
            listener.listen(W)
        except OSError as e:
            log.warning("host agreement: no Unix socket (%s); rounds agree over gloo", e)
            token = 0
    with peer_errors("setting up the host agreement"):
        token = ex.agree_max([token])[0]
    if token == 0:
        return None
    socks: dict[int, socket.socket] = {}
    failed = 0
    if rank != 0:
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            socks[0] = s
            s.settimeout(timeout)
            s.connect(_address(token))  # queued in the listener's backlog until accepted
            s.sendall(np.asarray([2, token, rank], _I64).tobytes())  # framed like a value
        except OSError as e:
            log.warning("host agreement: rank %d cannot connect (%s); rounds agree over gloo",
                        rank, e)
            failed = 1
    with peer_errors("setting up the host agreement"):
        failed = ex.agree_max([failed])[0]
    if rank == 0 and not failed:
        try:
            listener.settimeout(timeout)
            while len(socks) < W - 1:
                s, _ = listener.accept()
                s.settimeout(timeout)
                _, their_token, p = (int(v) for v in _recv_words(s, -1, 3))
                if their_token != token or not 0 < p < W or p in socks:
                    s.close()  # not one of this job's ranks
                    continue
                socks[p] = s
        except (OSError, PeerError) as e:
            log.warning("host agreement: rank 0 cannot accept its peers (%s); rounds agree "
                        "over gloo", e)
            failed = 1
    if listener is not None:
        listener.close()
    with peer_errors("setting up the host agreement"):
        failed = ex.agree_max([failed])[0]
    channel = HostChannel(rank, socks)
    if failed:
        channel.close()
        return None
    return channel
