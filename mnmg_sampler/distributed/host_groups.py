"""Host groups: the ranks of one host share its parts; only other hosts' nodes touch the wire.

Ranks are grouped by host (:func:`~.shared_topology.host_id`; ``MNMG_HOST_ID`` forces a host per
rank, so several torchrun nodes on one machine act as separate hosts). Each rank maps its host's
parts and what its host's budget holds of the others (:mod:`.fit`). Frontier nodes of mapped
parts are sampled here in one compiled pass; the others go to another host's ranks only. Other
hosts' feature rows are fetched once into a per-host row cache (:func:`share_slices`). One host is
the whole shared topology; one rank per host at budget 0 is the wire path: the same round either
way. See docs/loader.md#host-groups-ranks-on-several-hosts.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from collections.abc import Callable
from pathlib import Path

import numba
import numpy as np

from ..sampling.sampler import HopSegments
from .collective import Exchanger, agree, peer_errors
from .shared_topology import SharedTopology

__all__ = ["HostGroup", "map_array", "share_slices", "sweep_stale"]

_I64 = np.int64


class HostGroup:
    """This rank's view of its host's parts and of what the host holds of other hosts (every
    part's CSR when the host's budget holds it, :mod:`.fit`).

    Attributes:
        shared: the mapped parts.
        ranks: the host's ranks.
        last: the last hop's ``(hit mask, the hits' new ids)`` (``None``: no hit).
    """

    def __init__(self, shared: SharedTopology, ranks: tuple[int, ...]) -> None:
        self.shared = shared
        self.ranks = tuple(ranks)
        self.inner = np.ascontiguousarray(shared.bounds[1:-1])
        W = shared.bounds.size - 1
        self.mask = np.zeros(W, bool)  # parts whose nodes are sampled here
        self.mask[list(shared.ranks)] = True
        self.row_mask = np.zeros(W, bool)  # parts whose rows are read here
        self.row_mask[list(shared.row_ranks)] = True
        self.last: tuple[np.ndarray, np.ndarray] | None = None

    def on_host(self, ids: np.ndarray) -> np.ndarray:
        """bool per new id: are its rows read in place here (a part mapped with its rows)."""
        return self.row_mask[np.searchsorted(self.inner, ids, side="right")]

    def stats(self) -> dict:
        return {**self.shared.stats(), "host_ranks": list(self.ranks)}

    def frontier_orig(self, miss_orig: np.ndarray) -> np.ndarray:
        """Original ids of the last hop's whole frontier from those of the nodes that went
        over the wire (in frontier order among themselves) and the host's own."""
        hit, nodes = self.last
        out = np.empty(hit.size, _I64)
        out[hit] = self.shared.to_orig(nodes)
        out[~hit] = miss_orig
        return out

    def hop(self, h: HopSegments, wire_hop: Callable, seed: int):
        """One hop: ``wire_hop`` (collective, always called once) samples the frontier nodes of
        other hosts, the mapped parts the host's own; results in frontier order."""
        hit, miss_n, miss_s, hit_n, hit_s = self._sides(h)
        if not hit_n.size:
            return wire_hop(h)
        miss = HopSegments(miss_n, miss_s, h.keys, h.fanouts, h.replace, h.hop, h.edge_ids)
        mine = HopSegments(hit_n, hit_s, h.keys, h.fanouts, h.replace, h.hop, h.edge_ids)
        c_miss, nb_miss, e_miss = wire_hop(miss)
        c_hit, nb_hit, e_hit = self.shared.hop(mine, seed)
        self.last = (hit, mine.nodes)
        return interleave(hit, (c_miss, nb_miss, e_miss), (c_hit, nb_hit, e_hit),
                          bool(h.edge_ids))

    def _sides(self, h: HopSegments) -> tuple:
        """``(hit, the misses' nodes and counts, the hits' nodes and counts)`` of ``h``'s
        frontier (:func:`_split`), a hit being a node this host's mapped parts hold."""
        nodes = np.ascontiguousarray(h.nodes, _I64)
        owners = np.searchsorted(self.inner, nodes, side="right")
        self.last = None
        return _split(nodes, np.asarray(h.sizes, _I64), owners, self.mask)

    def typed_hop(self, h: HopSegments, wire_hop: Callable, kernel: Callable, relations: int):
        """:meth:`hop` of a typed part: the typed kernel's four arrays in frontier order
        (``kernel(nodes, keys, req, bounds)`` samples the host's nodes; ``relations``: the
        graph's, carried in each neighbor's word while the sides interleave)."""
        hit, miss_n, miss_s, hit_n, hit_s = self._sides(h)
        if not hit_n.size:
            return wire_hop(h)
        b = h.bounds
        miss = HopSegments(miss_n, miss_s, h.keys, h.fanouts, h.replace, h.hop, h.edge_ids,
                           None if b is None else b[~hit], h.last)
        c_m, nb_m, rel_m, e_m = wire_hop(miss)
        req = np.repeat(np.arange(hit_s.size, dtype=_I64), hit_s)
        c_h, nb_h, rel_h, e_h = kernel(hit_n, np.asarray(h.keys, _I64)[req], req,
                                       None if b is None else np.ascontiguousarray(b[hit]))
        self.last = (hit, hit_n)
        R = int(relations)
        c, word, e = interleave(hit, (c_m, nb_m * R + rel_m, e_m), (c_h, nb_h * R + rel_h, e_h),
                                True)
        nb, rel = np.divmod(word, R)
        return c, nb, rel, e


