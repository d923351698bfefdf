"""Distributed feature store: the feature rows and labels of a round's nodes, wherever they live.

With the shared topology (every rank on one host, :mod:`.shared_topology`), every part's rows,
labels and original ids are mapped on every rank and :meth:`DistFeatureStore.fetch` reads
them in place, this rank's part and the others' alike: no exchange, no copy of the rows (they
stay the page cache's), and no cache (``cache_rows`` is unused: there is nothing to cache).

Otherwise each rank holds the rows of its own nodes and :meth:`DistFeatureStore.fetch` is
collective, once per round for all merged requests:

1. rows this rank owns are read in place, never sent; with host groups (ranks on several
   hosts, :mod:`.host_groups`), so are the rows of every part of this rank's host (mapped);
2. the ids of other hosts' nodes of all requests are de-duplicated (one hash pass), so a row
   needed by several requests of the round, or several times by one, is fetched once;
3. rows held in the host cache (``cache_rows``) are read from it and never asked for;
4. the remaining ids go to their owners in one all-to-all (wire ids, int32 when they fit; each
   block says its own size and is bounded by the owner's part, so no size exchange comes first
   while those bounds keep the receive buffer small, else counts go first) and the rows come
   back in one more, whose sizes both sides know. Every row is copied once, from its source
   (table, cache, received buffer) to its place in the batch's features
   (:func:`~mnmg_sampler.ops.rows.scatter_rows`).

Labels travel in the same payload as features, their int64 bits reinterpreted as two float32
columns (exact, no rounding), and so does each row's original node id (unless the partitioning
kept ids, ``range``): the owner of a node returns its original id with its row, so the sampler
translates a minibatch's ``n_id`` back to original ids with no exchange of its own
(:meth:`DistFeatureStore.fetch_with_orig`).

The host cache is filled once, at construction (collective), with the nodes of other hosts
that rounds touch most (:mod:`.row_cache`): by their inclusion probability in a round of the
given fanouts and batch size (``cache_plan``, as SALIENT++ chooses), else by their degree into
the host. Its bytes are checked against the memory at hand before anything is allocated. Each
rank of the host fetches a disjoint share and every rank of the host maps all shares
(:func:`~.host_groups.share_slices`): one copy per host. With one rank per host it is that
rank's own cache.
"""

from __future__ import annotations

import copy
import logging
import mmap
import time
from collections.abc import Sequence

import numpy as np
import torch

from ..ops.dedup import unique_first
from ..ops.rows import scatter_rows
from .collective import Exchanger, agree
from .fit import Placement
from .host_groups import HostGroup, share_slices
from .id_maps import identity_ids
from .row_cache import CachePlan, choose_rows
from .shared_topology import SharedTopology

log = logging.getLogger(__name__)

PLACEMENTS = ("host", "pinned", "device")
# receive buffer of a fetch's id requests (every peer's block at its bound) up to which the ids
# go in one bounded all-to-all instead of a size exchange and then the ids
_BOUNDED_BYTES = 64 << 20


def _release(arr) -> None:
    """Drop the resident pages of a memory-mapped array from this process (they stay in the
    page cache), so a file copied into the table is not counted twice in the rank's RSS."""
    mm = getattr(arr, "_mmap", None)  # numpy.memmap's mapping
    if mm is not None and hasattr(mm, "madvise") and hasattr(mmap, "MADV_DONTNEED"):
        mm.madvise(mmap.MADV_DONTNEED)


