"""Distributed sampling of a typed graph: one typed kernel call per hop per rank, every relation
and every merged request in it, frontier nodes of other parts over the wire.

Each rank owns one typed part (:mod:`mnmg_sampler.graph.typed_partition`). Per hop, a rank
splits the frontier of all its requests by owner; its own nodes go straight to the kernel, the
others to their owners in one exchange: per destination, a header per request (node count, key,
flags, the hop's fanout per relation) then the nodes' new ids and, when the requester's round has
time, each node's time bound (:mod:`.typed_time`). The owner runs **one**
typed kernel call (:func:`~mnmg_sampler.ops.typed.sample_typed_neighbors`) over its own nodes
and every node received, keyed on the nodes' internal ids, and sends back per node its count and
per sampled edge the neighbor's new id, relation and edge id (one more exchange). The requester
puts the replies back in frontier order and dedups (:func:`~mnmg_sampler.hetero_sampler.
multi_hop`, as in one process). After the last hop, ``n_id`` is translated to internal ids by
one lookup to the owners (:class:`~.id_maps.IdMaps`), and the rows of ``x``/``y`` of each node
type come from the owners (one exchange per type with node data).

The RNG is keyed on internal ids (type offset + per-type id: fixed by the graph, not by the
partitioning) and neighbor lists keep their order, so every minibatch equals
:class:`~mnmg_sampler.hetero_sampler.HeteroSampler`'s for any world size and partitioning.
Calls are collective: every rank calls :meth:`DistTypedSampler.sample` the same number of times,
with any number of requests, including none. The wire words are int64 (the homogeneous path's
int32 words and padded replies are not used here yet).

Temporal and disjoint requests (``docs/temporal.md``) run the same hops through
:func:`~mnmg_sampler.hetero_sampler.sample_trees` (pair ids ``tree * N + new id``, each node
bounded by its seed's time), so they equal the one-process temporal sampler's batches too.

With the shared topology (:mod:`.typed_shared`, every rank on one host, the homogeneous rules;
with or without time) a rank maps every typed part and runs each hop itself in one kernel
call over all parts, and translates ids and reads ``x``/``y`` rows in place: no exchange of ids
or rows. With ``kernel="cuda"`` the owner's kernel call is the typed CUDA twin
(:mod:`.typed_cuda`; tested under Numba's CUDA simulator only).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import torch
import torch.distributed as dist

from ..errors import ConfigError, SamplingInputError
from ..graph.typed_partition import part_graph
from ..hetero_batch import HeteroMiniBatch
from ..hetero_sampler import (
    HeteroSampleRequest,
    assemble_batch,
    fanout_table,
    multi_hop,
    sample_trees,
)
from ..ops import typed as typed_ops
from ..sampler import check_seed
from ..temporal_sampler import (
    check_request_time,
    check_tree_ids,
    mark_trees,
    num_seeds,
    seed_times,
)
from .collective import Exchanger, raise_agreed
from .consistency import check_same_partitioning
from .host_channel import open_host_channel
from .id_maps import IdMaps
from .typed_shared import open_typed_shared
from .typed_time import attach_part_time, pack_block, unpack_block

__all__ = ["DistTypedSampler"]

TIME_MAX = np.iinfo(np.int64).max


def _ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(s, s + c)`` of every pair."""
    total = int(counts.sum())
    off = np.zeros(counts.size + 1, np.int64)
    np.cumsum(counts, out=off[1:])
    return np.repeat(starts - off[:-1], counts) + np.arange(total, dtype=np.int64)


