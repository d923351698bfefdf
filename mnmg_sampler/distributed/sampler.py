"""Distributed multi-hop sampling: frontier exchange around one kernel call per hop per rank.

Per hop, a rank sends the frontier nodes it does not own to their owners in one all-to-all;
**one** kernel call per rank serves its own nodes and every node received, and the replies come
back in one more all-to-all (sized by a bound both sides compute when no fanout is -1). With the
shared topology (:mod:`.shared_topology`, :mod:`.fit`) a rank samples every hop itself and a
round is its agreement alone. Calls are collective: every rank calls :meth:`DistSampler.sample`
equally often, with any number of requests, even none. A homogeneous part is the one-type,
one-relation case of a typed part: one wire, one code path (docs/architecture.md#wire-format).

Requests and minibatches use **original** ids; the RNG is keyed on them and neighbor lists keep
canonical order, so results are bit-identical to the single-process sampler (typed, temporal and
disjoint included) for any world size and partitioning. No rank holds a global id map
(:mod:`.id_maps`; docs/architecture.md#ids-original-outside-relabelled-inside).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence

import numpy as np
import torch
import torch.distributed as dist

from ..errors import ConfigError, SamplingInputError
from ..graph.partition_io import part_graph
from ..ops import typed as typed_ops
from ..ops import wire
from ..sampling.batch import HeteroMiniBatch, MiniBatch
from ..sampling.sampler import (
    HopSegments,
    MultiHopSampler,
    SampleRequest,
    assemble_batch,
    check_new_seeds,
    check_seed,
    fanout_table,
    multi_hop,
    run_cpu_kernel,
    sample_trees,
)
from ..sampling.temporal import (
    check_request_time,
    check_tree_ids,
    mark_trees,
    num_seeds,
    seed_times,
)
from ..system.host_limits import check_allocation
from ..system.host_malloc import tune_host_malloc
from .collective import Exchanger, agree, all_gather_1d, peer_errors, raise_agreed
from .consistency import check_same_partitioning
from .cuda_hop import CudaHop
from .fit import default_budget
from .host_channel import open_host_channel
from .host_groups import HostGroup
from .id_maps import IdMaps, wire_dtype
from .shared_topology import place, why_not_shared

_I64 = np.dtype(np.int64)
_EMPTY = np.empty(0, np.int64)


class DistSampler:
    """Collective multi-hop sampler over a partitioned graph, homogeneous or typed.

    Args:
        part: this rank's :class:`~mnmg_sampler.graph.partition_io.Partition`.
        seed: the job's sampling seed (the RNG's first counter).
        group: the process group to exchange over (the sampler's own group in the service).
        kernel: ``cpu`` or ``cuda`` (numba.cuda; CSR on ``device``).
        id_maps: ``auto``, ``sharded`` or ``replicated`` (:mod:`.id_maps`).
        shared_topology: ``True``, ``False`` or ``"auto"`` (exactly when it can), the same on
            every rank: ranks on one host sample every hop themselves (:mod:`.shared_topology`).
            Results do not change.
        host_memory: bytes each host gives to other hosts' data, the smallest of its ranks'
            (:mod:`.fit`: their topology first, then their feature rows); ``None``: a share
            of the memory the host can see; 0: nothing (their nodes go over the wire).
    """

    def __init__(self, part, seed: int = 0, group: dist.ProcessGroup | None = None,
                 kernel: str = "cpu", device: torch.device | None = None,
                 id_maps: str = "auto", shared_topology: bool | str = "auto",
                 host_memory: int | None = None) -> None:
        typed = self.tp = getattr(part, "typed", None)
        self._typed = typed is not None
        self.graph = part_graph(part) if self._typed else None  # the typed kernel's view
        tune_host_malloc()  # a round's buffers are reused, not faulted in again (host_malloc)
        if shared_topology is True and kernel == "cuda":  # before the CUDA set-up
            raise why_not_shared(part, kernel)
        self.part = part
        # plain ndarray views of the memory-mapped arrays (no copy; cheaper to index)
        self._csr = tuple(np.asarray(a) for a in (part.indptr, part.indices, part.edge_ids,
                                                  part.orig_ids))
        self.kernel = kernel
        self._weights = None if getattr(part, "weights", None) is None else np.asarray(
            part.weights)  # weighted sampling: one float32 per local CSR entry
        if kernel == "cuda":
            self._cuda = CudaHop(self._csr, device, self._weights, graph=self.graph)
        elif kernel != "cpu":
            raise SamplingInputError(f"unknown kernel {kernel!r}", "no hop can be sampled",
                                     "use kernel='cpu' or kernel='cuda'")
        self.seed = check_seed(seed)
        self.group = group
        self.ex = Exchanger(group)
        check_same_partitioning(part, group)  # collective: no rank samples a mixed partitioning
        self.rank = self.ex.rank
        bounds = np.asarray(part.boundaries, np.int64)
        self._inner = np.ascontiguousarray(bounds[1:-1])  # owner(v) = #inner bounds <= v
        self.lo = int(bounds[part.rank])
        # relations: a neighbor word is `id x R + relation` (R = 1: the id); the types'
        # relations (rel_off[t]:rel_off[t + 1] end at type t) bound a node's neighbors
        self._R = len(part.layout.edge_types)
        self._rel_off = np.ascontiguousarray(part.layout.rel_offset, np.int64)
        self.wire = wire_dtype(part.num_nodes * self._R, part.num_edges)
        self._k = _I64.itemsize // self.wire.itemsize  # wire words per int64
        self._wire0 = np.empty(0, self.wire)  # tells the packers the word type
        self.ids = IdMaps(part, self.ex, id_maps)  # collective
        self.identity_ids = self.ids.identity
        # collective: the parts mapped here (every part, the host's, or none; .fit)
        mapped, self.placement = place(part, self.ex, shared_topology, kernel,
                                       default_budget() if host_memory is None else host_memory)
        one_host = self.placement is None or len(self.placement.hosts) == 1
        self.shared = mapped if mapped is not None and (
            self.placement is None or self.placement.hops_local) else None
        self.host = None if mapped is None or one_host else HostGroup(
            mapped, self.placement.of(self.ex.rank).ranks)
        # with every rank on one host, rounds agree over Unix sockets, not gloo (collective)
        self.host_channel = open_host_channel(self.ex) if self.shared is not None \
            and one_host else None
        self.ex.host_channel = self.host_channel
        self.sampler = MultiHopSampler(self._hop, int(part.num_nodes))
        self._local_hops: tuple[int, ...] = ()  # hops every rank agreed are local this round
        # the graph's largest degree bounds a reply without replacement (agreed once: a
        # requester sizes the replies of every owner with it)
        indptr = self._csr[0]
        deg = int(np.diff(indptr).max()) if indptr.size > 1 else 0
        if self.ex.world_size > 1:
            with peer_errors("agreeing on the graph's largest degree"):
                deg = self.ex.agree_max([deg])[0]
        self._deg_cap = deg
        # this round: every fanout >= 0, so every block has a bound both sides compute and no
        # exchange sends its sizes first (see _hop_wire)
        self._bounded = False
        self._trees = False  # this round: a request grows disjoint trees (nodes repeat)
        self._parts = np.diff(bounds)  # nodes per part: no block to a part holds more per request
        self._lens = np.zeros(0, np.int64)  # this round: hops of each of this rank's requests
        self._hop_full: HopSegments | None = None  # the hop's whole frontier
        self._next_send = self._next_recv = np.zeros(0, np.int64)  # next block's bound per rank
        self._carry = np.zeros(0, np.int64)  # lookup bound of requests that ended, per owner
        self._last_hop = -1  # this round: its last hop
        self._want_orig = False  # this round: owners return their frontier nodes' original ids
        self._front_orig: dict[int, np.ndarray] = {}  # hop -> original ids of its frontier
        self.kernel_calls = 0
        self.kernel_nodes = 0
        self.kernel_edges = 0
        self.t_kernel = 0.0
        self._edge_ids = True  # typed: this round, a request asks for edge ids
        if self._typed:  # collective with node time, unless every rank mapped every part
            self._attach_time(part, None if self.shared is None else self.shared.node_time)
            if mapped is not None and mapped.node_time is None:  # host groups: as gathered
                mapped.node_time = self.graph.node_time

    def _attach_time(self, part, node_time: np.ndarray | None) -> None:
        """Collective when the part has node time and ``node_time`` is ``None``: set
        ``graph.edge_time`` (per local entry), ``graph.node_time`` (every node, by new id: the
        given one, or gathered, 8 bytes per node) and ``graph.time_attr`` from ``part``."""
        tp, graph = part.typed, self.graph
        graph.time_attr = tp.time_attr
        graph.edge_time = None if tp.edge_time is None else np.asarray(tp.edge_time)
        if tp.node_time is None:  # the same on every rank: every part of a timed graph has it
            return
        if node_time is not None:
            graph.node_time = node_time
            return
        n = int(np.asarray(part.boundaries)[-1])
        own = np.ascontiguousarray(tp.node_time, np.int64)
        if self.ex.world_size == 1:
            graph.node_time = own
            return
        agree(lambda: check_allocation(f"the node time of all {n:,} nodes on every rank",
                                       8 * 2 * n, "use a machine with more memory, or edge "
                                       "time instead of node time"), self.group,
              "checking memory for the node time")
        graph.node_time = np.ascontiguousarray(np.concatenate(
            [t.numpy() for t in all_gather_1d(torch.from_numpy(np.array(own)), self.group)]))

    def node_time_of_types(self, types) -> dict[str, np.ndarray]:
        """Collective on the default group (not the service's, whose rounds may be running):
        the node time of each type in ``types`` by per-type id, for a temporal link loader's
        negatives (one gather of every part's internal ids, 8 bytes per node)."""
        n = int(self.graph.node_time.shape[0])
        agree(lambda: check_allocation(f"the node time of all {n:,} nodes by internal id",
                                       8 * 2 * n, "use a machine with more memory, or no "
                                       "negatives on a graph with node time"), None,
              "checking memory for the negatives' node times")
        orig = np.concatenate([t.numpy() for t in all_gather_1d(
            torch.from_numpy(np.ascontiguousarray(self.part.orig_ids, np.int64)), None)])
        by_internal = np.empty(n, np.int64)
        by_internal[orig] = self.graph.node_time
        off, names = np.asarray(self.tp.node_type_offset, np.int64), self.tp.node_types
        return {name: by_internal[off[names.index(name)]:off[names.index(name) + 1]].copy()
                for name in types}

    def on_group(self, group: dist.ProcessGroup) -> DistSampler:
        """The same sampler (arrays and id maps shared, no collective) over another group of
        the same ranks, for a service's second round in flight, whose collectives must not
        interleave with this one's; counters start at zero. Wire path (host groups included)
        on the CPU kernel only: :class:`ConfigError` with every part mapped or on CUDA."""
        if self.host_channel is not None or self.kernel != "cpu":
            raise ConfigError("a second round in flight needs ranks on several hosts (or the "
                              "wire path) on the CPU kernel", "no second sampler is made",
                              "turn off the shared topology")
        other = copy.copy(self)
        if self.host is not None:  # the mapped parts are shared; `last` is this round's
            other.host = copy.copy(self.host)
            other.host.last = None
        other.group = group
        other.ex = Exchanger(group)
        other.ex.far = self.ex.far  # the host layout, for the bytes that cross hosts
        other.ids = self.ids.with_exchanger(other.ex)
        other.sampler = MultiHopSampler(other._hop, int(self.part.num_nodes))
        other._front_orig = {}
        other.kernel_calls = other.kernel_nodes = other.kernel_edges = 0
        other.t_kernel = 0.0
        return other

    # -- one hop ------------------------------------------------------------------------
    def owner(self, nodes: np.ndarray) -> np.ndarray:
        """Owner rank of each new id (int64)."""
        return np.searchsorted(self._inner, nodes, side="right")

    def owns(self, orig_ids: np.ndarray) -> np.ndarray:
        """bool per original id: is it this rank's node (no collective)."""
        return self.ids.owns(orig_ids)

    def owner_of(self, orig_ids: np.ndarray) -> np.ndarray:
        """Collective (except for ``range``): owner rank of each *original* node id. The
        loader's seed split by owner needs no collective: it asks :meth:`owns`."""
        return self.ids.owner_of(orig_ids)

    def _kernel(self, rows, keys, hop, fanouts, replace, edge_ids, rng_nodes=None):
        """One kernel call on this part's CSR; ``rng_nodes``: the rows' original ids when known
        (default: gathered)."""
        t0 = time.perf_counter()
        indptr, indices, eids, orig = self._csr
        if self.kernel == "cuda":
            c, nb, e = self._cuda(self.ex, rows, keys, self.seed, hop, fanouts, replace,
                                  edge_ids)
        elif self._weights is not None:
            from ..ops.weighted import sample_neighbors_weighted

            c, nb, e = sample_neighbors_weighted(
                indptr, indices, eids, self._weights, rows,
                orig[rows] if rng_nodes is None else rng_nodes, keys, self.seed, hop, fanouts,
                replace, with_eids=edge_ids)
            e = e if edge_ids else None
        else:
            c, nb, e = run_cpu_kernel(indptr, indices, eids, rows,
                                      orig[rows] if rng_nodes is None else rng_nodes, keys,
                                      self.seed, hop, fanouts, replace, edge_ids)
        self._counted(t0, rows.size, nb.size)
        return c, nb, e

    def _counted(self, t0: float, nodes: int, edges: int) -> None:
        """Statistics of one kernel call that started at ``t0``."""
        self.t_kernel += time.perf_counter() - t0
        self.kernel_calls += 1
        self.kernel_nodes += int(nodes)
        self.kernel_edges += int(edges)

    def _hop(self, h: HopSegments):
        self._hop_full = h
        if self.shared is not None:  # every part mapped here: no exchange at all
            t0 = time.perf_counter()
            c, nb, e = self.shared.hop(h, self.seed)
            self._counted(t0, h.nodes.size, nb.size)
            return c, nb, e
        if self.host is not None and h.hop not in self._local_hops:  # host groups
            out = self.host.hop(h, self._hop_wire, self.seed)
            if self.host.last is not None and h.hop in self._front_orig:
                self._front_orig[h.hop] = self.host.frontier_orig(self._front_orig[h.hop])
            return out
        return self._hop_wire(h)

    def _next_bounds(self, hop: int, last: int) -> np.ndarray:
        """Words this rank may send each owner in the round's next exchange (every fanout
        >= 0): a request's next frontier holds at most ``frontier x fanout`` nodes (fanout
        capped by the largest degree without replacement), at most a part's nodes per owner.
        After hop ``last`` the next exchange is the lookup of every request's last new nodes,
        which the requests that ended earlier add to (``_carry``)."""
        h = self._hop_full
        grow = wire.request_bounds(_table(h.fanouts), h.replace.astype(np.int64),
                                   self._deg_cap, self._rel_off) * h.sizes
        lens = self._lens[self._lens > hop]  # the requests of this hop, in order
        goes_on = lens > hop + 1
        # a part's nodes bound a request's frontier per owner, unless trees repeat nodes
        P = self._parts[:, None] if not self._trees else np.full((self._parts.size, 1),
                                                                 np.iinfo(np.int64).max)
        self._carry += np.minimum(grow[~goes_on][None, :], P).sum(1)
        if hop < last:
            per_id = 1 + (self._k if h.bounds is not None else 0)  # an id (and its time)
            out = wire.header_words(int(goes_on.sum()), self._k, self._R) + per_id * np.minimum(
                grow[goes_on][None, :], P).sum(1)
        else:
            out = 1 + self._carry
        out[self.rank] = 0
        return out.astype(np.int64)

    def _hop_wire(self, h: HopSegments):
        W, me, k = self.ex.world_size, self.rank, self._k
        nodes = h.nodes
        if W == 1 or h.hop in self._local_hops:  # all local (agreed): no exchange at all
            if self._bounded and W > 1:  # requests that end here still add to the lookup
                self._next_bounds(h.hop, self._last_hop)
            if self._typed:  # the kernel takes per-request fanouts and each node's request
                req = np.repeat(np.arange(h.sizes.size, dtype=np.int64), h.sizes)
                return self._typed_kernel(nodes - self.lo, np.repeat(h.keys, h.sizes), req,
                                          h.fanouts, h.replace, h.hop, h.bounds, h.last,
                                          h.edge_ids)
            keys_n, fan_n, rep_n = h.per_node()
            # with a range partitioning a node's id is its original id: no orig_ids gather
            return self._kernel(nodes - self.lo, keys_n, h.hop, fan_n, rep_n, h.edge_ids,
                                nodes if self.identity_ids else None)
        want_o = self._want_orig and h.hop > 0  # hop 1's frontier is the seeds: known
        timed = h.bounds is not None
        flags = (h.replace.astype(np.int64) | (wire.EDGE_IDS if h.edge_ids else 0)
                 | (wire.ORIG_IDS if want_o else 0) | (wire.TIMED if timed else 0))
        if h.last is not None:
            flags |= h.last.astype(np.int64) * wire.LAST
        fan2, bounds = _table(h.fanouts), (h.bounds if timed else _EMPTY)
        bounded = self._bounded
        nxt = self._next_bounds(h.hop, self._last_hop) if bounded else np.zeros(W, np.int64)
        # outbound: per destination, one header per request, then the wire ids of its nodes;
        # bounded: every destination gets a block (its header carries the next bound)
        buf, sizes, ocount, where, mine = wire.pack_requests(
            nodes, h.sizes, h.keys, fan2, flags, self._inner, me, self._wire0, k, nxt,
            bounded, bounds)
        if bounded:  # one all-to-all: the blocks say their sizes, the receive takes the bound
            rsizes = self._next_recv
            recv = self.ex.bounded(torch.from_numpy(buf), sizes, self._next_send, rsizes, "ids")
        else:
            recv, rs = self.ex.exchange(torch.from_numpy(buf), torch.from_numpy(sizes), "ids")
            rsizes = rs.numpy()
        # one kernel call: own nodes first, then every received block in rank order
        (rows, keys, fans, reps, req, fan_t, flag_t, node_bound, tb, src_nodes, src_flags,
         src_next) = wire.gather_work(nodes, h.sizes, h.keys, fan2, flags, mine, recv.numpy(),
                                      rsizes, self.lo, k, bounds, self._deg_cap, self._rel_off)
        if bounded:
            self._next_send, self._next_recv = nxt, src_next
        want_e = h.edge_ids or bool((src_flags & wire.EDGE_IDS).any())
        R = self._R
        if self._typed:  # the relation rides in the neighbor word: id x R + relation
            c, nb, rel, e = self._typed_kernel(
                rows, keys, req, fan_t, (flag_t & wire.REPLACE).astype(np.uint8), h.hop,
                tb if tb.size else None, ((flag_t & wire.LAST) != 0).astype(np.uint8), want_e)
            if R > 1:
                nb = nb * R + rel
        else:
            c, nb, e = self._kernel(rows, keys, h.hop, fans, reps, want_e)
            e = e if e is not None else _EMPTY
        orig = self._csr[3]
        out, rsz, rbound = wire.pack_replies(c, nb, e, rows, orig, req, node_bound, mine.size,
                                             src_nodes, src_flags, bounded, self._wire0, k)
        if bounded:  # no size exchange: both sides know each reply's bound
            bsizes = wire.reply_bounds(h.sizes, node_bound[:h.sizes.size], flags, where,
                                       ocount, me, k)
            back = self.ex.bounded(torch.from_numpy(out), rsz, rbound, bsizes, "ids").numpy()
        else:
            t, ts = self.ex.exchange(torch.from_numpy(out), torch.from_numpy(rsz), "ids")
            back, bsizes = t.numpy(), ts.numpy()
        if mine.size == nodes.size:  # nothing was remote: own results are in frontier order
            el = int(nb.size if mine.size == c.size else c[:mine.size].sum())
            if want_o:
                self._front_orig[h.hop] = orig[rows[:mine.size]]
            counts, nbr, eid = c[:mine.size], nb[:el], (e[:el] if h.edge_ids else None)
        else:
            counts, nbr, eid, origs = wire.unpack_replies(
                back, bsizes, ocount, me, c, nb, e, rows, orig, where, h.edge_ids, want_o, k)
            if want_o:
                self._front_orig[h.hop] = origs
            eid = eid if h.edge_ids else None
        if not self._typed:
            return counts, nbr, eid
        nbr, rel = np.divmod(nbr, R) if R > 1 else (nbr, np.zeros(nbr.size, np.int64))
        return counts, nbr, rel, eid

    def shared_stats(self) -> dict:
        """Use of the shared topology: frontier nodes of other ranks sampled here, their
        edges, and what a round's agreement goes over (``enabled`` False without it; with host
        groups, ``parts`` and ``host_ranks`` are the host's)."""
        agreement = "gloo" if self.host_channel is None else "host sockets"
        if self.host is not None or self.shared is not None:  # host groups: the host's parts
            return {**(self.host or self.shared).stats(), "agreement": agreement}
        return {"enabled": False, "parts": 0, "peer_nodes": 0, "peer_edges": 0,
                "agreement": agreement}

    # -- public ---------------------------------------------------------------------------
    def round_flags(self, requests: Sequence[SampleRequest]
                    ) -> tuple[list[int], SamplingInputError | None]:
        """Local half of a round's agreement: ``(flags, this rank's input error or None)``.

        ``flags = [error, deepest request, any seed owned by another rank, any fanout -1, any
        seed that needs the lookup, requests, seeds, requests of 2 hops or more, a bound of
        their hop-2 frontier, any time, any disjoint trees]``, reduced with ``MAX`` over ranks;
        the service passes ``(error, reduced flags)`` to :meth:`sample` as ``agreed``, so a
        round has one agreement. No remote seed anywhere: hop 1 exchanges nothing; no fanout
        ``-1``: no size exchange; every remote seed translated: no seed lookup.
        """
        try:
            for r in requests:
                self.check_request(r)
        except SamplingInputError as e:
            return [1, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0], e
        if self._typed:
            return self._typed_flags(requests), None
        hops = max((len(r.fanouts) for r in requests), default=0)
        lo, hi = self.lo, self.ids.hi
        remote = lookup = False
        for r in requests:
            if r.new_seeds is not None:  # translated: remote when outside this rank's range
                remote = remote or bool(((r.new_seeds < lo) | (r.new_seeds >= hi)).any())
            elif not lookup and not bool(self.ids.owns(r.seeds).all()):
                remote = lookup = True
        unbounded = any(f < 0 for r in requests for f in r.fanouts)
        cap, n = self._deg_cap, int(self.part.num_nodes)
        on = [r for r in requests if len(r.fanouts) > 0]
        two = [r for r in on if len(r.fanouts) > 1]
        grow = 0 if unbounded else sum(
            min(r.seeds.size * (r.fanouts[0] if r.replace or r.fanouts[0] <= cap else cap), n)
            for r in two)
        return [0, hops, int(remote), int(unbounded), int(lookup), len(on),
                sum(r.seeds.size for r in on), len(two), grow, 0, 0], None

    def check_request(self, r: SampleRequest,
                      consequence: str = "no neighbors can be sampled for it; every rank stops "
                                         "this round") -> None:
        """:class:`SamplingInputError` unless ``r``'s seeds are in range and its translated
        seeds (when given) are one per seed, in range, and, where this rank owns them, the new
        ids of its seeds. A new id another rank owns is trusted (checking it would be the
        lookup it saves); a wrong one gives another node's neighbors, never an out-of-range
        read. On a typed part: a request whose types, per-type ids and fanouts the graph has."""
        if self._typed:
            return self._check_typed(r, consequence)
        n = int(self.part.num_nodes)
        _in_range(r.seeds, n, "seed id", f"a graph with {n} nodes", consequence,
                  f"pass original node ids in [0, {n})")
        if r.new_seeds is None:
            return
        check_new_seeds(r)
        new = np.asarray(r.new_seeds)
        _in_range(new, n, "translated seed id", f"a graph with {n} nodes", consequence,
                  "pass new_seeds=None (the sampler translates the seeds) or the seeds' new ids "
                  "from the same partitioning")
        if self.identity_ids:
            ok = bool(np.array_equal(new, r.seeds))
        else:
            mine = np.flatnonzero((new >= self.lo) & (new < self.ids.hi))
            ok = bool(np.array_equal(self._csr[3][new[mine] - self.lo], r.seeds[mine]))
        if not ok:
            raise SamplingInputError(
                "a request's translated seed ids do not name its seeds in this partitioning",
                consequence, "pass new_seeds=None, or translate the seeds with the partitioning "
                             "the sampler loaded (as DistNeighborLoader does)")

    def _to_new(self, seeds: Sequence[np.ndarray], lookup: bool,
                given: Sequence | None = None) -> list[np.ndarray]:
        """New ids of every request's seeds: ``given`` (a loader's translation) where not
        ``None``, else from the mapped parts, locally, or (``lookup``: collective) in one
        lookup."""
        new = list(given or [None] * len(seeds))
        todo = [i for i, g in enumerate(new) if g is None]
        if self.shared is not None:  # every part's original ids are mapped here
            got = [self.shared.to_new(seeds[i]) for i in todo]
        elif lookup and self.ex.world_size > 1:
            got = self.ids.to_new_many([seeds[i] for i in todo])
        else:
            got = [self.ids.to_new_local(seeds[i]) for i in todo]
        for i, g in zip(todo, got, strict=True):
            new[i] = g
        return new

    def _to_orig(self, new_ids: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Collective unless the parts are mapped here: original ids of arrays of new ids."""
        return self.ids.to_orig_many(new_ids) if self.shared is None else [
            self.shared.to_orig(a) for a in new_ids]

    def sample(self, requests: Sequence[SampleRequest], features=None,
               agreed: tuple[SamplingInputError | None, Sequence[int]] | None = None
               ) -> list[MiniBatch]:
        """Collective: :meth:`sample_original`, with ``n_id`` in the input's own ids when the
        graph was renumbered (``part.node_ids``, a memory-mapped file, indexed per batch). On a
        typed part, requests are :class:`~mnmg_sampler.sampling.sampler.HeteroSampleRequest`
        and ``features`` gives ``x``/``y`` of every node type."""
        if self._typed:
            return self._sample_typed(requests, features, agreed)
        out = self.sample_original(requests, features, agreed)
        if getattr(self.part, "node_ids", None) is not None:  # a renumbered graph's own ids
            for b in out:
                b.n_id = torch.from_numpy(self.part.input_ids(b.n_id.numpy()))
        return out

    def sample_original(self, requests: Sequence[SampleRequest], features=None,
                        agreed: tuple[SamplingInputError | None, Sequence[int]] | None = None
                        ) -> list[MiniBatch]:
        """Collective: sample this rank's requests (original ids) together with every rank's.

        With a :class:`~mnmg_sampler.distributed.features.DistFeatureStore`, ``x`` and ``y``
        come in the same call, with the nodes' original ids beside the rows; without one, the
        owners return them in the hop replies and the last hop's nodes take one lookup.
        ``agreed = (local error, flags reduced over ranks)`` skips this call's own agreement
        (see :meth:`round_flags`).
        """
        W = self.ex.world_size
        flags = self._agreed(requests, agreed)
        hops, lookup = int(flags[1]), int(flags[4])
        self._bound_round(flags, [len(r.fanouts) for r in requests], False)
        carried = features is not None and features.enabled and features.carries_orig
        # the frontier's original ids ride in the replies when they would otherwise need a
        # lookup collective (sharded maps) and no feature row carries them
        self._want_orig = (W > 1 and not carried and not self.identity_ids
                           and self.ids.n2o is None and self.shared is None)
        self._front_orig = {}
        new = self._to_new([r.seeds for r in requests], bool(lookup),
                           [r.new_seeds for r in requests])
        internal = [SampleRequest(n, r.fanouts, r.key, r.replace, r.input_id, r.edge_ids)
                    for n, r in zip(new, requests, strict=True)]
        try:
            out = self.sampler.sample_checked(internal, num_hops=int(hops))
        finally:
            front, self._front_orig = self._front_orig, {}
        n_ids = [b.n_id.numpy() for b in out]
        if features is not None and features.enabled:
            for b, (x, y, orig) in zip(out, features.fetch(n_ids), strict=True):
                b.x, b.y = x, y
                if carried:  # the owners returned each row's original id with it
                    b.n_id = torch.from_numpy(orig)
            if carried:
                return out
        if not self._want_orig:  # local translation (or none): every node but the seeds
            todo = [a[b.batch_size:] for a, b in zip(n_ids, out, strict=True)]
            for b, r, orig in zip(out, requests, self._to_orig(todo), strict=True):
                b.n_id = torch.from_numpy(np.concatenate([r.seeds, orig]))
            return out
        for b, orig in zip(out, self._orig_ids(requests, out, n_ids, front), strict=True):
            b.n_id = torch.from_numpy(orig)
        return out

    # -- typed parts ----------------------------------------------------------------------
    def _check_typed(self, r, consequence: str = "no neighbors can be sampled for it; every "
                                                  "rank stops this round") -> None:
        """:meth:`check_request` of a typed part: ``r`` must be a typed request it can serve."""
        if r.input_type is None:
            raise SamplingInputError(
                "a request without input_type was sent to the sampler of a typed graph",
                consequence, "send SampleRequest(seeds, num_neighbors, key, input_type=...) "
                "(or use DistNeighborLoader(service, input_nodes=(type, ids), ...))")
        for name, seeds in r.seed_groups():  # input_type's, then a link batch's other type
            if name not in self.tp.node_types:
                raise SamplingInputError(f"node type {name!r} is not in the graph",
                                         consequence, f"use one of {list(self.tp.node_types)}")
            t = self.tp.node_types.index(name)
            n = int(self.tp.node_type_offset[t + 1] - self.tp.node_type_offset[t])
            _in_range(seeds, n, f"{name} id", f"{n} {name} nodes", consequence,
                      f"pass {name} ids in [0, {n})")
        fanout_table(self.graph, r.num_neighbors)
        if check_request_time(self.graph, r):  # disjoint: tree ids must fit int64
            check_tree_ids(num_seeds(r), int(np.asarray(self.part.boundaries)[-1]))

    def _typed_flags(self, requests: Sequence) -> list[int]:
        """:meth:`round_flags` of a typed part's checked requests (seeds in internal ids, none
        translated by a loader: a seed of another rank is one to look up)."""
        tp, n = self.tp, int(self.part.num_nodes)
        remote = any(not self.ids.owns(r.internal_seeds(tp.node_types, tp.node_type_offset))
                     .all() for r in requests)
        tables = [fanout_table(self.graph, r.num_neighbors) for r in requests]
        unbounded = any((t < 0).any() for t in tables)
        on = [(r, t) for r, t in zip(requests, tables, strict=True) if t.shape[0] > 0]
        grow = 0
        for r, t in on if not unbounded else ():
            if t.shape[0] > 1:  # hop 2's frontier: trees repeat nodes, else at most every node
                b = num_seeds(r) * int(wire.request_bounds(t[:1], np.array([int(r.replace)]),
                                                           self._deg_cap, self._rel_off)[0])
                grow += b if _grows_trees(r) else min(b, n)
        return [0, max((t.shape[0] for t in tables), default=0), int(remote), int(unbounded),
                int(remote), len(on), sum(num_seeds(r) for r, _ in on),
                sum(t.shape[0] > 1 for _, t in on), grow,
                int(any(r.time_attr is not None for r, _ in on)),
                int(any(_grows_trees(r) for r, _ in on))]

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

    def _mapped_hop(self, mapped, nodes, keys, req, fan, rep, hop, bounds, last):
        """One typed kernel call over the parts ``mapped`` here (:class:`~.SharedTopology`)."""
        t0 = time.perf_counter()
        out = mapped.typed_hop(nodes, keys, req, fan, rep, self.seed, hop, bounds, last)
        self._counted(t0, nodes.size, out[1].size)
        return out

    def _typed_hop(self, nodes, keys, req, fan, rep, hop, bounds=None, last=None):
        """One hop of every request (``nodes`` in new ids, ``req`` ascending, ``bounds``: each
        node's time bound): the typed kernel's four arrays in frontier order."""
        if self.shared is not None:  # every part mapped here: one call, no exchange
            return self._mapped_hop(self.shared, nodes, keys, req, fan, rep, hop, bounds, last)
        Q = fan.shape[0]
        sizes = np.bincount(req, minlength=Q).astype(np.int64)
        key_q = np.zeros(Q, np.int64)
        key_q[req] = keys  # every node of a request has its key
        self._hop_full = h = HopSegments(nodes, sizes, key_q, fan, rep, hop, self._edge_ids,
                                         bounds, last)
        if self.host is not None and hop not in self._local_hops:  # host groups: the host's
            c, nb, rel, e = self.host.typed_hop(  # nodes here, the others' on the wire
                h, self._hop_wire, lambda n, k, r, b: self._mapped_hop(
                    self.host.shared, n, k, r, fan, rep, hop, b, last), self._R)
        else:
            c, nb, rel, e = self._hop_wire(h)
        if e is None or e.size != nb.size:  # no request of the round asked for them
            e = np.zeros(nb.size, np.int64)
        return c, nb, rel, e

    def _sample_typed(self, requests: Sequence[SampleRequest], features, agreed
                      ) -> list[HeteroMiniBatch]:
        """:meth:`sample` of a typed part: ``x``/``y`` of every type from ``features``."""
        flags = self._agreed(requests, agreed)
        hops = int(flags[1])
        tp = self.tp
        seeds = self._to_new([r.internal_seeds(tp.node_types, tp.node_type_offset)
                              for r in requests], bool(int(flags[4])))
        tables = [fanout_table(self.graph, r.num_neighbors) for r in requests]
        self._bound_round(flags, [t.shape[0] for t in tables],
                          any(_grows_trees(r) for r in requests))
        self._edge_ids = any(r.edge_ids for r in requests)
        trees = times = None
        if self._trees:  # disjoint or temporal requests: trees over new ids, time bounds on
            times = [seed_times(self.graph, r, s) if r.time_attr is not None else None  # wire
                     for r, s in zip(requests, seeds, strict=True)]
            got = sample_trees(self._typed_hop, seeds, requests, tables, times,
                               [_grows_trees(r) for r in requests],
                               [r.temporal_strategy == "last" for r in requests],
                               int(self.part.num_nodes), len(tp.edge_types), n_hops=hops)
            trees, got = [g[0] for g in got], [g[1:] for g in got]
        else:
            got = multi_hop(self._typed_hop, seeds, tables, requests, hops,
                            len(tp.edge_types))
        nids = self._to_orig([g[0] for g in got])
        out = [assemble_batch(tp.node_types, tp.edge_types, tp.node_type_offset, r, nid, n, e)
               for r, nid, (_, n, e) in zip(requests, nids, got, strict=True)]
        if trees is not None:
            for b, r, tree, nid, t in zip(out, requests, trees, nids, times, strict=True):
                if _grows_trees(r):
                    mark_trees(b, tree, nid, tp.node_types, tp.node_type_offset, t)
        if features is not None and features.enabled:
            off = tp.node_type_offset
            rows = features.fetch([g[0] for g in got], [
                np.searchsorted(off, n, side="right") - 1 for n in nids])
            for b, per in zip(out, rows, strict=True):
                for name, (x, y, _) in per.items():
                    for key, v in (("x", x), ("y", y)):
                        if v is not None:
                            getattr(b, key)[name] = v
        return out

    def _bound_round(self, flags, lens: list[int], trees: bool) -> None:
        """This round's wire state from its agreed ``flags`` (``lens``: hops of each of this
        rank's requests; ``trees``: one grows disjoint trees): without a remote seed hop 1 is
        local; with every fanout ``>= 0`` each block is bounded and tells the bound of the
        next (:meth:`_next_bounds`)."""
        W = self.ex.world_size
        hops, remote, unbounded = (int(v) for v in flags[1:4])
        self._trees = trees
        self._local_hops = () if remote else (0,)
        self._bounded = not unbounded and W > 1 and self.shared is None and hops > 0
        self._lens = np.asarray(lens, np.int64)
        self._last_hop = hops - 1
        self._carry = np.zeros(W, np.int64)
        if self._bounded:  # an id (and its time bound) per node
            S, N = (int(v) for v in (flags[5:7] if remote else flags[7:9]))
            self._first_bounds(S, N, 1 + (self._k if int(flags[9]) else 0), bool(int(flags[10])))

    def _first_bounds(self, S: int, N: int, per_id: int = 1, trees: bool = False) -> None:
        """The bounds of the round's first exchanged blocks, from the agreement: at most
        ``S`` requests of ``N`` nodes (and a part's nodes per request, unless ``trees`` repeat
        nodes) per owner, ``per_id`` words each."""
        top = wire.header_words(S, self._k, self._R) + per_id * (
            np.full(self._parts.size, N, np.int64) if trees else np.minimum(N, S * self._parts))
        self._next_send = top.astype(np.int64)
        self._next_send[self.rank] = 0
        self._next_recv = np.full(top.size, top[self.rank], np.int64)
        self._next_recv[self.rank] = 0

    def _agreed(self, requests: Sequence, agreed) -> Sequence[int]:
        """Collective unless ``agreed`` is given: the round's flags reduced over ranks
        (:meth:`round_flags`, ``flags[0]``: an input error, raised on every rank)."""
        if agreed is None:
            flags, err = self.round_flags(requests)
            if self.ex.world_size > 1:
                flags = self.ex.agree_max(flags)
        else:
            err, flags = agreed
        if int(flags[0]):
            if self.ex.world_size == 1 and err is not None:
                raise err
            raise_agreed(err, self.group)
        return flags

    def _orig_ids(self, requests: Sequence[SampleRequest], out: list[MiniBatch],
                  n_ids: list[np.ndarray], front: dict[int, np.ndarray]) -> list[np.ndarray]:
        """Collective: every batch's ``n_id`` in original ids: the seeds, the frontiers that
        came back with their original ids (``front``), and the rest in one lookup."""
        res = [np.empty(a.size, np.int64) for a in n_ids]
        ask_at: list[tuple[int, int, int]] = []  # (batch, start, end) of nodes to look up
        taken: dict[int, int] = {}  # per hop: frontier entries consumed so far
        for i, (r, b) in enumerate(zip(requests, out, strict=True)):
            res[i][:r.seeds.size] = r.seeds
            counts = b.num_sampled_nodes
            pos = int(counts[0])
            for hop in range(1, len(counts)):
                n = int(counts[hop])
                got = front.get(hop) if hop < len(r.fanouts) else None
                if got is not None:  # frontier of hop `hop`: its ids came back
                    t = taken.get(hop, 0)
                    res[i][pos:pos + n] = got[t:t + n]
                    taken[hop] = t + n
                else:
                    ask_at.append((i, pos, pos + n))
                pos += n
        ask = [n_ids[i][a:z] for i, a, z in ask_at]
        # bounded: the last hop's blocks told each owner how many ids may come (one exchange
        # fewer); without an exchanged hop, the lookup sends its sizes first
        exchanged = self._bounded and self._last_hop >= (1 if self._local_hops else 0)
        bounds = (self._next_send, self._next_recv) if exchanged else None
        for (i, a, z), orig in zip(ask_at, self.ids.to_orig_many(ask, bounds), strict=True):
            res[i][a:z] = orig
        if any(taken.get(h, 0) != a.size for h, a in front.items()):  # after the collective
            raise RuntimeError("the original ids returned with a hop do not match its frontier")
        return res


def _in_range(ids: np.ndarray, n: int, what: str, of: str, consequence: str, fix: str) -> None:
    """:class:`SamplingInputError` naming the first id of ``ids`` outside ``[0, n)``."""
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= n):
        bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
        raise SamplingInputError(f"{what} {bad} is out of range for {of}", consequence, fix)


def _table(fanouts: np.ndarray) -> np.ndarray:
    """Fanouts as ``[S, R]`` (a homogeneous hop's ``[S]`` is one relation)."""
    return fanouts if fanouts.ndim == 2 else fanouts[:, None]


def _grows_trees(r: SampleRequest) -> bool:
    """Disjoint trees: asked for, or temporal (PyG's temporal sampling is disjoint)."""
    return r.time_attr is not None or bool(r.disjoint)
