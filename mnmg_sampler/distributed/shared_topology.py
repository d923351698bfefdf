"""Shared topology: ranks on one host read each other's parts and sample every hop themselves.

The parts are memory-mapped files, so every process on a host that maps them shares one copy in
the page cache. With the shared topology each rank maps every other part's CSR, feature rows and
labels too: a hop is one compiled pass over all parts (:meth:`SharedTopology.hop`,
:meth:`SharedTopology.typed_hop`), ``n_id`` is read from the parts' sorted ``orig_ids`` and a
round's feature rows in place, so a round costs one collective, its agreement. The RNG is keyed
on original ids and parts keep canonical row order: results are bit-identical to the wire path.

It needs every rank of the group on one host (a hash of the host name and boot id), a partition
loaded from a directory and the CPU kernel; with ``auto``, a part that does not open on any rank
turns it off on every rank. Ranks on several hosts map what :func:`place` gives them. A rank's
resident set counts the other parts' pages it touches, shared, not copied.
See docs/loader.md#shared-topology.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
from collections.abc import Sequence
from pathlib import Path

import numba
import numpy as np

from ..errors import ConfigError, MnmgError
from ..graph.partition_io import load_partition
from ..ops.cpu import part_of, sample_neighbors_parts
from ..ops.typed import sample_typed_parts
from ..sampling.sampler import HopSegments
from ..system.host_limits import check_allocation
from .collective import Exchanger, agree, peer_errors
from .fit import Placement, decide, part_bytes

__all__ = ["HOST_ENV", "SharedTopology", "host_id", "host_layout", "place"]

log = logging.getLogger(__name__)

_I64 = np.int64
_EMPTY = np.empty(0, _I64)
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


HOST_ENV = "MNMG_HOST_ID"
"""Environment variable that forces this rank's host: ranks with the same value form one host
group, whatever machine they run on (several torchrun nodes on loopback act as hosts)."""


def host_id() -> int:
    """A 62-bit id of this host (its name and, on Linux, its boot id): equal on two ranks
    exactly when they can share memory-mapped files' pages; :data:`HOST_ENV`, when set, is
    hashed instead (a forced host)."""
    forced = os.environ.get(HOST_ENV, "").strip()
    if forced:
        text = f"forced|{forced}"
    else:
        try:
            boot = _BOOT_ID.read_text().strip()
        except OSError:
            boot = ""
        text = f"{socket.gethostname()}|{boot}"
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 2


def host_layout(keys: Sequence[int]) -> np.ndarray:
    """Host index of each rank (0, 1, ... in order of each host's first rank) from the ranks'
    host ids."""
    first: dict[int, int] = {}
    return np.asarray([first.setdefault(int(k), len(first)) for k in keys], _I64)


def why_not_shared(part, kernel: str) -> ConfigError | None:
    """Why this rank cannot map the other parts, as the error ``true`` raises (``None``: it
    can; ``auto`` logs the message and stays off)."""
    if kernel == "cuda":
        return ConfigError("the shared topology is not supported with kernel='cuda'",
                           "no rank builds its sampler",
                           "pass shared_topology=False, or use kernel='cpu'")
    if getattr(part, "path", None) is None:
        return ConfigError("the shared topology needs a partition loaded from a directory",
                           "the other ranks' parts cannot be opened",
                           "load the part with load_partition(DIR, rank), or pass "
                           "shared_topology=False")
    return None


def _check_local(part, enabled, kernel: str) -> None:
    """This rank's own reasons to refuse (no collective)."""
    if not (isinstance(enabled, (bool, np.bool_)) or (isinstance(enabled, str)
                                                      and enabled == "auto")):
        raise ConfigError(f"shared_topology must be true, false or 'auto', got "
                          f"{enabled!r}", "no rank builds its sampler",
                          "pass true, false or 'auto'")
    if isinstance(enabled, str) or not enabled:  # 'auto' never refuses
        return
    err = why_not_shared(part, kernel)
    if err is not None:
        raise err


def place(part, ex: Exchanger, enabled: bool | str, kernel: str = "cpu",
          host_memory: int = 0) -> tuple[SharedTopology | None, Placement]:
    """Collective: the parts mapped here (``None`` when no rank maps any other part) and the
    :class:`~.fit.Placement` every rank agreed on (one agreement).

    ``enabled``: ``True``, ``False`` or ``"auto"``, the same on every rank. A rank that cannot
    map (``kernel='cuda'``, no partition directory) or a part that does not open is an error
    on every rank with ``True``, turns it off on every rank with ``"auto"``; a bad value, or
    ranks that disagree, are a ``ConfigError`` either way. Ranks on several hosts map their
    host's parts and what ``host_memory`` bytes per host hold of the others (:mod:`.fit`);
    ``ex.far`` is set from the host layout whatever the outcome."""
    agree(lambda: _check_local(part, enabled, kernel), ex.group,
          "checking shared_topology")
    W = ex.world_size
    topo_b, row_b = part_bytes(part)
    if W == 1:
        ex.far = np.zeros(1, bool)
        return None, decide([0], [0], [topo_b], [row_b], True)
    auto = isinstance(enabled, str)
    code = 2 if auto else int(bool(enabled))  # every rank must pass the same setting
    can = why_not_shared(part, kernel) is None
    slots = [0] * (5 * W)
    me = ex.rank
    budget = max(0, int(host_memory))
    slots[me], slots[W + me] = host_id(), budget
    slots[2 * W + me], slots[3 * W + me] = topo_b, row_b
    # every part opens here (a shared directory, or a copy of every part on this node)
    slots[4 * W + me] = int(can and code != 0 and budget > 0 and _opens_all(part, W))
    with peer_errors("agreeing on shared_topology"):
        hi_code, neg_lo_code, cannot, *got = ex.agree_max([code, -code, int(not can), *slots])
    hosts = host_layout(got[:W])
    ex.far = hosts != hosts[me]
    if hi_code != -neg_lo_code:
        raise ConfigError("shared_topology differs between ranks",
                          "no rank builds its sampler",
                          "pass the same shared_topology on every rank")
    whole = int(hosts.max()) == 0
    ok = code != 0 and not cannot
    placement = decide(hosts, got[W:2 * W], got[2 * W:3 * W], got[3 * W:4 * W],
                       [ok and (whole or bool(v)) for v in got[4 * W:]])
    if code == 0:
        return None, placement
    if cannot:  # auto only: true has refused above
        why = why_not_shared(part, kernel)
        _log_off(ex, why.what if why is not None else "another rank cannot map parts")
        return None, placement
    if all(not h.topology and len(h.ranks) == 1 for h in placement.hosts):
        return None, placement  # one rank per host, nothing of others: every hop on the wire
    mine = placement.of(me)
    own = mine.ranks
    ranks = tuple(range(W)) if mine.topology else own
    rows = tuple(range(W)) if mine.rows else own
    try:
        mapped = agree(lambda: SharedTopology(part, me, W, ranks, rows), ex.group,
                       "opening the other ranks' parts for the shared topology")
        mapped.rows_everywhere = placement.rows_local
        return mapped, placement
    except (MnmgError, OSError) as e:  # raised on every rank alike
        if not auto:
            raise
        _log_off(ex, f"a part did not open ({e})")
        return None, decide(hosts, got[W:2 * W], got[2 * W:3 * W], got[3 * W:4 * W], False)


def _opens_all(part, world_size: int) -> bool:
    """Whether every part of ``part``'s directory opens here (memory-mapped, not read)."""
    try:
        for r in range(world_size):
            if r != part.rank:
                load_partition(part.path, r, world_size, verify="off")
    except (MnmgError, OSError):
        return False
    return True


def _log_off(ex: Exchanger, why: str) -> None:
    if ex.rank == 0:
        log.info("shared topology auto: off (%s); hops go over the wire", why)


def _readonly(a: np.ndarray, dtype=_I64) -> np.ndarray:
    v = np.ascontiguousarray(a, dtype).view()  # a mapped file is contiguous: no copy
    v.flags.writeable = False
    return v


@numba.njit(cache=True, nogil=True)
def _gather(ids, bounds, arrays, out):
    """``out[i] = arrays[r][v - bounds[r]]`` for each id ``v = ids[i]`` of part ``r``: one
    pass over the mapped 1-d arrays of every part."""
    last = len(arrays) - 1
    for i in range(ids.shape[0]):
        r = part_of(ids[i], bounds, last)
        out[i] = arrays[r][ids[i] - bounds[r]]
    return out


@numba.njit(cache=True, nogil=True)
def _gather_rows(ids, bounds, arrays, out):
    """:func:`_gather` for 2-d arrays, row by row (an explicit loop: twice numpy's fancy
    indexing on this machine)."""
    last = len(arrays) - 1
    for i in range(ids.shape[0]):
        r = part_of(ids[i], bounds, last)
        src = arrays[r]
        row = ids[i] - bounds[r]
        for j in range(out.shape[1]):
            out[i, j] = src[row, j]
    return out


def _per_type(mapped: dict, own, attr: str, name: str, world_size: int) -> tuple | None:
    """Every part's ``layout.<attr>[name]`` as read-only ``uint8 [rows, row bytes]`` views (one
    numba type whatever the dtype, e.g. float16; parts not in ``mapped``: empty stand-ins
    shaped like ``own``'s), then the dtype and row shape; ``None`` when no part holds it.
    Parts that disagree in presence, dtype or row shape are an error."""
    mine = getattr(own.layout, attr).get(name)
    empty = None if mine is None else np.empty((0, *mine.shape[1:]), mine.dtype)
    arrays = [getattr(mapped[r].layout, attr).get(name) if r in mapped else empty
              for r in range(world_size)]
    if all(a is None for a in arrays):
        return None
    first = next(a for a in arrays if a is not None)
    if any(a is None or a.dtype != first.dtype or a.shape[1:] != first.shape[1:]
           for a in arrays):
        raise ConfigError(f"the parts of the partition do not all hold {attr}.{name} of one "
                          "dtype and width", f"the {attr}.{name} of other parts cannot be read "
                          "in place", "partition the graph again (every part is written alike)")
    width = first.dtype.itemsize * int(np.prod(first.shape[1:], dtype=np.int64))
    return tuple(_readonly(a, a.dtype).view(np.uint8).reshape(a.shape[0], width)
                 for a in arrays), first.dtype, first.shape[1:]


class SharedTopology:
    """Every part's CSR on this rank, memory-mapped (see the module docstring).

    Attributes:
        type_x, type_y: per node type name (a homogeneous part's one type), ``(one read-only
            byte view per part, dtype, row shape)`` (types without them are absent).
        node_time: typed parts with node time: int64 node time of every node by new id.
        peer_nodes, peer_edges: frontier nodes of other ranks sampled here, and their edges.
    """

    def __init__(self, part, rank: int, world_size: int,
                 ranks: Sequence[int] | None = None,
                 row_ranks: Sequence[int] | None = None) -> None:
        self.rank = rank
        self.bounds = np.asarray(part.boundaries, _I64)
        # the ranks whose parts' CSR is mapped here (all, or this rank's host group), and
        # those whose feature rows are (``row_ranks``, some of them; default: the same); the
        # others get empty stand-ins, never indexed: their nodes and rows go over the wire
        self.ranks = tuple(range(world_size)) if ranks is None else tuple(int(r) for r in ranks)
        self.row_ranks = self.ranks if row_ranks is None else tuple(int(r) for r in row_ranks)
        self.whole = len(self.ranks) == world_size
        self.rows_whole = len(self.row_ranks) == world_size
        # every rank maps every part's rows (set by place() across hosts): a fetch then needs
        # no collective at all
        self.rows_everywhere = self.rows_whole
        mapped = {r: part if r == rank else load_partition(part.path, r, world_size,
                                                           verify="off") for r in self.ranks}
        self.weighted = getattr(part, "weights", None) is not None
        if any((getattr(p, "weights", None) is not None) != self.weighted
               for p in mapped.values()):
            raise ConfigError("the parts of the partition are not all weighted (or unweighted)",
                              "the shared topology cannot sample them alike",
                              "partition again with --weights for every part")

        def views(name: str, dtype=_I64) -> tuple:  # one numba type for every part (read-only)
            stand_in = np.zeros(1 if name == "indptr" else 0, dtype)  # a part not mapped here
            return tuple(_readonly(stand_in if getattr(mapped.get(r), name, None) is None
                                   else getattr(mapped[r], name), dtype)
                         for r in range(world_size))

        self._csrs = tuple(views(n) for n in ("indptr", "indices", "edge_ids"))
        self._origs, self._weights = views("orig_ids"), views("weights", np.float32)
        self.node_time = None
        self._map_types(part, mapped, world_size)
        self.peer_nodes = 0
        self.peer_edges = 0

    def _map_types(self, part, mapped: dict, world_size: int) -> None:
        """The mapped parts' type tables, times and per-type rows (stand-ins for the others,
        never indexed); the node time by new id only when every part is mapped (host groups:
        the sampler sets the one it gathered)."""
        if any((p.typed is None) != (part.typed is None) for p in mapped.values()):
            raise ConfigError("the partition mixes typed and homogeneous parts",
                              "the shared topology cannot sample them alike",
                              "partition the graph again")
        tp = part.layout
        held = {r: p for r, p in mapped.items() if r in self.row_ranks}
        self.node_types = tp.node_types
        self.rel_offset = np.ascontiguousarray(tp.rel_offset, _I64)  # small tables: copies
        self.rel_weighted = np.ascontiguousarray(tp.weighted, np.uint8)

        def table(name: str) -> np.ndarray:  # per part; a stand-in starts every type at 0
            own = getattr(tp, name)
            return np.ascontiguousarray(np.stack([getattr(mapped[r].layout, name) if r in mapped
                                                  else np.zeros_like(own)
                                                  for r in range(world_size)]), _I64)

        self._type_offs, self._seg_bases = table("type_offset"), table("seg_base")
        self.type_x = {t: v for t in tp.node_types
                       if (v := _per_type(held, part, "x", t, world_size))}
        self.type_y = {t: v for t in tp.node_types
                       if (v := _per_type(held, part, "y", t, world_size))}
        self._edge_times = None
        if tp.edge_time is not None:  # every part of a timed graph has it (the manifest's)
            self._edge_times = tuple(_readonly(mapped[r].typed.edge_time if r in mapped
                                               else _EMPTY) for r in range(world_size))
        if tp.node_time is not None and self.whole:
            n = int(self.bounds[-1])
            check_allocation(f"the node time of all {n:,} nodes", 8 * n,
                             "use a machine with more memory, or edge time instead of node "
                             "time")
            self.node_time = _readonly(np.concatenate([mapped[r].typed.node_time
                                                       for r in range(world_size)]))

    def stats(self) -> dict:
        return {"enabled": True, "parts": len(self.ranks), "row_parts": len(self.row_ranks),
                "peer_nodes": self.peer_nodes, "peer_edges": self.peer_edges}

    # -- ids -------------------------------------------------------------------------------
    def to_orig(self, new_ids: np.ndarray) -> np.ndarray:
        """Original ids of new ids, read from their parts (no collective)."""
        ids = np.ascontiguousarray(new_ids, _I64)
        return _gather(ids, self.bounds, self._origs, np.empty(ids.shape[0], _I64))

    def to_new(self, orig_ids: np.ndarray) -> np.ndarray:
        """New ids of original ids in ``[0, num_nodes)``: each part's ``orig_ids`` is
        ascending, so a binary search per part (no collective)."""
        orig_ids = np.asarray(orig_ids, _I64)
        out = np.full(orig_ids.size, -1, _I64)
        for r, orig in enumerate(self._origs):
            if orig.size == 0:
                continue
            pos = np.minimum(np.searchsorted(orig, orig_ids), orig.size - 1)
            hit = orig[pos] == orig_ids
            out[hit] = self.bounds[r] + pos[hit]
        if out.size and int(out.min()) < 0:
            raise RuntimeError("an original id is in no part of the shared topology")
        return out

    # -- one hop ---------------------------------------------------------------------------
    def hop(self, h: HopSegments, seed: int):
        """Sample ``h`` here, results in frontier order, in one compiled pass over every part:
        :func:`~mnmg_sampler.ops.cpu.sample_neighbors_parts`, or weighted, the typed kernel's
        (:meth:`typed_hop`: one relation, the same draws)."""
        keys, fans, reps = h.per_node()
        nodes = np.ascontiguousarray(h.nodes, _I64)
        with_e = bool(h.edge_ids)
        if self.weighted:
            req = np.repeat(np.arange(h.sizes.size, dtype=_I64), h.sizes)
            c, nb, _, e = self.typed_hop(nodes, keys, req, np.asarray(h.fanouts, _I64).reshape(
                -1, 1), np.asarray(h.replace, np.uint8), seed, h.hop)
            return c, nb, (e if with_e else None)
        indptrs, indices, eids = self._csrs
        c, nb, e, by_part = sample_neighbors_parts(
            indptrs, indices, eids, self._origs, self.bounds, nodes, keys, seed, h.hop, fans,
            reps, with_eids=with_e)
        mine_nodes, mine_edges = (int(v) for v in by_part[self.rank])
        self.peer_nodes += int(nodes.size) - mine_nodes
        self.peer_edges += int(nb.size) - mine_edges
        return c, nb, (e if with_e else None)

    def typed_hop(self, nodes, keys, req, fan, rep, seed: int, hop: int, bounds=None,
                  last=None):
        """Typed parts: the typed kernel's four arrays for frontier ``nodes`` (new ids), in
        frontier order: one call over every part (``bounds``, ``last``: each node's time bound
        and each request's strategy, as :func:`~mnmg_sampler.ops.typed.sample_typed_neighbors`)."""
        nodes = np.ascontiguousarray(nodes, _I64)
        indptrs, indices, eids = self._csrs
        out = sample_typed_parts(self.bounds, self._type_offs, self._seg_bases, self.rel_offset,
                                 self.rel_weighted, indptrs, indices, eids, self._origs,
                                 self._weights, nodes, keys, req, fan, rep, seed, hop,
                                 time_bounds=bounds, last=last, edge_times=self._edge_times,
                                 node_time=self.node_time)
        lo, hi = self.bounds[self.rank], self.bounds[self.rank + 1]
        peer = (nodes < lo) | (nodes >= hi)
        self.peer_nodes += int(peer.sum())
        self.peer_edges += int(out[0][peer].sum())
        return out

    def type_rows(self, name: str, t: int, new_ids: np.ndarray, raw: bool = False
                  ) -> dict[str, np.ndarray]:
        """``x`` / ``y`` rows of new ids of type ``name`` (index ``t``), read in
        place from the mapped parts' files, in ``new_ids`` order (no collective; ``raw``: as
        ``uint8 [n, row bytes]``)."""
        starts = np.append(self.bounds[:-1] + self._type_offs[:, t], self.bounds[-1])
        ids = np.ascontiguousarray(new_ids, _I64)
        out = {}
        for key, src in (("x", self.type_x), ("y", self.type_y)):
            if name in src:
                arrays, dtype, shape = src[name]
                b = _gather_rows(ids, starts, arrays,
                                 np.empty((ids.shape[0], arrays[0].shape[1]), np.uint8))
                out[key] = b if raw else b.view(dtype).reshape(ids.shape[0], *shape)
        return out
