"""Distributed feature store: the feature rows and labels of a round's nodes, of every node
type (a homogeneous part is one type), wherever they live.

When every part's rows are mapped on every rank (:mod:`.shared_topology`, :mod:`.fit`), a
fetch reads them in place: no exchange, no copy, no cache. Otherwise a fetch is collective,
once per round for all merged requests and every node type: own, mapped and host-cached rows
are read in place, the other distinct ids go to their owners in one all-to-all and the rows
come back in one more, whose sizes both sides know. Every row is copied once, from its source
to its place in the batch. Labels (and a relabelled homogeneous part's original ids, so the
sampler translates ``n_id`` with no exchange of its own) travel in the row as raw words.
"""

from __future__ import annotations

import copy
import logging
import mmap
import time
from collections.abc import Sequence

import numpy as np
import torch

from ..ops.dedup import find_ids, id_index, unique_first
from ..ops.rows import scatter_rows
from .collective import Exchanger, agree, peer_errors
from .fit import Placement
from .host_groups import HostGroup, share_slices
from .id_maps import counted_keys, identity_ids, wire_dtype, with_counts
from .placement_files import HostFiles
from .row_cache import CachePlan, choose_rows
from .shared_topology import SharedTopology

log = logging.getLogger(__name__)

PLACEMENTS = ("host", "pinned", "device")
# receive buffer of a fetch's id requests (every peer's block at its bound) up to which the ids
# go in one bounded all-to-all instead of a size exchange and then the ids
_BOUNDED_BYTES = 64 << 20


