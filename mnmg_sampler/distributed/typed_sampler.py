"""Distributed sampling of a typed graph: :class:`~.sampler.DistSampler` with the typed kernel.

Each rank owns one typed part (:mod:`mnmg_sampler.graph.typed_partition`). A hop is the
homogeneous path's (:meth:`~.sampler.DistSampler._hop_wire`, :mod:`mnmg_sampler.ops.wire`):
per destination a header per request (node count, key, flags, the hop's fanout per relation),
the nodes' new ids and, in a timed round, their time bounds; the owner runs **one** typed kernel
call (:func:`~mnmg_sampler.ops.typed.sample_typed_neighbors`) over its own nodes and every node
received, keyed on internal ids, and replies with a count per node and one word per sampled edge
(``neighbor x R + relation``; edge ids only when asked), int32 words where they fit, within
bounds both sides compute. The requester puts the replies back in frontier order and dedups
(:func:`~mnmg_sampler.sampling.sampler.multi_hop`, as in one process). After the last hop,
``n_id`` is translated to internal ids by one lookup to the owners (:class:`~.id_maps.IdMaps`)
and ``x``/``y`` of every node type come from the owners in one exchange each way.

The RNG is keyed on internal ids (type offset + per-type id: fixed by the graph, not by the
partitioning) and neighbor lists keep their order, so every minibatch equals
:class:`~mnmg_sampler.sampling.sampler.HeteroSampler`'s for any world size and partitioning.
Calls are collective, as :meth:`~.sampler.DistSampler.sample`'s. Temporal and disjoint requests
(``docs/temporal.md``) run the same hops through :func:`~mnmg_sampler.sampling.sampler.
sample_trees` (pair ids ``tree * N + new id``, each node bounded by its seed's time).

With the shared topology (:mod:`.typed_shared`, every rank on one host) a rank maps every typed
part, runs each hop itself in one kernel call over all parts, and translates ids and reads
``x``/``y`` rows in place. With ``kernel="cuda"`` the owner's kernel call is the typed CUDA twin
(:meth:`~.sampler._CudaHop.typed`; tested under Numba's CUDA simulator only).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import torch
import torch.distributed as dist

from ..errors import SamplingInputError
from ..graph.partition_io import part_graph
from ..ops import typed as typed_ops
from ..sampling.batch import HeteroMiniBatch
from ..sampling.sampler import (
    HeteroSampleRequest,
    HopSegments,
    assemble_batch,
    fanout_table,
    multi_hop,
    sample_trees,
)
from ..sampling.temporal import (
    check_request_time,
    check_tree_ids,
    mark_trees,
    num_seeds,
    seed_times,
)
from .sampler import DistSampler, _CudaHop
from .typed_shared import open_typed_shared
from .typed_time import attach_part_time

__all__ = ["DistTypedSampler"]


class DistTypedSampler(DistSampler):
    """Collective multi-hop sampler over a typed partition (see the module docstring): the
    :class:`~.sampler.DistSampler` of a typed part, whose hops run the typed kernel.

    Args:
        part: this rank's typed part (``load_partition`` of a typed partition directory).
        seed: the job's sampling seed.
        group: the process group to exchange over.
        features: fetch each batch's ``x``/``y`` per node type from the owners.
        id_maps: ``auto``, ``sharded`` or ``replicated`` (:mod:`.id_maps`).
        kernel: ``cpu`` or ``cuda`` (the typed CUDA twin, CSR on ``device``).
        shared_topology: ``True``, ``False`` or ``"auto"``, as for homogeneous parts
            (:mod:`.typed_shared`). Results do not change.
    """

    _typed = True

    def __init__(self, part, seed: int = 0, group: dist.ProcessGroup | None = None,
                 features: bool = True, id_maps: str = "auto", kernel: str = "cpu",
                 device=None, shared_topology: bool | str = "auto",
                 host_memory: int | None = None) -> None:
        self.graph = part_graph(part)  # PartitionError for a homogeneous part
        self.tp = part.typed
        super().__init__(part, seed, group, kernel=kernel, device=device, id_maps=id_maps,
                         shared_topology=shared_topology, host_memory=host_memory)
        # collective with node time, unless the shared topology read every part's already
        attach_part_time(self.graph, part, self.ex, group,
                         None if self.shared is None else self.shared.node_time)
        typed = part.manifest.get("typed", {}) if part.manifest else {}
        # node types with rows to fetch: the same list on every rank (from the manifest)
        self._data_types = [t for t in self.tp.node_types
                            if t in (typed.get("x") or {}) or t in (typed.get("y") or {})]
        self.features = bool(features)
        self._edge_ids = True  # this round: a request asks for edge ids
        # rows of other ranks' nodes kept here: per data type, (sorted new ids, row bytes)
        self._cache: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.row_stats = {"remote_rows": 0, "cache_hits": 0, "rows_fetched": 0}
        far = getattr(self.ex, "far", None)  # per rank: on another host
        if (self.features and self._data_types and self.shared is None and far is not None
                and bool(far.any())):  # the same on every rank
            self._fill_cache(self._budget // max(int((~far).sum()), 1) // int(
                self._widths().max()))

    def _cuda_hop(self, device):
        return _CudaHop(self._csr, device, graph=self.graph)

    def _open_mapped(self, part, shared_topology, kernel: str, budget: int):
        self._budget = budget  # the row cache's (typed parts: no topology of other hosts)
        return open_typed_shared(part, self.ex, shared_topology, kernel), None

    # -- checks --------------------------------------------------------------------------
    def check_request(self, r, consequence: str = "no neighbors can be sampled for it; every "
                                                  "rank stops this round") -> None:
        """:class:`SamplingInputError` unless ``r`` is a typed request this graph can serve."""
        if not isinstance(r, HeteroSampleRequest):
            raise SamplingInputError(
                f"a {type(r).__name__} was sent to the sampler of a typed graph", consequence,
                "send HeteroSampleRequest(input_type, seeds, num_neighbors, key) (or use "
                "DistNeighborLoader(service, input_nodes=(type, ids), ...))")
        for name, seeds in r.seed_groups():  # input_type's, then a link batch's other type
            if name not in self.tp.node_types:
                raise SamplingInputError(f"node type {name!r} is not in the graph",
                                         consequence, f"use one of {list(self.tp.node_types)}")
            t = self.tp.node_types.index(name)
            n = int(self.tp.node_type_offset[t + 1] - self.tp.node_type_offset[t])
            if seeds.size and (int(seeds.min()) < 0 or int(seeds.max()) >= n):
                bad = int(seeds.min()) if int(seeds.min()) < 0 else int(seeds.max())
                raise SamplingInputError(f"{name} id {bad} is out of range for {n} {name} "
                                         "nodes", consequence, f"pass {name} ids in [0, {n})")
        fanout_table(self.graph, r.num_neighbors)
        if check_request_time(self.graph, r):  # disjoint: tree ids must fit int64
            check_tree_ids(num_seeds(r), int(np.asarray(self.part.boundaries)[-1]))

    def round_flags(self, requests: Sequence) -> tuple[list[int], SamplingInputError | None]:
        """Local half of a round's agreement, to be reduced with ``MAX`` over ranks (the service
        puts them in its own agreement): ``[error, deepest request, any fanout -1, requests
        with a hop, their seeds, any time, any disjoint trees]`` (the last four bound hop 1's
        blocks, so that no exchange of the round sends its sizes first)."""
        try:
            for r in requests:
                self.check_request(r)
        except SamplingInputError as e:
            return [1, 0, 1, 0, 0, 0, 0], e
        tables = [fanout_table(self.graph, r.num_neighbors) for r in requests]
        on = [(r, t) for r, t in zip(requests, tables, strict=True) if t.shape[0] > 0]
        return [0, max((t.shape[0] for t in tables), default=0),
                int(any((t < 0).any() for t in tables)), len(on),
                sum(num_seeds(r) for r, _ in on), int(any(r.time_attr is not None for r, _ in on)),
                int(any(_grows_trees(r) for r, _ in on))], None

    # -- one hop -------------------------------------------------------------------------
    def _typed_kernel(self, rows, keys, req, fan, rep, hop, bounds=None, last=None,
                      edge_ids: bool = True):
        t0 = time.perf_counter()
        if self.kernel == "cuda":
            out = self._cuda.typed(self.ex, rows, keys, req, fan, rep, self.seed, hop, bounds,
                                   last)
        else:
            out = typed_ops.sample_typed_neighbors(self.graph, rows, self._csr[3][rows], keys,
                                                   req, fan, rep, self.seed, hop, bounds=bounds,
                                                   last=last, with_eids=edge_ids)
        self._counted(t0, rows.size, out[1].size)
        return out

    def _typed_hop(self, nodes, keys, req, fan, rep, hop, bounds=None, last=None):
        """One hop of every request (frontier ``nodes`` in new ids, request ``req`` of each,
        ascending; each with its time bound when ``bounds`` is given): the typed kernel's four
        arrays in frontier order, through the wire of :meth:`~.DistSampler._hop_wire`."""
        if self.shared is not None:  # every part mapped here: one call, no exchange
            t0 = time.perf_counter()
            out = self.shared.hop(nodes, keys, req, fan, rep, self.seed, hop, bounds, last)
            self._counted(t0, nodes.size, out[1].size)
            return out
        Q = fan.shape[0]
        sizes = np.bincount(req, minlength=Q).astype(np.int64)
        key_q = np.zeros(Q, np.int64)
        key_q[req] = keys  # every node of a request has its key
        self._hop_full = h = HopSegments(nodes, sizes, key_q, fan, rep, hop, self._edge_ids,
                                         bounds, last)
        c, nb, rel, e = self._hop_wire(h)
        if e is None or e.size != nb.size:  # no request of the round asked for them
            e = np.zeros(nb.size, np.int64)
        return c, nb, rel, e

    # -- public --------------------------------------------------------------------------
    def sample(self, requests: Sequence[HeteroSampleRequest], features=None,
               agreed: tuple[SamplingInputError | None, Sequence[int]] | None = None
               ) -> list[HeteroMiniBatch]:
        """Collective: sample this rank's typed requests together with every rank's.

        ``agreed = (local error, flags reduced over ranks)`` skips this call's own agreement
        (:meth:`round_flags`); ``features`` is ignored (the sampler fetches rows per type when
        built with ``features=True``)."""
        flags = self._agreed(requests, agreed)
        hops = int(flags[1])
        tp = self.tp
        internal = [r.internal_seeds(tp.node_types, tp.node_type_offset) for r in requests]
        sh = self.shared
        # collective without the shared topology; with it, read from the mapped parts
        seeds = self.ids.to_new_many(internal) if sh is None else [sh.to_new(a)
                                                                   for a in internal]
        tables = [fanout_table(self.graph, r.num_neighbors) for r in requests]
        self._bound_round(flags, tables, any(_grows_trees(r) for r in requests))
        self._edge_ids = any(r.edge_ids for r in requests)
        trees, times = None, None
        if self._trees:
            got, trees, times = self._sample_trees(requests, seeds, tables, hops)
        else:
            got = multi_hop(self._typed_hop, seeds, tables, requests, hops,
                            len(tp.edge_types))
        nids = self.ids.to_orig_many([g[0] for g in got]) if sh is None else [
            sh.to_orig(g[0]) for g in got]
        out = [assemble_batch(tp.node_types, tp.edge_types, tp.node_type_offset, r, nid, n, e)
               for r, nid, (_, n, e) in zip(requests, nids, got, strict=True)]
        if trees is not None:
            for b, r, tree, nid, t in zip(out, requests, trees, nids, times, strict=True):
                if _grows_trees(r):
                    mark_trees(b, tree, nid, tp.node_types, tp.node_type_offset, t)
        if self.features:
            self._fetch_rows([g[0] for g in got], nids, out)
        return out

    def _bound_round(self, flags, tables: list[np.ndarray], trees: bool) -> None:
        """This round's wire state: with every fanout ``>= 0`` (``flags`` agreed, see
        :meth:`round_flags`), hop 1's blocks are bounded by the requests and seeds of any rank
        (a part's nodes too, unless a rank grows trees, where nodes repeat) and each block
        tells the bound of the next (:meth:`~.DistSampler._next_bounds`)."""
        W, k = self.ex.world_size, self._k
        _, hops, unbounded, S, N, timed, any_trees = (int(v) for v in flags[:7])
        self._trees = trees
        self._local_hops = ()
        self._bounded = not unbounded and W > 1 and self.shared is None and hops > 0
        self._lens = np.array([t.shape[0] for t in tables], np.int64)
        self._last_hop = hops - 1
        self._carry = np.zeros(W, np.int64)
        if self._bounded:  # an id, and its time bound
            self._first_bounds(S, N, 1 + (k if timed else 0), bool(any_trees))

    def _sample_trees(self, requests, seeds, tables, hops):
        """The hops of a round with disjoint or temporal requests
        (:func:`~mnmg_sampler.sampling.sampler.sample_trees` over new ids, every node's time
        bound on the wire with it): ``(multi_hop's tuples, trees, seed times)``."""
        times = [seed_times(self.graph, r, s) if r.time_attr is not None else None
                 for r, s in zip(requests, seeds, strict=True)]
        disjoint = [_grows_trees(r) for r in requests]
        last = [r.temporal_strategy == "last" for r in requests]
        n = int(np.asarray(self.part.boundaries)[-1])
        got = sample_trees(self._typed_hop, seeds, requests, tables, times, disjoint, last, n,
                           len(self.tp.edge_types), n_hops=hops)
        return [(v, nn, e) for _, v, nn, e in got], [g[0] for g in got], times

    # -- node data of every type ------------------------------------------------------------
    def _fetch_rows(self, new_ids: list[np.ndarray], nids: list[np.ndarray],
                    out: list[HeteroMiniBatch]) -> None:
        """Collective: ``x`` / ``y`` of every batch's nodes of every type with node data (the
        same types on every rank, from the manifest), each distinct node once: one exchange
        each way for all types (:meth:`_rows_of`)."""
        off = self.tp.node_type_offset
        sel, uniq = {}, {}
        for name in self._data_types:
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
        """Collective: keep the rows of up to ``rows`` nodes of other hosts (of types with node
        data; the rank's share of its host's budget, ``features.host_memory_mb``) that this
        part's edges point to most (:func:`~.row_cache.choose_rows` by degree), fetched once;
        rounds never ask for them again."""
        from ..system.host_limits import check_allocation
        from .collective import agree, all_gather_1d
        from .row_cache import choose_rows

        tp, far_rank = self.tp, self.ex.far
        width = self._widths()
        # every part's type offsets (tiny): the type of any new id
        offs = np.stack([t.numpy() for t in all_gather_1d(torch.from_numpy(
            np.array(tp.type_offset, np.int64)), self.group)])  # (a writable copy)
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
            "lower features.host_memory_mb"), self.group, "checking the feature cache's memory")
        t = types_of(ids)
        uniq = {n: ids[t == tp.node_types.index(n)] for n in self._data_types}  # sorted
        raw, at = self._raw_rows(uniq, width), 0
        for name, u in uniq.items():
            self._cache[name] = (u, raw[at:at + u.size, :width[tp.node_types.index(name)]])
            at += u.size
        self.row_stats.update(remote_rows=0, cache_hits=0, rows_fetched=0)

    def cache_stats(self) -> dict:
        """Rows in the cache and its hit rate (cached rows among the distinct remote rows of
        the batches so far)."""
        st = self.row_stats
        return {"cache_rows": int(sum(ids.size for ids, _ in self._cache.values())),
                "cache_hit_rate": st["cache_hits"] / st["remote_rows"] if st["remote_rows"]
                else 0.0}

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
        if self.shared is not None:
            return {name: self.shared.rows(name, index[name], ids) for name, ids in uniq.items()}
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
        tp, W, me = self.tp, self.ex.world_size, self.rank
        index = {name: tp.node_types.index(name) for name in uniq}
        ids = np.concatenate([*uniq.values(), np.zeros(0, np.int64)])
        types = np.repeat(np.array([index[n] for n in uniq], np.int64),
                          [a.size for a in uniq.values()])
        owner = np.searchsorted(self._inner, ids, side="right")
        raw = np.empty((ids.size, int(width.max(initial=0))), np.uint8)
        hit = owner == me
        self.row_stats["remote_rows"] += int(ids.size - hit.sum())
        at = 0
        for name, u in uniq.items():  # cached rows of other ranks' nodes
            cids, craw = self._cache.get(name, (np.zeros(0, np.int64), None))
            if cids.size and u.size:
                pos = np.minimum(np.searchsorted(cids, u), cids.size - 1)
                got = np.flatnonzero((cids[pos] == u) & ~hit[at:at + u.size])
                raw[at + got, :craw.shape[1]] = craw[pos[got]]
                hit[at + got] = True
                self.row_stats["cache_hits"] += int(got.size)
            at += u.size
        remote = np.flatnonzero(~hit)
        remote = remote[np.argsort(owner[remote], kind="stable")]  # grouped by owner
        self.row_stats["rows_fetched"] += int(remote.size)
        own = np.flatnonzero(owner == me)
        for t in np.unique(types[own]):
            at = own[types[own] == t]
            raw[at, :width[t]] = self._row_bytes(int(t), ids[at] - self.lo)
        if W > 1:
            counts = np.bincount(owner[remote], minlength=W).astype(np.int64)
            recv, rcounts = self.ex.exchange(torch.from_numpy(ids[remote]),
                                             torch.from_numpy(counts), "features")
            local = recv.numpy() - self.lo
            rt = np.searchsorted(tp.type_offset, local, side="right") - 1  # the rows' types
            w = width[rt]
            flat = np.empty(int(w.sum()), np.uint8)
            start = np.concatenate([[0], np.cumsum(w)[:-1]]).astype(np.int64)
            for t in np.unique(rt):
                at = np.flatnonzero(rt == t)
                flat[start[at, None] + np.arange(width[t])] = self._row_bytes(int(t), local[at])
            by_src = np.repeat(np.arange(W), rcounts.numpy())
            mine_w = width[types[remote]]
            back = self.ex.payload(
                torch.from_numpy(flat), np.bincount(by_src, w, W).astype(np.int64).tolist(),
                np.bincount(owner[remote], mine_w, W).astype(np.int64).tolist(),
                "features").numpy()
            start = np.concatenate([[0], np.cumsum(mine_w)[:-1]]).astype(np.int64)
            for t in np.unique(types[remote]):
                at = np.flatnonzero(types[remote] == t)
                raw[remote[at], :width[t]] = back[start[at, None] + np.arange(width[t])]
        return raw


def _width(a) -> int:
    """Bytes of one row of ``a``."""
    return a.dtype.itemsize * int(np.prod(a.shape[1:], dtype=np.int64))


def _grows_trees(r: HeteroSampleRequest) -> bool:
    """Disjoint trees: asked for, or temporal (PyG's temporal sampling is disjoint)."""
    return r.time_attr is not None or bool(r.disjoint)