@numba.njit(cache=True, nogil=True)
def _split(nodes, sizes, owners, on_host):
    """One pass over a hop's frontier: ``(hit, the misses' nodes and per-request counts, the
    hits' nodes and counts)``, a hit being a node whose owner is on this host, each side in
    frontier order (numpy's masks, repeat and two bincounts made eight passes)."""
    n = nodes.shape[0]
    hit = np.empty(n, np.bool_)
    n_hit = 0
    for i in range(np.uint64(n)):
        h = on_host[owners[i]]
        hit[i] = h
        n_hit += h
    miss_n = np.empty(n - n_hit, np.int64)
    hit_n = np.empty(n_hit, np.int64)
    miss_s = np.zeros(sizes.shape[0], np.int64)
    hit_s = np.zeros(sizes.shape[0], np.int64)
    a = b = i = 0
    for s in range(sizes.shape[0]):
        for _ in range(sizes[s]):
            if hit[i]:
                hit_n[b] = nodes[i]
                b += 1
                hit_s[s] += 1
            else:
                miss_n[a] = nodes[i]
                a += 1
                miss_s[s] += 1
            i += 1
    return hit, miss_n, miss_s, hit_n, hit_s


@numba.njit(cache=True, nogil=True, inline="always")
def _put_list(out_n, out_e, o, nb, e, p, c, with_e):
    """Copy one node's ``c`` neighbors (and edge ids) from position ``p`` to ``o``."""
    for j in range(c):
        out_n[o + j] = nb[p + j]
    if with_e:
        for j in range(c):
            out_e[o + j] = e[p + j]


@numba.njit(cache=True, nogil=True)
def _interleave(hit, c_miss, nb_miss, e_miss, c_hit, nb_hit, e_hit, with_e):
    """Counts, neighbors and edge ids in frontier order from the misses' and the hits' results
    (each in frontier order among themselves)."""
    n = hit.shape[0]
    total = nb_miss.shape[0] + nb_hit.shape[0]
    out_c = np.empty(n, np.int64)
    out_n = np.empty(total, np.int64)
    out_e = np.empty(total if with_e else 0, np.int64)
    a = b = pa = pb = o = 0
    for i in range(n):
        if hit[i]:
            c = c_hit[b]
            b += 1
            _put_list(out_n, out_e, o, nb_hit, e_hit, pb, c, with_e)
            pb += c
        else:
            c = c_miss[a]
            a += 1
            _put_list(out_n, out_e, o, nb_miss, e_miss, pa, c, with_e)
            pa += c
        out_c[i] = c
        o += c
    return out_c, out_n, out_e