class DistTypedSampler:
    """Collective multi-hop sampler over a typed partition (see the module docstring).

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

    def __init__(self, part, seed: int = 0, group: dist.ProcessGroup | None = None,
                 features: bool = True, id_maps: str = "auto", kernel: str = "cpu",
                 device=None, shared_topology: bool | str = "auto") -> None:
        self.graph = part_graph(part)  # PartitionError for a homogeneous part
        if kernel not in ("cpu", "cuda"):  # before any collective
            raise SamplingInputError(f"unknown kernel {kernel!r}", "no hop can be sampled",
                                     "use kernel='cpu' or kernel='cuda'")
        if shared_topology is True and kernel == "cuda":
            raise ConfigError("the shared topology is not supported with kernel='cuda'",
                              "no rank builds its sampler",
                              "pass shared_topology=False, or use kernel='cpu'")
        self.kernel = kernel
        self.part = part
        self.tp = part.typed
        self.seed = check_seed(seed)
        self.group = group
        self.ex = Exchanger(group)
        check_same_partitioning(part, group)  # collective
        self.rank = self.ex.rank
        bounds = np.asarray(part.boundaries, np.int64)
        self._inner = np.ascontiguousarray(bounds[1:-1])
        self.lo, self.hi = int(bounds[self.rank]), int(bounds[self.rank + 1])
        self.orig = np.asarray(part.orig_ids)
        self.ids = IdMaps(part, self.ex, id_maps)  # collective
        # collective: every rank maps every typed part, or none does
        self.shared = open_typed_shared(part, self.ex, shared_topology, kernel)
        # collective with node time, unless the shared topology read every part's already
        attach_part_time(self.graph, part, self.ex, group,
                         None if self.shared is None else self.shared.node_time)
        typed = part.manifest.get("typed", {}) if part.manifest else {}
        # node types with rows to fetch: the same list on every rank (from the manifest)
        self._data_types = [t for t in self.tp.node_types
                            if t in (typed.get("x") or {}) or t in (typed.get("y") or {})]
        self.features = bool(features)
        self.kernel_calls = 0
        self.kernel_nodes = 0
        self.kernel_edges = 0
        self.t_kernel = 0.0
        self._cuda = None
        if kernel == "cuda":
            from .typed_cuda import TypedCudaHop

            self._cuda = TypedCudaHop(self.graph, self.orig, device)
        # with every rank on one host, rounds agree over Unix sockets, not gloo (collective)
        self.host_channel = open_host_channel(self.ex) if self.shared is not None else None
        self.ex.host_channel = self.host_channel

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
        """Local half of a round's agreement: ``([error, deepest request], error or None)``,
        to be reduced with ``MAX`` over ranks (the service puts them in its own agreement)."""
        try:
            for r in requests:
                self.check_request(r)
        except SamplingInputError as e:
            return [1, 0], e
        hops = max((fanout_table(self.graph, r.num_neighbors).shape[0] for r in requests),
                   default=0)
        return [0, hops], None

    # -- one hop -------------------------------------------------------------------------
    def _kernel(self, rows, keys, req, fan, rep, hop, bounds=None, last=None):
        t0 = time.perf_counter()
        if self._cuda is not None:
            out = self._cuda(self.ex, rows, keys, req, fan, rep, self.seed, hop, bounds, last)
        else:
            out = typed_ops.sample_typed_neighbors(self.graph, rows, self.orig[rows], keys, req,
                                                   fan, rep, self.seed, hop, bounds=bounds,
                                                   last=last)
        self.t_kernel += time.perf_counter() - t0
        self.kernel_calls += 1
        self.kernel_nodes += int(rows.size)
        self.kernel_edges += int(out[1].size)
        return out

    def _hop(self, nodes, keys, req, fan, rep, hop, bounds=None, last=None):
        """One hop of every request (frontier ``nodes`` in new ids, each with its time bound
        when ``bounds`` is given): the typed kernel's four arrays in frontier order."""
        W, me = self.ex.world_size, self.rank
        if self.shared is not None:  # every part mapped here: one call, no exchange
            t0 = time.perf_counter()
            out = self.shared.hop(nodes, keys, req, fan, rep, self.seed, hop, bounds, last)
            self.t_kernel += time.perf_counter() - t0
            self.kernel_calls += 1
            self.kernel_nodes += int(nodes.size)
            self.kernel_edges += int(out[1].size)
            return out
        if W == 1:
            return self._kernel(nodes - self.lo, keys, req, fan, rep, hop, bounds, last)
        Q, R = fan.shape
        owner = np.searchsorted(self._inner, nodes, side="right")
        order = np.argsort(owner, kind="stable")  # by owner, request order within an owner
        per_dest = np.bincount(owner, minlength=W)
        dest_at = np.zeros(W + 1, np.int64)
        np.cumsum(per_dest, out=dest_at[1:])
        key_q = np.zeros(Q, np.int64)
        key_q[req] = keys  # every node of a request has its key
        # outbound: per destination, Q headers then the ids (and time bounds), int64 words
        blocks, sizes = [], np.zeros(W, np.int64)
        for d in range(W):
            if d == me:
                continue
            sel = order[dest_at[d]:dest_at[d + 1]]
            blk = pack_block(np.bincount(req[sel], minlength=Q), key_q, rep, last, fan,
                             nodes[sel], None if bounds is None else bounds[sel])
            blocks.append(blk)
            sizes[d] = blk.size
        send = np.concatenate(blocks) if blocks else np.zeros(0, np.int64)
        recv, rsizes = self.ex.exchange(torch.from_numpy(send), torch.from_numpy(sizes), "ids")
        recv, rsizes = recv.numpy(), rsizes.numpy()
        # one kernel call: own nodes first, then every received block in rank order
        mine = order[dest_at[me]:dest_at[me + 1]]
        rows, kk, qq, fans, reps, src_n = [nodes[mine] - self.lo], [keys[mine]], [req[mine]], \
            [fan], [rep], np.zeros(W, np.int64)
        lasts = [np.zeros(Q, np.uint8) if last is None else last]
        bnds = [None if bounds is None else bounds[mine]]
        q0, at = Q, 0
        for s in range(W):
            if rsizes[s] == 0:
                continue
            blk = recv[at:at + rsizes[s]]
            at += int(rsizes[s])
            ids, k_s, q_s, f_s, r_s, l_s, b_s = unpack_block(blk, R)
            rows.append(ids - self.lo)
            kk.append(k_s)
            qq.append(q_s + q0)
            fans.append(f_s)
            reps.append(r_s)
            lasts.append(l_s)
            bnds.append(b_s)
            src_n[s] = ids.size
            q0 += f_s.shape[0]
        c, nb, rel, eid = self._kernel(np.concatenate(rows), np.concatenate(kk),
                                       np.concatenate(qq), np.concatenate(fans),
                                       np.concatenate(reps), hop, *_bounds_of(rows, bnds, lasts))
        # back: per source, [counts, neighbors, relations, edge ids] of its nodes
        n_own = mine.size
        node_at = np.concatenate([[n_own], n_own + np.cumsum(src_n)])
        edge_at = np.concatenate([[0], np.cumsum(c)])
        out, osz = [], np.zeros(W, np.int64)
        for s in range(W):
            if src_n[s] == 0:
                continue
            a, b = int(node_at[s]), int(node_at[s] + src_n[s])
            ea, eb = int(edge_at[a]), int(edge_at[b])
            blk = np.concatenate([c[a:b], nb[ea:eb], rel[ea:eb], eid[ea:eb]])
            out.append(blk)
            osz[s] = blk.size
        payload = np.concatenate(out) if out else np.zeros(0, np.int64)
        back, bsizes = self.ex.exchange(torch.from_numpy(payload), torch.from_numpy(osz), "ids")
        back, bsizes = back.numpy(), bsizes.numpy()
        # reassemble in frontier order: own results, then each destination's, by position
        cnt_parts = [c[:n_own]]
        e_own = int(edge_at[n_own])
        edge_parts = [(nb[:e_own], rel[:e_own], eid[:e_own])]
        pos_parts = [mine]
        at = 0
        for d in range(W):
            if d == me or per_dest[d] == 0:
                continue
            blk = back[at:at + bsizes[d]]
            at += int(bsizes[d])
            n = int(per_dest[d])
            cd = blk[:n]
            e = int(cd.sum())
            cnt_parts.append(cd)
            edge_parts.append((blk[n:n + e], blk[n + e:n + 2 * e], blk[n + 2 * e:n + 3 * e]))
            pos_parts.append(order[dest_at[d]:dest_at[d + 1]])
        cnt_c = np.concatenate(cnt_parts)
        nb_c, rel_c, eid_c = (np.concatenate([p[k] for p in edge_parts]) for k in range(3))
        pos = np.concatenate(pos_parts)
        inv = np.empty_like(pos)
        inv[pos] = np.arange(pos.size)
        start_c = np.zeros(cnt_c.size, np.int64)
        np.cumsum(cnt_c[:-1], out=start_c[1:])
        counts = cnt_c[inv]
        take = _ranges(start_c[inv], counts)
        return counts, nb_c[take], rel_c[take], eid_c[take]

    def shared_stats(self) -> dict:
        """Use of the shared topology (the service's statistics ask), as ``DistSampler``'s."""
        if self.shared is None:
            return {"enabled": False, "parts": 0, "peer_nodes": 0, "peer_edges": 0,
                    "agreement": "gloo"}
        host = self.host_channel is not None
        return {**self.shared.stats(), "agreement": "host sockets" if host else "gloo"}

    # -- public --------------------------------------------------------------------------
    def sample(self, requests: Sequence[HeteroSampleRequest], features=None,
               agreed: tuple[SamplingInputError | None, Sequence[int]] | None = None
               ) -> list[HeteroMiniBatch]:
        """Collective: sample this rank's typed requests together with every rank's.

        ``agreed = (local error, flags reduced over ranks)`` skips this call's own agreement
        (:meth:`round_flags`); ``features`` is ignored (the sampler fetches rows per type when
        built with ``features=True``)."""
        W = self.ex.world_size
        if agreed is None:
            flags, err = self.round_flags(requests)
            if W > 1:
                flags = self.ex.agree_max(flags)
        else:
            err, flags = agreed
        if int(flags[0]):
            if W == 1 and err is not None:
                raise err
            raise_agreed(err, self.group)
        hops = int(flags[1])
        tp = self.tp
        internal = [r.internal_seeds(tp.node_types, tp.node_type_offset) for r in requests]
        sh = self.shared
        # collective without the shared topology; with it, read from the mapped parts
        seeds = self.ids.to_new_many(internal) if sh is None else [sh.to_new(a)
                                                                   for a in internal]
        tables = [fanout_table(self.graph, r.num_neighbors) for r in requests]
        trees, times = None, None
        if any(_grows_trees(r) for r in requests):
            got, trees, times = self._sample_trees(requests, seeds, tables, hops)
        else:
            got = multi_hop(self._hop, seeds, tables, requests, hops, len(tp.edge_types))
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

    def _sample_trees(self, requests, seeds, tables, hops):
        """The hops of a round with disjoint or temporal requests
        (:func:`~mnmg_sampler.hetero_sampler.sample_trees` over new ids, every node's time
        bound on the wire with it): ``(multi_hop's tuples, trees, seed times)``."""
        times = [seed_times(self.graph, r, s) if r.time_attr is not None else None
                 for r, s in zip(requests, seeds, strict=True)]
        disjoint = [_grows_trees(r) for r in requests]
        last = [r.temporal_strategy == "last" for r in requests]
        n = int(np.asarray(self.part.boundaries)[-1])
        got = sample_trees(self._hop, seeds, requests, tables, times, disjoint, last, n,
                           len(self.tp.edge_types), n_hops=hops)
        return [(v, nn, e) for _, v, nn, e in got], [g[0] for g in got], times

    # -- node data per type -----------------------------------------------------------------
    def _fetch_rows(self, new_ids: list[np.ndarray], nids: list[np.ndarray],
                    out: list[HeteroMiniBatch]) -> None:
        """Collective: ``x`` / ``y`` of every batch's nodes, one exchange per node type with
        node data (the same types on every rank, in the same order)."""
        tp = self.tp
        for name in self._data_types:
            t = tp.node_types.index(name)
            lo_t, hi_t = tp.node_type_offset[t], tp.node_type_offset[t + 1]
            sel = [np.flatnonzero((n >= lo_t) & (n < hi_t)) for n in nids]  # n_id[name] order
            ids = np.concatenate([a[s] for a, s in zip(new_ids, sel, strict=True)]) \
                if sel else np.zeros(0, np.int64)
            x_rows = self._rows_of(name, t, ids)
            at = 0
            for b, s in zip(out, sel, strict=True):
                for key, rows in x_rows.items():
                    getattr(b, key)[name] = torch.from_numpy(np.ascontiguousarray(
                        rows[at:at + s.size]))
                at += s.size

    def _local_rows(self, name: str, t: int, new_ids: np.ndarray) -> dict[str, np.ndarray]:
        row = new_ids - self.lo - self.tp.type_offset[t]
        return {k: np.asarray(src[name])[row] for k, src in (("x", self.tp.x), ("y", self.tp.y))
                if name in src}

    def _rows_of(self, name: str, t: int, ids: np.ndarray) -> dict[str, np.ndarray]:
        """Collective (unless the shared topology reads them in place): rows of ``ids`` (new
        ids of type ``name``), in order."""
        W = self.ex.world_size
        if self.shared is not None:
            return self.shared.rows(name, t, ids)
        if W == 1:
            return self._local_rows(name, t, ids)
        uniq, inv = np.unique(ids, return_inverse=True)
        u_owner = np.searchsorted(self._inner, uniq, side="right")
        remote = u_owner != self.rank
        ask = uniq[remote]  # sorted, so grouped by owner
        counts = np.bincount(u_owner[remote], minlength=W).astype(np.int64)
        recv, rcounts = self.ex.exchange(torch.from_numpy(ask), torch.from_numpy(counts),
                                         "features")
        served = self._local_rows(name, t, recv.numpy())
        local = self._local_rows(name, t, uniq[~remote])
        res = {}
        for k, src in served.items():  # the same keys on every rank: every part has the files
            width = src.dtype.itemsize * int(np.prod(src.shape[1:], dtype=np.int64))
            flat = np.ascontiguousarray(src).view(np.uint8).reshape(src.shape[0], width)
            back = self.ex.payload(torch.from_numpy(flat), rcounts.tolist(), counts.tolist(),
                                   "features").numpy()
            rows = np.empty((uniq.size, *src.shape[1:]), src.dtype)
            rows[~remote] = local[k]
            if back.size:
                rows[remote] = back.view(src.dtype).reshape(-1, *src.shape[1:])
            res[k] = rows[inv]
        return res


def _grows_trees(r: HeteroSampleRequest) -> bool:
    """Disjoint trees: asked for, or temporal (PyG's temporal sampling is disjoint)."""
    return r.time_attr is not None or bool(r.disjoint)


def _bounds_of(rows: list, bnds: list, lasts: list) -> tuple:
    """The kernel's ``(bounds, last)`` for the concatenated ``rows`` of a hop: ``(None, None)``
    when no block has time, else every node's bound (``TIME_MAX`` for untimed blocks)."""
    if all(b is None for b in bnds):
        return None, None
    full = [np.full(r.size, TIME_MAX, np.int64) if b is None else b
            for r, b in zip(rows, bnds, strict=True)]
    return np.concatenate(full), np.concatenate(lasts)


def typed_sampler_for(part, seed: int, group, *, kernel: str, features: bool, id_maps: str,
                      shared_topology, device=None) -> DistTypedSampler:
    """The service's sampler for a typed part."""
    return DistTypedSampler(part, seed, group, features=features, id_maps=id_maps,
                            kernel="cpu" if kernel == "auto" else kernel, device=device,
                            shared_topology=shared_topology)