class DistFeatureStore:
    """Feature rows and labels of every node type of one partition, fetched across ranks by
    new (relabelled) id. A homogeneous part keeps the ``MiniBatch``'s dtypes (``float32``
    features, ``int64`` labels); a typed part keeps its files' dtypes.

    Args:
        part: this rank's partition (typed or not; node data may be absent).
        exchanger: the sampler's exchanger (same process group).
        placement: ``host`` (memory-mapped / host memory), ``pinned`` (page-locked host memory,
            CUDA only) or ``device`` (on ``device``). Decided once, here, in the owning process.
        device: the device for ``placement='device'``.
        cache_rows: rows of other hosts the host keeps (0: no cache), shared by the host's
            ranks. Collective when > 0: every rank must pass the same value. Unused when every
            part's rows are mapped here.
        shared, host: the sampler's ``DistSampler.shared`` or ``DistSampler.host``: rows of
            the parts they map are read in place; with every part's rows mapped on every rank,
            a fetch is no collective.
        cache_plan: the fanouts and batch size the loaders will ask for: the cache takes the
            rows whose cache saves most fetches (:mod:`.row_cache`; ``None``, or several
            relations: by degree).
        fit: the hosts' placement (``DistSampler.placement``, :mod:`.fit`; the same on every
            rank): with ``cache_rows`` 0, each host's cache takes as many rows as the bytes its
            budget leaves hold (:meth:`cache_sizes`).

    Attributes:
        types: node types with rows, the same on every rank.
        tables: per type, this part's rows (``None`` when every part's rows are mapped here).
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
        tp = self._tp = part.layout
        one = part.typed is None  # a homogeneous part: the MiniBatch's dtypes
        # original ids ride along unless the partitioning kept them (new == original)
        self.carries_orig = one and not identity_ids(part)
        self.types = [n for n in tp.node_types if n in tp.x or n in tp.y]
        self.enabled = bool(self.types)
        self._t = {n: tp.node_types.index(n) for n in self.types}
        # per type: ((dtype, row shape) of x, of y, of the original id: None where absent)
        self._specs = {n: tuple(None if a is None else (np.dtype(d if one else a.dtype),
                                                        a.shape[1:])
                                for a, d in ((tp.x.get(n), np.float32), (tp.y.get(n), np.int64)))
                       + ((np.dtype(np.int64), ()) if self.carries_orig else None,)
                       for n in self.types}
        nbytes = {n: [0 if s is None else s[0].itemsize * int(np.prod(s[1], dtype=np.int64))
                      for s in spec] for n, spec in self._specs.items()}
        self._unit = np.dtype(np.int32 if all(b % 4 == 0 for v in nbytes.values() for b in v)
                              else np.uint8)  # words of a row: int32, bytes where needed
        self._cols = {n: [b // self._unit.itemsize for b in v] for n, v in nbytes.items()}
        self._width = np.zeros(len(tp.node_types), np.int64)  # row bytes per node type
        for n, v in nbytes.items():
            self._width[self._t[n]] = sum(v)
        self.row_bytes = int(self._width.max(initial=0))
        self.placement = placement
        self.fetch_span: tuple[float, float] | None = None  # the last fetch's wall clock
        self.stats = {"rows": 0, "local_rows": 0, "remote_rows": 0, "mapped_rows": 0,
                      "distinct_remote_rows": 0, "cache_hits": 0, "rows_fetched": 0,
                      "duplicate_rows_fetched": 0, "cache_bytes_saved": 0, "fetches": 0,
                      "recent_hits": 0,
                      "fetch_cpu_s": 0.0, "fetch_exchange_cpu_s": 0.0}
        # the host cache per type: (sorted ids, their rows) per slice (one per rank of the host)
        self._cache: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
        # the last round's rows of other hosts per type, (id index, row of each, rows) per
        # slice (as received, read again): read again, not fetched (:meth:`_keep_recent`)
        self._recent: dict[str, list[tuple]] = {}
        self._cache_index: dict[str, list[np.ndarray]] = {}  # an id index per cache slice
        self.host = host
        self.cache_choice = "none"
        self._bounded = False
        mapped = self._mapped = shared if shared is not None else getattr(host, "shared", None)
        self._held = np.zeros(bounds.size - 1, bool)  # parts whose rows are read here
        self._held[[part.rank, *(() if mapped is None else mapped.row_ranks)]] = True
        self.shared = mapped if mapped is not None and mapped.rows_everywhere else None
        self._host = self.tables = None
        # each host's cache rows (``cache_rows`` on every host, else what its budget holds)
        fill = int(cache_rows) > 0 and self.shared is None  # the same on every rank
        sizes = [] if fit is None else [int(cache_rows)] * len(fit.hosts) if fill \
            else self.cache_sizes(fit)
        plan = cache_plan if len(tp.edge_types) == 1 else None
        self.placement_from = "decided"  # or "file": read from the files beside the parts
        files = None if fit is None or len(fit.hosts) < 2 or not self.enabled else HostFiles(
            part, fit, self.ex.rank, sizes, plan, {n: [self._unit.str, sum(self._cols[n])]
                                                   for n in self.types})
        if self.shared is not None:  # every part's rows are mapped here: no table, no cache
            if int(cache_rows) > 0 and self.ex.rank == 0:
                log.info("features.cache_rows=%d unused: every part's feature rows are "
                         "mapped on this host (shared topology)", int(cache_rows))
            self._place(part, files, False, 0, None)
            return
        orig = part.orig_ids if self.carries_orig else None
        tables = {n: self._pack(n, tp.x.get(n), tp.y.get(n), orig) for n in self.types}
        # the tables are the copy in use: drop the files' resident pages from this process
        # (they stay in the page cache), so they are not counted twice in the rank's RSS
        for mm in (getattr(a, "_mmap", None) for a in (*tp.x.values(), *tp.y.values())):
            if mm is not None and hasattr(mm, "madvise") and hasattr(mmap, "MADV_DONTNEED"):
                mm.madvise(mmap.MADV_DONTNEED)
        # host placement reads rows with numpy fancy indexing; the others keep only their copy
        self._host = tables if placement == "host" else None
        self.tables = {n: torch.from_numpy(a) for n, a in tables.items()}
        if placement == "pinned":
            self.tables = {n: a.pin_memory() for n, a in self.tables.items()}
        elif placement == "device":
            self.tables = {n: a.to(device) for n, a in self.tables.items()}
        # the ids of a fetch go in one bounded all-to-all (a block per owner saying its size,
        # at most the owner's part) while every receive buffer stays small
        self._bounded = (self.ex.short_receives and self.ex.world_size > 1 and self.ex.world_size
                         * (int(np.diff(bounds).max()) + 1) * wire_dtype(bounds[-1]).itemsize
                         <= _BOUNDED_BYTES)
        if fit is not None:  # each host's own size; any host's makes the fill collective
            cache_rows, fill = sizes[fit.host_of[self.ex.rank]], max(sizes) > 0
        self._place(part, files, fill and self.enabled, int(cache_rows), plan)

    @property
    def table(self) -> torch.Tensor | None:
        """The first type's row table (a homogeneous part's only one)."""
        return None if not self.tables else next(iter(self.tables.values()))

    def on_exchanger(self, ex: Exchanger) -> DistFeatureStore:
        """The same store (tables and cache shared, no collective) over another exchanger of
        the same ranks, for a service's other round in flight; counters start at zero."""
        other = copy.copy(self)
        other.ex = ex
        other.stats = dict.fromkeys(self.stats, 0)
        other.stats.update(fetch_cpu_s=0.0, fetch_exchange_cpu_s=0.0)
        return other

    def cache_sizes(self, fit: Placement) -> list[int]:
        """Rows each host's cache takes under ``fit``: what its budget leaves after the
        topology, in rows of this store's widest type, at most the rows it does not map."""
        parts = np.diff(self._bounds)
        return [h.cache_rows(self.row_bytes, int(parts.sum() - parts[list(h.ranks)].sum()))
                for h in fit.hosts]

    @property
    def cache_size(self) -> int:
        """Rows held in the host cache (every slice of the host, every type)."""
        return int(sum(ids.size for s in self._cache.values() for ids, _ in s))

    def _owner(self, ids: np.ndarray) -> np.ndarray:
        return np.searchsorted(self._inner, ids, side="right")

    def _pack(self, name: str, x, y, orig) -> np.ndarray:
        """Rows of type ``name`` in its table's layout: ``x``, ``y`` and original ids (as this
        store keeps them, where it keeps them) side by side, as words."""
        n = next(int(a.shape[0]) for a in (x, y, orig) if a is not None)
        out = np.empty((n, sum(self._cols[name])), self._unit)
        at = 0
        for a, spec, c in zip((x, y, orig), self._specs[name], self._cols[name], strict=True):
            if spec is not None:
                out[:, at:at + c] = np.ascontiguousarray(a, spec[0]).view(np.uint8).reshape(
                    n, c * self._unit.itemsize).view(self._unit)
                at += c
        return out

    def _rows(self, name: str, rows: np.ndarray) -> np.ndarray:
        """This part's table rows ``rows`` of type ``name`` (local to the type), on the host."""
        if self._host is not None:
            return self._host[name][rows]
        t = self.tables[name]
        return self.ex.to_host(t[torch.from_numpy(rows).to(t.device)]).numpy()

    def _held_rows(self, name: str, ids: np.ndarray) -> np.ndarray:
        """Table rows of ids of type ``name`` of other parts mapped here, read in place."""
        got = self._mapped.type_rows(name, self._t[name], ids)
        return self._pack(name, got.get("x"), got.get("y"),
                          self._mapped.to_orig(ids) if self.carries_orig else None)

    def _place(self, part, files: HostFiles | None, fill: bool, rows: int,
               plan: CachePlan | None) -> None:
        """Collective with ``files`` or ``fill``: the host cache read from ``files`` when
        every host's match (one agreement, the same path on every rank), else filled
        (:meth:`_fill_cache`) when ``fill`` and written to ``files``."""
        if files is not None:
            got, why = files.load(int(self._bounds[-1]))
            with peer_errors("agreeing on reading the placement beside the parts"):
                if self.ex.agree_max([got is None])[0] == 0:
                    self._cache, self.cache_choice, self.placement_from = got, why, "file"
                    return
            if got is None and files.writer:
                log.info("placement of host %d decided, not read: %s", files.report["host"],
                         why)
        if fill:
            self._fill_cache(part, rows, plan)
        if files is not None:
            files.save(self._cache, self.cache_choice)

    def _fill_cache(self, part, rows: int, plan: CachePlan | None) -> None:
        """Collective: the host caches the ``rows`` nodes of other hosts its rounds touch most
        (:func:`~.row_cache.choose_rows`). Rank ``j`` of a host of ``G`` ranks takes the ids
        ``== j (mod G)``, so slices never overlap. The cache's bytes are checked on every rank
        before anything is allocated."""
        from ..system.host_limits import check_allocation

        ranks = self.host.ranks if self.host is not None else (self.ex.rank,)
        G, j = len(ranks), ranks.index(self.ex.rank)
        agree(lambda: check_allocation(
            f"a feature row cache of {rows:,} rows of up to {self.row_bytes} B "
            "(features.host_memory_mb)", rows * self.row_bytes, "lower features.host_memory_mb"),
            self.ex.group, "checking the feature cache's memory")
        share = rows // G + (1 if j < rows % G else 0)
        types_of = self._types_of()

        def far(ids: np.ndarray) -> np.ndarray:
            return ~self._held[self._owner(ids)] & (ids % G == j) & (self._width[types_of(ids)]
                                                                     > 0)

        ids, self.cache_choice = choose_rows(part, self.ex, far, share, plan)
        t = types_of(ids)
        got = self._from_owners({n: ids[t == self._t[n]] for n in self.types})  # sorted
        for n, (src, pos) in got.items():
            rows_n = src[pos]
            ids_n = ids[t == self._t[n]]
            self._cache[n] = share_slices(self.ex, ranks, ids_n, rows_n) \
                if self.host is not None else [(ids_n, rows_n)]

    def _types_of(self):
        """``ids -> node type index`` for new ids of any part (collective with several node
        types: one gather of every part's type offsets, tiny)."""
        from .collective import all_gather_1d

        off = np.asarray(self._tp.type_offset, np.int64)
        offs = off[None, :-1] if off.size == 2 else np.stack([t.numpy()[:-1] for t in (
            all_gather_1d(torch.from_numpy(off.copy()), self.ex.group))])
        # every part's types start in turn (an empty type shares its start with the next one)
        starts = (self._bounds[:-1, None] + offs).reshape(-1)
        return lambda ids: (np.searchsorted(starts, ids, side="right") - 1) % offs.shape[1]

    def _from_owners(self, ids: dict[str, np.ndarray]
                     ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Collective: the rows of remote new ids of every type in one exchange
        (:func:`rows_from_owners`): per type, the received rows and ``pos``: ``ids[type][k]``'s
        row is ``rows[pos[k]]``."""
        names = list(ids)
        flat = np.concatenate([*ids.values(), np.zeros(0, np.int64)])
        tt = np.repeat(np.arange(len(names)), [a.size for a in ids.values()])
        width = np.array([self._width[self._t[n]] for n in names], np.int64)
        back, perm = rows_from_owners(self.ex, self._bounds, flat, self._reply, width[tt],
                                      self._bounded)
        tt = tt[perm]
        start = np.concatenate(([0], np.cumsum(width[tt])[:-1])).astype(np.int64)
        base = np.concatenate(([0], np.cumsum([a.size for a in ids.values()])))
        out = {}
        for i, n in enumerate(names):
            ks = np.flatnonzero(tt == i)
            w = int(width[i])
            raw = back.reshape(-1, w) if ks.size == tt.size and w else \
                back[start[ks, None] + np.arange(w)]  # several types: each one's rows
            pos = np.empty(ks.size, np.int64)
            pos[perm[ks] - base[i]] = np.arange(ks.size)
            out[n] = (raw.view(self._unit), pos)
        return out

    def _reply(self, local: np.ndarray):
        """An owner's answer to :func:`rows_from_owners`: the table rows of ``local`` ids as
        bytes, and the bytes of each."""
        rt = np.searchsorted(self._tp.type_offset, local, side="right") - 1
        width = self._width[rt]
        off = np.asarray(self._tp.type_offset, np.int64)
        if local.size and rt.min() == rt.max():  # one type: its rows as they are
            t = int(rt[0])
            flat = self._rows(self._tp.node_types[t], local - off[t]).view(np.uint8).reshape(-1)
            return torch.from_numpy(flat), width
        flat = np.empty(int(width.sum()), np.uint8)
        start = np.concatenate(([0], np.cumsum(width)[:-1])).astype(np.int64)
        for t in np.unique(rt):
            at = np.flatnonzero(rt == t)
            rows = self._rows(self._tp.node_types[t], local[at] - off[t])
            flat[start[at, None] + np.arange(self._width[t])] = rows.view(np.uint8)
        return torch.from_numpy(flat), width

    def fetch(self, n_ids: Sequence[np.ndarray], types: Sequence[np.ndarray] | None = None
              ) -> list:
        """Collective (unless every row is mapped here): per array of new ids, the rows of its
        ids in order: ``(x, y, original ids)`` of a homogeneous part (original ids ``None``
        unless :attr:`carries_orig`); with ``types`` (the node type index of each id),
        ``{type: (x, y, None)}`` for each type with rows."""
        c0, x0, t0 = time.thread_time(), self.ex.cpu_exchange, time.perf_counter()
        try:
            per = {n: [np.asarray(a, np.int64) if types is None else
                       np.asarray(a, np.int64)[np.asarray(k) == self._t[n]]
                       for a, k in zip(n_ids, types or n_ids, strict=True)]
                   for n in self.types}
            self.stats["fetches"] += 1
            got = self._read_mapped(per) if self.shared is not None else self._fetch_rows(per)
            if types is None:  # a homogeneous part: its one type's rows
                return [g[self.types[0]] for g in got]
            return got
        finally:  # this thread's CPU in fetches, and the part of it inside collectives
            self.stats["fetch_cpu_s"] += time.thread_time() - c0
            self.stats["fetch_exchange_cpu_s"] += self.ex.cpu_exchange - x0
            self.fetch_span = (t0, time.perf_counter())  # a step's wait for rows (service)

    def _fetch_rows(self, per: dict[str, list[np.ndarray]]) -> list[dict[str, tuple]]:
        """Every type's rows of each batch: own, mapped and cached rows read here, the others
        (each distinct id once) from their owners in one exchange for every type."""
        B = len(next(iter(per.values()))) if per else 0
        out: list[dict[str, tuple]] = [{} for _ in range(B)]
        plans, fetch = [], {}
        for n, arrays in per.items():
            plan = self._near(n, arrays)
            plans.append((n, *plan))
            fetch[n] = plan[-2]
        got = self._from_owners(fetch)
        st = self.stats
        for n, put, Xs, Ms, ri, uniq, inv, hit, miss, f, again in plans:
            src, pos = got[n]
            where = np.empty(uniq.size, np.int64)  # distinct remote id -> its received row
            where[miss] = pos
            sel = np.flatnonzero(~hit[inv])
            put(ri[sel], src, where[inv[sel]])
            self._keep_recent(n, f, src, pos, again)
            # measured, not assumed: rows that crossed the wire twice in this round
            st["duplicate_rows_fetched"] += int(f.size - unique_first(f)[0].size)
            for b, (X, M) in enumerate(zip(Xs, Ms, strict=True)):
                out[b][n] = self._unpack(n, X, M)
        return out

    def _near(self, name: str, arrays: list[np.ndarray]):
        """Rows of type ``name`` read here into each batch's arrays: own rows, those of parts
        mapped here and cached ones; and what is left to fetch (each distinct id once)."""
        sizes = [int(a.size) for a in arrays]
        ids = np.concatenate([*arrays, np.zeros(0, np.int64)])
        cx = self._cols[name][0]
        # every row is written once, straight into its batch's features and extra columns;
        # one array per batch, not per round: a round's rows can exceed glibc's mmap
        # threshold (32 MiB), and a fresh mapping per round faults in every page again
        ends = np.cumsum(sizes, dtype=np.int64)
        starts = ends - np.asarray(sizes, np.int64)
        Xs = [np.empty((n, cx), self._unit) for n in sizes]
        Ms = [np.empty((n, sum(self._cols[name][1:])), self._unit) for n in sizes]

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
        rows = ids[li] - self.lo - int(self._tp.type_offset[self._t[name]])
        if self._host is not None:
            put(li, self._host[name], rows)
        else:
            put(li, self._rows(name, rows), np.arange(li.size))
        hi = np.flatnonzero(~local & self._held[owner])  # other parts mapped here: in place
        if hi.size:
            put(hi, self._held_rows(name, ids[hi]), np.arange(hi.size))
        ri = np.flatnonzero(~self._held[owner])
        uniq, inv = unique_first(ids[ri])
        hit = np.zeros(uniq.size, bool)

        def lookup(index: np.ndarray, crows: np.ndarray, at: np.ndarray | None = None
                   ) -> tuple[np.ndarray, np.ndarray]:
            """Put the rows of ``uniq`` held in ``crows`` and not yet put (the ``k``-th id of
            ``index`` has row ``crows[at[k]]``, else ``crows[k]``); returns which, and where."""
            pos = find_ids(index, uniq)
            h = (pos >= 0) & ~hit
            pos = pos if at is None else at[pos]
            sel = np.flatnonzero(h[inv])
            put(ri[sel], crows, pos[inv[sel]])
            return h, pos

        if name not in self._cache_index:  # the cache never changes: indexed once
            self._cache_index[name] = [id_index(c) for c, _ in self._cache.get(name, ())]
        for index, (_, crows) in zip(self._cache_index[name], self._cache.get(name, ()),
                                     strict=True):
            hit |= lookup(index, crows)[0]
        st = self.stats
        st["cache_hits"] += int(hit.sum())
        again = []  # rows of the last round's that this round reads again: (ids, src, rows)
        for index, at, crows in self._recent.get(name, ()):
            h, pos = lookup(index, crows, at)
            hit |= h
            again.append((uniq[h], crows, pos[h]))
            st["recent_hits"] += int(h.sum())
        miss = np.flatnonzero(~hit)
        st["mapped_rows"] += int(hi.size)
        st["rows"] += int(ids.size)
        st["local_rows"] += int(li.size)
        st["remote_rows"] += int(ri.size + hi.size)
        st["distinct_remote_rows"] += int(uniq.size)
        st["cache_bytes_saved"] += int(hit.sum()) * int(self._width[self._t[name]])
        st["rows_fetched"] += int(miss.size)
        return put, Xs, Ms, ri, uniq, inv, hit, miss, uniq[miss], again  # held: never asked

    def _keep_recent(self, name: str, ids: np.ndarray, rows: np.ndarray, at: np.ndarray,
                     again: list) -> None:
        """Keep this round's rows of other hosts for the next round, which shares many: those
        received (``ids[k]``'s row is ``rows[at[k]]``, kept as they came) and those read again,
        copied into one array, so a round looks ids up in two sets, not in one per round since
        a row was fetched. One round's far rows, held by its batches too
        (docs/performance.md#rounds-in-step-issue-34)."""
        n = sum(i.size for i, _, _ in again)
        kept = np.empty((n, rows.shape[1]), self._unit)
        a = 0
        for _, src, pos in again:
            np.take(src, pos, axis=0, out=kept[a:a + pos.size], mode="clip")  # unbuffered
            a += pos.size
        ids_again = np.concatenate([i for i, _, _ in again] + [np.zeros(0, np.int64)])
        self._recent[name] = [(id_index(i), w, r) for i, r, w in ((ids, rows, at),
                                                                    (ids_again, kept, None))
                              if i.size]

    def _unpack(self, name: str, X: np.ndarray, M: np.ndarray) -> tuple:
        """``(x, y, original ids)`` of one batch's rows of type ``name`` (``None`` where
        absent). numpy views the words as each field's dtype for any row count (torch refuses
        the view of an empty slice whose strides are 0)."""
        (sx, sy, so), cy = self._specs[name], self._cols[name][1]
        n = X.shape[0]
        x = None if sx is None else torch.from_numpy(X.view(sx[0]).reshape(n, *sx[1]))
        y = None if sy is None else torch.from_numpy(
            np.ascontiguousarray(M[:, :cy]).view(sy[0]).reshape(n, *sy[1]))
        orig = None if so is None else np.ascontiguousarray(M[:, cy:]).view(np.int64).reshape(-1)
        return x, y, orig

    def _read_mapped(self, per: dict[str, list[np.ndarray]]) -> list[dict[str, tuple]]:
        """Every type's ``(x, y, original ids)`` of each batch read in place from every part's
        mapped files (no collective); the same values and dtypes as the tables' rows."""
        sh = self.shared
        out: list[dict[str, tuple]] = [{} for _ in next(iter(per.values()), ())]
        st = self.stats
        for n, arrays in per.items():
            sx, sy, _ = self._specs[n]
            for b, ids in zip(out, arrays, strict=True):
                got = sh.type_rows(n, self._t[n], ids)
                x = y = None
                if sx is not None:
                    x = torch.from_numpy(got["x"].astype(sx[0], copy=False))
                    if self.placement != "host":  # on CUDA: batches leave from page-locked memory
                        x = x.pin_memory()
                if sy is not None:
                    y = torch.from_numpy(got["y"].astype(sy[0], copy=False))
                b[n] = (x, y, sh.to_orig(ids) if self.carries_orig else None)
                mine = int(np.count_nonzero(self._owner(ids) == self.ex.rank))
                st["rows"] += int(ids.size)
                st["local_rows"] += mine
                st["remote_rows"] += int(ids.size) - mine
                st["mapped_rows"] += int(ids.size) - mine
        return out

    def cache_stats(self) -> dict:
        """Cache size, hit rate (of the distinct remote rows asked for) and the row bytes the
        cache saved so far."""
        st = self.stats
        distinct = st["distinct_remote_rows"]
        return {"cache_rows": self.cache_size,
                "cache_bytes": int(sum(r.nbytes for s in self._cache.values() for _, r in s)),
                "cache_hit_rate": st["cache_hits"] / distinct if distinct else 0.0,
                "recent_hit_rate": st["recent_hits"] / distinct if distinct else 0.0,
                "cache_bytes_saved": st["cache_bytes_saved"]}


def rows_from_owners(ex: Exchanger, bounds: np.ndarray, ids: np.ndarray, reply,
                     per_row: np.ndarray, bounded: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Collective: the rows of remote new ids (none this rank's) as received bytes, and
    ``perm``: received row ``k`` is that of ``ids[perm[k]]``. The ids go to their owners in
    one bounded all-to-all when ``bounded``, else counts then ids; an owner answers
    ``reply(local ids) = (uint8 payload, bytes per id)``, and ``per_row`` (the same bytes as
    the asker knows them) sizes the rows' all-to-all on both sides."""
    W, me = ex.world_size, ex.rank
    bounds = np.asarray(bounds, np.int64)
    wire = wire_dtype(bounds[-1])
    owner = np.searchsorted(bounds[1:-1], ids, side="right")
    perm = np.argsort(owner.astype(np.int16 if W < 2**15 else np.int64), kind="stable")
    send_counts = np.bincount(owner, minlength=W).astype(np.int64)
    wid = ids[perm].astype(wire)
    if bounded:  # a count word, then the ids, per owner: at most its part
        parts = np.diff(bounds)
        sb, rb = parts + 1, np.full(W, parts[me] + 1, np.int64)
        sb[me] = rb[me] = 0
        words = send_counts + 1
        words[me] = 0
        got = ex.bounded(torch.from_numpy(with_counts(wid, send_counts, me, wid)),
                         words.tolist(), sb.tolist(), rb.tolist(), "features").numpy()
        recv, rc = counted_keys(got, rb)
        recv, recv_counts = recv.astype(np.int64), np.array(rc, np.int64)
    else:
        t, rc = ex.exchange(torch.from_numpy(wid), torch.from_numpy(send_counts), "features")
        recv, recv_counts = t.numpy().astype(np.int64), rc.numpy()
    payload, units = reply(recv - bounds[me])
    give = np.bincount(np.repeat(np.arange(W), recv_counts), units, W)
    take = np.bincount(owner, per_row, W)
    back = ex.payload(payload, give.astype(np.int64).tolist(), take.astype(np.int64).tolist(),
                      "features").numpy()
    return back, perm