def interleave(hit: np.ndarray, miss: tuple, hits: tuple, with_e: bool) -> tuple:
    """:func:`_interleave` of the misses' and the hits' ``(counts, neighbors, edge ids)``:
    ``(counts, neighbors, edge ids or None)`` in frontier order (edge ids missing on one side:
    zeros)."""
    empty = np.empty(0, _I64)

    def arrays(c, nb, e):
        nb = np.asarray(nb, _I64)
        if with_e and (e is None or len(e) != nb.size):
            e = np.zeros(nb.size, _I64)
        return (np.asarray(c, _I64), nb, np.asarray(e, _I64) if with_e else empty)

    c, nb, e = _interleave(hit, *arrays(*miss), *arrays(*hits), with_e)
    return c, nb, (e if with_e else None)


def _shm_dir() -> Path:
    """Where a host's shared cache files go: RAM-backed ``/dev/shm`` when it exists."""
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


_PREFIX = "mnmg-rowcache-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def sweep_stale(directory: Path) -> list[Path]:
    """Remove host cache files whose writer is no longer running (its pid is in the name: a
    rank killed between writing its slice and every rank mapping it); returns them. Files
    are per host, and so are pids, so any later job on the host removes them."""
    gone = []
    for path in directory.glob(f"{_PREFIX}*"):
        parts = path.name[len(_PREFIX):].split("-")
        try:
            pid = int(parts[2])
        except (IndexError, ValueError):
            continue
        if not _alive(pid):
            path.unlink(missing_ok=True)
            gone.append(path)
    return gone


def share_slices(ex: Exchanger, ranks: tuple[int, ...], ids: np.ndarray, rows: np.ndarray
                 ) -> list[tuple[np.ndarray, np.ndarray]]:
    """Collective over every rank of ``ex``: this rank's slice of the host cache (``ids``
    sorted, ``rows`` in their order) written once to a file, then every slice of the host's
    ``ranks`` memory-mapped (read-only; one copy in the page cache for the whole host).

    Returns ``(ids, rows)`` per slice of the host. The files are unlinked by their writer once
    every rank has mapped them, or as soon as a step fails (a killed writer's:
    :func:`sweep_stale`).
    """
    shm = _shm_dir()
    sweep_stale(shm)
    with peer_errors("agreeing on the host cache's file name"):
        token = ex.agree_max([secrets.randbits(62)])[0]
    base = f"{_PREFIX}{token:016x}"
    mine: list[Path] = []

    def write() -> None:
        for name, a in (("ids", np.ascontiguousarray(ids, _I64)),
                        ("rows", np.ascontiguousarray(rows))):
            path = shm / f"{base}-{ex.rank}-{os.getpid()}-{name}.npy"
            tmp = Path(f"{path}.tmp")
            mine.extend((tmp, path))
            with open(tmp, "wb") as f:
                np.save(f, a, allow_pickle=False)
            os.replace(tmp, path)

    def slice_of(r: int, name: str) -> np.ndarray:
        (path,) = shm.glob(f"{base}-{r}-*-{name}.npy")  # one writer per rank
        return map_array(path)

    try:
        agree(write, ex.group, "writing this rank's slice of the host cache")
        out = agree(lambda: [(slice_of(r, "ids"), slice_of(r, "rows")) for r in ranks],
                    ex.group, "mapping the host cache's slices")
        with peer_errors("waiting for every rank to map the host cache"):
            ex.agree_max([0])  # every rank has mapped its host's slices: the names can go
    finally:
        for path in mine:
            path.unlink(missing_ok=True)
    return out


def map_array(path: Path) -> np.ndarray:
    """One slice array, memory-mapped read-only (an empty one is read: nothing to map)."""
    a = np.load(path, mmap_mode="r", allow_pickle=False)
    return a if a.size else np.load(path, allow_pickle=False)