class DistFeatureStore:
    """Feature rows and labels of one partition, fetched across ranks by new (relabelled) id.

    Args:
        part: this rank's partition (``x`` and/or ``y`` may be ``None``).
        exchanger: the sampler's exchanger (same process group).
        placement: ``host`` (memory-mapped / host memory), ``pinned`` (page-locked host memory,
            CUDA only) or ``device`` (on ``device``). Decided once, here, in the owning process.
        device: the device for ``placement='device'``.
        cache_rows: rows of other hosts the host keeps (0: no cache), shared by the host's
            ranks (each fetches its share; see :mod:`.host_groups`). Collective when > 0:
            every rank must pass the same value, as the fill fetches rows from their owners.
            Unused with ``shared``.
        shared: the sampler's :class:`~.shared_topology.SharedTopology` (``DistSampler.shared``):
            rows of every part are read in place from its mappings, with no collective. With
            placement ``pinned`` or ``device`` the rows read are copied to page-locked memory
            (this path never ran on a GPU).
        host: the sampler's :class:`~.host_groups.HostGroup` (``DistSampler.host``, ranks on
            several hosts): rows of the host's parts are read in place from its mappings, only
            other hosts' rows are fetched.
        cache_plan: the fanouts and batch size the loaders will ask for: the cache takes the
            rows of highest inclusion probability (``None``: by degree).
        fit: the hosts' placement (``DistSampler.placement``, :mod:`.fit`; the same on every
            rank): with ``cache_rows`` 0, each host's cache takes as many rows as the bytes its
            budget leaves hold (:meth:`cache_sizes`).
    """

    def __init__(self, part, exchanger: Exchanger, placement: str = "host",
                 device: torch.device | None = None, cache_rows: int = 0,
                 shared: SharedTopology | None = None, host: HostGroup | None = None,
                 cache_plan: CachePlan | None = None, fit: Placement | None = None
                 ) -> None:
        from ..errors import ConfigError

        if placement not in PLACEMENTS:
            raise ConfigError(f"features.placement: unknown placement {placement!r}",
                              "features cannot be placed", f"use one of {PLACEMENTS}")
        if int(cache_rows) < 0:
            raise ConfigError(f"features.cache_rows must be >= 0, got {cache_rows}",
                              "the cache size is a row count", "pass 0 (no cache) or more")
        self.ex = exchanger
        bounds = self._bounds = np.asarray(part.boundaries, np.int64)
        self._inner = np.ascontiguousarray(bounds[1:-1])
        self.lo = int(bounds[part.rank])
        n_local = int(part.indptr.shape[0] - 1)
        self.has_x, self.has_y = part.x is not None, part.y is not None
        F = int(part.x.shape[1]) if self.has_x else 0
        # original ids ride along unless the partitioning kept them (new == original)
        self.carries_orig = not identity_ids(part)
        C = F + 2 + (2 if self.carries_orig else 0)
        self.num_features = F
        self.placement = placement
        self.row_bytes = C * 4
        self.fetch_span: tuple[float, float] | None = None  # the last fetch's wall clock
        self.stats = {"rows": 0, "local_rows": 0, "remote_rows": 0, "mapped_rows": 0,
                      "distinct_remote_rows": 0, "cache_hits": 0, "rows_fetched": 0,
                      "duplicate_rows_fetched": 0, "fetches": 0, "fetch_cpu_s": 0.0,
                      "fetch_exchange_cpu_s": 0.0}
        # the host cache: (sorted ids, their rows) per slice (one per rank of the host)
        self._cache: list[tuple[np.ndarray, np.ndarray]] = []
        self.host = host
        self.cache_choice = "none"
        self._bounded = False
        self.shared = shared if shared is not None and shared.rows_everywhere else None
        if self.shared is not None:  # every part's rows are mapped here: no table, no cache
            self._host = self.table = None
            if int(cache_rows) > 0 and self.ex.rank == 0:
                log.info("features.cache_rows=%d unused: every part's feature rows are "
                         "mapped on this host (shared topology)", int(cache_rows))
            return
        # One row table (one copy of the mapped arrays): features, then the label's 8 bytes as
        # two float32 columns, then the original id's, so one exchange carries all, bit-exact.
        table = np.empty((n_local, C), np.float32)
        if self.has_x:
            table[:, :F] = part.x
        y = np.ascontiguousarray(part.y if self.has_y else np.zeros(n_local), dtype=np.int64)
        table[:, F:F + 2] = y.view(np.float32).reshape(n_local, 2)
        del y
        if self.carries_orig:
            orig = np.ascontiguousarray(part.orig_ids, dtype=np.int64)
            table[:, F + 2:] = orig.view(np.float32).reshape(n_local, 2)
        for mapped in (part.x, part.y):  # the table is the copy in use: unmap the file's pages
            _release(mapped)
        # host placement reads rows with numpy fancy indexing; the others keep only their copy
        self._host = table if placement == "host" else None
        table = torch.from_numpy(table)
        if placement == "pinned":
            table = table.pin_memory()
        elif placement == "device":
            table = table.to(device)
        self.table = table
        self._bounded = bounded_ids(self.ex, self._bounds)
        fill = int(cache_rows) > 0  # the same on every rank
        if fit is not None and not fill:  # each host's own size; any host's makes it collective
            sizes = self.cache_sizes(fit)
            cache_rows, fill = sizes[fit.host_of[self.ex.rank]], max(sizes) > 0
        if fill and self.enabled:
            self._fill_cache(part, int(cache_rows), cache_plan)

    def on_exchanger(self, ex: Exchanger) -> DistFeatureStore:
        """The same store (row table and host cache shared, no copy, no collective) fetching
        over another exchanger of the same ranks: a service's other round in flight. Its
        counters start at zero."""
        other = copy.copy(self)
        other.ex = ex
        other.stats = dict.fromkeys(self.stats, 0)
        other.stats.update(fetch_cpu_s=0.0, fetch_exchange_cpu_s=0.0)
        return other

    def cache_sizes(self, fit: Placement) -> list[int]:
        """Rows each host's cache takes under ``fit``: what its budget leaves after the
        topology, in rows of this store, at most the other hosts' rows it does not map."""
        parts = np.diff(self._bounds)
        out = []
        for h in fit.hosts:
            held = np.zeros(parts.size, bool)
            held[list(h.ranks)] = True
            out.append(h.cache_rows(self.row_bytes, int(parts[~held].sum())))
        return out

    @property
    def enabled(self) -> bool:
        return self.has_x or self.has_y

    @property
    def cache_size(self) -> int:
        """Rows held in the host cache (every slice of the host)."""
        return int(sum(ids.size for ids, _ in self._cache))

    def _owner(self, ids: np.ndarray) -> np.ndarray:
        return np.searchsorted(self._inner, ids, side="right")

    def _near(self, ids: np.ndarray) -> np.ndarray:
        """bool per new id: owned by this host (this rank without a host group)."""
        return self.host.on_host(ids) if self.host is not None else \
            self._owner(ids) == self.ex.rank

    def _fill_cache(self, part, rows: int, plan: CachePlan | None) -> None:
        """Collective: the host caches the ``rows`` nodes of other hosts its rounds touch most
        (:func:`~.row_cache.choose_rows`: by inclusion probability with a ``plan``, else by
        degree). Rank ``j`` of a host of ``G`` ranks takes ``rows / G`` of them among the ids
        ``== j (mod G)``, so slices never overlap. The host's cache bytes are checked against
        the memory at hand on every rank before anything is allocated."""
        from ..system.host_limits import check_allocation

        ranks = self.host.ranks if self.host is not None else (self.ex.rank,)
        G, j = len(ranks), ranks.index(self.ex.rank)
        agree(lambda: check_allocation(
            f"a feature row cache of {rows:,} rows of {self.row_bytes} B (features.host_memory_mb)",
            rows * self.row_bytes, "lower features.host_memory_mb"), self.ex.group,
            "checking the feature cache's memory")
        share = rows // G + (1 if j < rows % G else 0)

        def far(ids: np.ndarray) -> np.ndarray:
            return ~self._near(ids) & (ids % G == j)

        ids, self.cache_choice = choose_rows(part, self.ex, far, share, plan)
        back, perm = self._exchange_rows(ids)
        got = np.empty_like(back)
        got[perm] = back
        del back
        self._cache = share_slices(self.ex, ranks, ids, got) if self.host is not None \
            else [(ids, got)]

    def _exchange_rows(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Collective: :func:`rows_from_owners` of this store's table rows."""
        def reply(local: np.ndarray):
            rows = torch.from_numpy(self._host[local]) if self._host is not None \
                else self.table[torch.from_numpy(local).to(self.table.device)]
            return self.ex.to_host(rows), None

        return rows_from_owners(self.ex, self._bounds, ids, reply, bounded=self._bounded)

    def fetch(self, n_ids: Sequence[np.ndarray]) -> list[tuple[torch.Tensor | None,
                                                              torch.Tensor | None]]:
        """Collective (unless ``shared``): ``(x, y)`` rows of each array of new ids, in order."""
        return [(x, y) for x, y, _ in self._fetch(n_ids)]

    def fetch_with_orig(self, n_ids: Sequence[np.ndarray]
                        ) -> list[tuple[torch.Tensor | None, torch.Tensor | None, np.ndarray]]:
        """Collective (unless ``shared``): ``(x, y, original ids)`` of each array of new ids, in
        order (needs :attr:`carries_orig`)."""
        if not self.carries_orig:
            raise ValueError("this store's rows carry no original ids (range partitioning)")
        return self._fetch(n_ids)

    def _fetch(self, n_ids: Sequence[np.ndarray]) -> list[tuple]:
        c0, x0, t0 = time.thread_time(), self.ex.cpu_exchange, time.perf_counter()
        try:
            return self._fetch_rows(n_ids)
        finally:  # this thread's CPU in fetches, and the part of it inside collectives
            self.stats["fetch_cpu_s"] += time.thread_time() - c0
            self.stats["fetch_exchange_cpu_s"] += self.ex.cpu_exchange - x0
            self.fetch_span = (t0, time.perf_counter())  # a step's wait for rows (service)

    def _fetch_rows(self, n_ids: Sequence[np.ndarray]) -> list[tuple]:
        if self.shared is not None:
            self.stats["fetches"] += 1
            return [self._read_mapped(np.asarray(a, np.int64)) for a in n_ids]
        sizes = [int(a.size) for a in n_ids]
        ids = np.concatenate(n_ids) if n_ids else np.empty(0, np.int64)
        ids = ids.astype(np.int64, copy=False)
        F = self.num_features
        # every row is written once, straight into its batch's features and extra columns;
        # one array per batch, not per round: a round's rows can exceed glibc's mmap
        # threshold (32 MiB), and a fresh mapping per round faults in every page again
        ends = np.cumsum(sizes, dtype=np.int64)
        starts = ends - np.asarray(sizes, np.int64)
        Xs = [np.empty((n, F), np.float32) for n in sizes]
        Ms = [np.empty((n, self.row_bytes // 4 - F), np.float32) for n in sizes]

        def put(pos, src, rows) -> None:
            """Rows ``src[rows]`` to round positions ``pos`` (ascending), batch by batch."""
            cut = np.searchsorted(pos, ends)
            a = 0
            for X, M, lo, z in zip(Xs, Ms, starts, cut, strict=True):
                if z > a:
                    scatter_rows(X, M, pos[a:z] - lo, src, rows[a:z])
                a = z

        owner = self._owner(ids)
        local = owner == self.ex.rank
        li = np.flatnonzero(local)
        if self._host is not None:
            put(li, self._host, ids[li] - self.lo)
        else:
            rows = self.ex.to_host(
                self.table[torch.from_numpy(ids[li] - self.lo).to(self.table.device)]).numpy()
            put(li, rows, np.arange(li.size))
        mapped = 0
        near = local
        if self.host is not None:  # the host's other parts: read in place, never on the wire
            hi = np.flatnonzero(~local & self.host.row_mask[owner])
            put(hi, self._host_rows(ids[hi]), np.arange(hi.size))
            mapped = int(hi.size)
            near = local.copy()
            near[hi] = True
        ri = np.flatnonzero(~near)
        uniq, inv = unique_first(ids[ri])
        hit = np.zeros(uniq.size, bool)
        for cids, crows in self._cache:
            if not (cids.size and uniq.size):
                continue
            pos = np.minimum(np.searchsorted(cids, uniq), cids.size - 1)
            h = (cids[pos] == uniq) & ~hit
            sel = np.flatnonzero(h[inv])
            put(ri[sel], crows, pos[inv[sel]])
            hit |= h
        miss = np.flatnonzero(~hit)
        fetch = uniq[miss]  # rows of cached nodes are never asked for
        back, perm = self._exchange_rows(fetch)
        where = np.empty(uniq.size, np.int64)  # distinct remote id -> its received row
        where[miss[perm]] = np.arange(miss.size)
        sel = np.flatnonzero(~hit[inv])
        put(ri[sel], back, where[inv[sel]])
        st = self.stats
        st["mapped_rows"] += mapped
        st["fetches"] += 1
        st["rows"] += int(ids.size)
        st["local_rows"] += int(li.size)
        st["remote_rows"] += int(ri.size) + mapped
        st["distinct_remote_rows"] += int(uniq.size)
        st["cache_hits"] += int(hit.sum())
        st["rows_fetched"] += int(miss.size)
        # measured, not assumed: rows that crossed the wire twice in this round
        st["duplicate_rows_fetched"] += int(fetch.size - unique_first(fetch)[0].size)
        res = []
        for X, M in zip(Xs, Ms, strict=True):
            # numpy views the label columns as int64 for any row count (torch refuses the view
            # of an empty slice whose strides are 0)
            x = torch.from_numpy(X) if self.has_x else None
            y = torch.from_numpy(np.ascontiguousarray(M[:, :2]).view(np.int64)
                                 .reshape(-1)) if self.has_y else None
            orig = np.ascontiguousarray(M[:, 2:]).view(np.int64).reshape(-1) \
                if self.carries_orig else None
            res.append((x, y, orig))
        return res

    def _host_rows(self, ids: np.ndarray) -> np.ndarray:
        """Table rows (features, label bits, original id bits) of ids of the host's other
        parts, read in place from their mapped files (no collective)."""
        sh = self.host.shared
        F = self.num_features
        out = np.empty((ids.size, self.row_bytes // 4), np.float32)
        if self.has_x:
            out[:, :F] = sh.rows(ids, sh.x)
        y = sh.rows(ids, sh.y).astype(np.int64) if self.has_y else np.zeros(ids.size, np.int64)
        out[:, F:F + 2] = y.view(np.float32).reshape(ids.size, 2)
        if self.carries_orig:
            out[:, F + 2:] = sh.to_orig(ids).view(np.float32).reshape(ids.size, 2)
        return out

    def _read_mapped(self, ids: np.ndarray) -> tuple:
        """``(x, y, original ids)`` of ``ids`` read in place from every part's mapped files
        (no collective); the same values and dtypes as the table's rows."""
        sh = self.shared
        x = y = orig = None
        if self.has_x:
            x = sh.rows(ids, sh.x)
            if x.dtype != np.float32:
                x = x.astype(np.float32)
            x = torch.from_numpy(x)
            if self.placement != "host":  # on CUDA: batches leave from page-locked memory
                x = x.pin_memory()
        if self.has_y:
            y = torch.from_numpy(sh.rows(ids, sh.y).astype(np.int64, copy=False))
        if self.carries_orig:
            orig = sh.to_orig(ids)
        mine = int(np.count_nonzero(self._owner(ids) == self.ex.rank))
        st = self.stats
        st["rows"] += int(ids.size)
        st["local_rows"] += mine
        st["remote_rows"] += int(ids.size) - mine
        st["mapped_rows"] += int(ids.size) - mine
        return x, y, orig

    def cache_stats(self) -> dict:
        """Cache size, hit rate and the feature bytes the cache saved so far."""
        st = self.stats
        return _cache_report(self.cache_size, self.cache_size * self.row_bytes,
                             st["cache_hits"], st["distinct_remote_rows"],
                             st["cache_hits"] * self.row_bytes)


class TypeRows:
    """``x`` / ``y`` of every node type of a typed part's batches (the typed sampler's
    fetch), each distinct node once per round: own and cached rows, and those of the parts
    mapped here (``mapped``, a :class:`~.shared_topology.SharedTopology`: every part's on one
    host, the host's with host groups, every part's when a host's budget holds them,
    :mod:`.fit`) read here, the others from their owners in one exchange each way for every
    type (each type's row width known on both sides: no size exchange for the reply). When
    every rank reads every row in place, a fetch is no collective at all.

    The row cache (ranks on several hosts whose rows are not all mapped) keeps, once, the
    rows of the other hosts' nodes this part's edges point to most
    (:func:`~.row_cache.choose_rows` by degree), up to the rank's share of what its host's
    budget leaves (``features.host_memory_mb``, :class:`~.fit.HostPlacement`).

    Attributes:
        types: node types with rows, the same on every rank (from the manifest).
        stats: ``remote_rows``, ``cache_hits``, ``rows_fetched``, ``cache_bytes_saved`` so far.
    """

    def __init__(self, part, ex: Exchanger, mapped: SharedTopology | None,
                 placement: Placement) -> None:
        self.part, self.tp, self.ex, self.mapped = part, part.typed, ex, mapped
        self.local = mapped is not None and mapped.rows_everywhere  # the same on every rank
        self._held = np.zeros(ex.world_size, bool)  # parts whose rows are read here
        self._held[[ex.rank, *(() if mapped is None else mapped.row_ranks)]] = True
        bounds = self._bounds = np.asarray(part.boundaries, np.int64)
        self._inner = np.ascontiguousarray(bounds[1:-1])
        self.lo = int(bounds[part.rank])
        typed = part.manifest.get("typed", {}) if part.manifest else {}
        self.types = [t for t in self.tp.node_types
                      if t in (typed.get("x") or {}) or t in (typed.get("y") or {})]
        # rows of other ranks' nodes kept here: per data type, (sorted new ids, row bytes)
        self._cache: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.stats = {"remote_rows": 0, "cache_hits": 0, "rows_fetched": 0,
                      "cache_bytes_saved": 0}
        far = getattr(ex, "far", None)  # per rank: on another host
        if self.types and not placement.rows_local and far is not None and bool(far.any()):
            mine = placement.of(ex.rank)  # its budget's rest, shared by the host's ranks
            self._fill_cache(0 if mine.rows else
                             mine.left // len(mine.ranks) // int(self._widths().max()))

    def on_exchanger(self, ex: Exchanger) -> TypeRows:
        """The same rows (cache and statistics shared) fetched over ``ex``: another round in
        flight."""
        other = copy.copy(self)
        other.ex = ex
        return other

    def fetch(self, new_ids: list[np.ndarray], nids: list[np.ndarray], out: list) -> None:
        """Collective: ``x`` / ``y`` of every batch's nodes (``new_ids``; ``nids``: the same in
        internal ids) of every type with node data into the batches ``out``."""
        off = self.tp.node_type_offset
        sel, uniq = {}, {}
        for name in self.types:
            t = self.tp.node_types.index(name)
            sel[name] = [np.flatnonzero((n >= off[t]) & (n < off[t + 1])) for n in nids]
            uniq[name] = np.unique(np.concatenate(
                [a[s] for a, s in zip(new_ids, sel[name], strict=True)]) if out else
                np.zeros(0, np.int64))
        rows = self._rows_of(uniq)
        for name, per in sel.items():
            for b, a, s in zip(out, new_ids, per, strict=True):  # n_id[name] order
                at = np.searchsorted(uniq[name], a[s])
                for key, r in rows[name].items():
                    getattr(b, key)[name] = torch.from_numpy(np.ascontiguousarray(r[at]))

    def _row_bytes(self, t: int, local: np.ndarray) -> np.ndarray:
        """``uint8 [n, width of type t]``: ``x`` then ``y`` of local rows of type ``t``."""
        name, tp = self.tp.node_types[t], self.tp
        row = local - tp.type_offset[t]
        cols = [np.ascontiguousarray(np.asarray(src[name])[row]).view(np.uint8).reshape(
            row.size, _width(src[name])) for src in (tp.x, tp.y) if name in src]
        return np.concatenate(cols, axis=1) if cols else np.zeros((row.size, 0), np.uint8)

    def _from_bytes(self, name: str, raw: np.ndarray) -> dict[str, np.ndarray]:
        """``{"x": rows, "y": rows}`` of ``raw`` (:meth:`_row_bytes` of type ``name``)."""
        res, at = {}, 0
        for key, src in (("x", self.tp.x), ("y", self.tp.y)):
            if name in src:
                a, w = np.asarray(src[name]), _width(src[name])
                res[key] = np.ascontiguousarray(raw[:, at:at + w]).view(a.dtype).reshape(
                    raw.shape[0], *a.shape[1:])
                at += w
        return res

    def _fill_cache(self, rows: int) -> None:
        """Collective: fill the row cache with up to ``rows`` rows (see the class docstring),
        fetched once; rounds never ask for them again."""
        from ..system.host_limits import check_allocation
        from .collective import all_gather_1d

        tp, far_rank = self.tp, self.ex.far
        width = self._widths()
        # every part's type offsets (tiny): the type of any new id
        offs = np.stack([t.numpy() for t in all_gather_1d(torch.from_numpy(
            np.array(tp.type_offset, np.int64)), self.ex.group)])  # (a writable copy)
        bounds = np.asarray(self.part.boundaries, np.int64)

        def types_of(ids: np.ndarray) -> np.ndarray:
            owner = np.searchsorted(self._inner, ids, side="right")
            local = ids - bounds[owner]
            t = np.empty(ids.size, np.int64)
            for r in np.unique(owner):
                at = owner == r
                t[at] = np.searchsorted(offs[r], local[at], side="right") - 1
            return t

        def far(ids: np.ndarray) -> np.ndarray:
            return far_rank[np.searchsorted(self._inner, ids, side="right")] & (
                width[types_of(ids)] > 0)

        ids, _ = choose_rows(self.part, self.ex, far, max(rows, 0), None)
        agree(lambda: check_allocation(
            f"a feature row cache of {ids.size:,} rows of up to {int(width.max())} B "
            "(features.host_memory_mb)", ids.size * int(width.max()),
            "lower features.host_memory_mb"), self.ex.group,
            "checking the feature cache's memory")
        t = types_of(ids)
        uniq = {n: ids[t == tp.node_types.index(n)] for n in self.types}  # sorted
        raw, at = self._raw_rows(uniq, width), 0
        for name, u in uniq.items():
            self._cache[name] = (u, raw[at:at + u.size, :width[tp.node_types.index(name)]])
            at += u.size
        self.stats.update(remote_rows=0, cache_hits=0, rows_fetched=0, cache_bytes_saved=0)

    def cache_stats(self) -> dict:
        """Cache size, hit rate (of the distinct remote rows of the batches so far) and the
        bytes it saved."""
        st, held = self.stats, self._cache.values()
        return _cache_report(sum(ids.size for ids, _ in held), sum(r.nbytes for _, r in held),
                             st["cache_hits"], st["remote_rows"], st["cache_bytes_saved"])

    def _widths(self) -> np.ndarray:
        """Bytes of one ``x`` and ``y`` row, per node type (0: no node data)."""
        tp = self.tp
        return np.array([sum(_width(src[n]) for src in (tp.x, tp.y) if n in src)
                         for n in tp.node_types], np.int64)

    def _rows_of(self, uniq: dict[str, np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
        """Collective (unless the shared topology reads them in place): per data type, the
        rows of its sorted new ids ``uniq[name]`` (:meth:`_raw_rows`)."""
        tp = self.tp
        index = {name: tp.node_types.index(name) for name in uniq}
        if self.local:
            return {name: self.mapped.type_rows(name, index[name], ids)
                    for name, ids in uniq.items()}
        width = self._widths()
        raw, out, at = self._raw_rows(uniq, width), {}, 0
        for name, u in uniq.items():
            out[name] = self._from_bytes(name, raw[at:at + u.size, :width[index[name]]])
            at += u.size
        return out

    def _raw_rows(self, uniq: dict[str, np.ndarray], width: np.ndarray) -> np.ndarray:
        """Collective: the row bytes of the ids of ``uniq`` (concatenated in its order), own
        and cached ones read here; the others go to their owners in one exchange for all
        types and come back as bytes, each type's row ``width`` known on both sides, so the
        reply needs no size exchange of its own."""
        tp, W, me = self.tp, self.ex.world_size, self.ex.rank
        index = {name: tp.node_types.index(name) for name in uniq}
        ids = np.concatenate([*uniq.values(), np.zeros(0, np.int64)])
        types = np.repeat(np.array([index[n] for n in uniq], np.int64),
                          [a.size for a in uniq.values()])
        owner = np.searchsorted(self._inner, ids, side="right")
        raw = np.empty((ids.size, int(width.max(initial=0))), np.uint8)
        hit = self._held[owner]  # own rows, and the mapped parts' (read below)
        self.stats["remote_rows"] += int(ids.size - hit.sum())
        at = 0
        for name, u in uniq.items():  # cached rows of other ranks' nodes
            cids, craw = self._cache.get(name, (np.zeros(0, np.int64), None))
            if cids.size and u.size:
                pos = np.minimum(np.searchsorted(cids, u), cids.size - 1)
                got = np.flatnonzero((cids[pos] == u) & ~hit[at:at + u.size])
                raw[at + got, :craw.shape[1]] = craw[pos[got]]
                hit[at + got] = True
                self.stats["cache_hits"] += int(got.size)
                self.stats["cache_bytes_saved"] += int(got.size) * craw.shape[1]
            at += u.size
        remote = np.flatnonzero(~hit)
        self.stats["rows_fetched"] += int(remote.size)
        own = np.flatnonzero(owner == me)
        for t in np.unique(types[own]):
            at = own[types[own] == t]
            raw[at, :width[t]] = self._row_bytes(int(t), ids[at] - self.lo)
        held = np.flatnonzero((owner != me) & self._held[owner])
        for t in np.unique(types[held]):  # rows of other mapped parts, in place
            at = held[types[held] == t]
            got = self.mapped.type_rows(tp.node_types[t], int(t), ids[at], raw=True)
            raw[at, :width[t]] = np.concatenate(list(got.values()), axis=1)
        if W > 1:
            def reply(local: np.ndarray):
                rt = np.searchsorted(tp.type_offset, local, side="right") - 1  # their types
                w = width[rt]
                flat = np.empty(int(w.sum()), np.uint8)
                start = np.concatenate([[0], np.cumsum(w)[:-1]]).astype(np.int64)
                for t in np.unique(rt):
                    at = np.flatnonzero(rt == t)
                    flat[start[at, None] + np.arange(width[t])] = self._row_bytes(int(t),
                                                                                  local[at])
                return torch.from_numpy(flat), w

            back, perm = rows_from_owners(self.ex, self._bounds, ids[remote], reply,
                                          width[types[remote]])
            remote = remote[perm]
            mine_w = width[types[remote]]
            start = np.concatenate([[0], np.cumsum(mine_w)[:-1]]).astype(np.int64)
            for t in np.unique(types[remote]):
                at = np.flatnonzero(types[remote] == t)
                raw[remote[at], :width[t]] = back[start[at, None] + np.arange(width[t])]
        return raw


def _cache_report(rows: int, nbytes: int, hits: int, distinct: int, saved: int) -> dict:
    """A row cache's rows and bytes, its hit rate among the distinct remote rows asked for,
    and the row bytes its hits kept off the wire."""
    return {"cache_rows": int(rows), "cache_bytes": int(nbytes),
            "cache_hit_rate": hits / distinct if distinct else 0.0,
            "cache_bytes_saved": int(saved)}


def bounded_ids(ex: Exchanger, bounds: np.ndarray) -> bool:
    """Whether the ids of a fetch go in one bounded all-to-all (a block per owner saying its
    size, at most the owner's part: gloo takes the shorter message) instead of a size exchange
    first; only when every receive buffer of a fetch stays small."""
    largest = int(np.diff(bounds).max()) + 1  # the same decision on every rank
    return (ex.short_receives and ex.world_size > 1
            and largest * ex.world_size * _wire(bounds).itemsize <= _BOUNDED_BYTES)


def _wire(bounds: np.ndarray) -> np.dtype:  # int32 words where every new id fits
    return np.dtype(np.int32 if int(bounds[-1]) < 2**31 else np.int64)


def rows_from_owners(ex: Exchanger, bounds: np.ndarray, ids: np.ndarray, reply,
                     per_row: np.ndarray | None = None, bounded: bool = False
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Collective: the rows of remote new ids (none this rank's) as received, and ``perm``:
    received row ``k`` is that of ``ids[perm[k]]``. The ids go to their owners as wire words,
    in one bounded all-to-all when ``bounded`` (:func:`bounded_ids`), else counts then ids. An
    owner answers ``reply(local ids)``: ``(payload, None)`` (a payload row per id) or ``(flat
    payload, units per id)``, ``per_row`` the same units as the asker knows them, so the rows
    come back in one all-to-all whose sizes both sides know."""
    W, me = ex.world_size, ex.rank
    bounds = np.asarray(bounds, np.int64)
    wire = _wire(bounds)
    owner = np.searchsorted(bounds[1:-1], ids, side="right")
    perm = np.argsort(owner.astype(np.int16 if W < 2**15 else np.int64), kind="stable")
    send_counts = np.bincount(owner, minlength=W).astype(np.int64)
    wid = ids[perm].astype(wire)
    if bounded:
        parts = np.diff(bounds)
        sb = parts + 1
        sb[me] = 0
        rb = np.full(W, parts[me] + 1, np.int64)
        rb[me] = 0
        blocks = np.empty(wid.size + W - 1, wire)
        starts = np.concatenate(([0], np.cumsum(send_counts)))
        sizes, o = np.zeros(W, np.int64), 0
        for r in range(W):
            if r == me:
                continue
            c = int(send_counts[r])
            blocks[o] = c
            blocks[o + 1:o + 1 + c] = wid[starts[r]:starts[r] + c]
            sizes[r] = c + 1
            o += c + 1
        got = ex.bounded(torch.from_numpy(blocks), sizes.tolist(), sb.tolist(), rb.tolist(),
                         "features").numpy()
        offs = np.concatenate(([0], np.cumsum(rb)))
        recv_counts = np.array([int(got[offs[r]]) if r != me else 0 for r in range(W)],
                               np.int64)
        if (recv_counts < 0).any() or (recv_counts > np.maximum(rb - 1, 0)).any():
            raise RuntimeError(f"a feature request block says {recv_counts.tolist()} ids, "
                               f"above its bound {np.maximum(rb - 1, 0).tolist()}")
        recv = np.concatenate([got[offs[r] + 1:offs[r] + 1 + recv_counts[r]]
                               for r in range(W)]).astype(np.int64)
    else:
        t, rc = ex.exchange(torch.from_numpy(wid), torch.from_numpy(send_counts), "features")
        recv, recv_counts = t.numpy().astype(np.int64), rc.numpy()
    payload, units = reply(recv - bounds[me])
    give, take = recv_counts, send_counts
    if units is not None:  # flat payloads: sizes in units, known on both sides
        give = np.bincount(np.repeat(np.arange(W), recv_counts), units, W)
        take = np.bincount(owner, per_row, W)
    back = ex.payload(payload, give.astype(np.int64).tolist(), take.astype(np.int64).tolist(),
                      "features").numpy()
    return back, perm


def _width(a) -> int:
    """Bytes of one row of ``a``."""
    return a.dtype.itemsize * int(np.prod(a.shape[1:], dtype=np.int64))
