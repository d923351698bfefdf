"""Multi-hop neighbor sampling for a list of requests, one kernel call per hop for all of them,
on any graph: a homogeneous graph is the one-type case.

:class:`MultiHopSampler` holds the PyG NeighborLoader semantics (seeds first, each node expanded
once per minibatch, per-request renumbering: :func:`run_hops`, the one hop loop) and delegates a
hop's draws to a *hop function* ``hop_fn(segments) -> (counts, neighbors, edge_ids)``: the CPU
kernel over a :class:`CSRGraph` in one process, an exchange around the kernel on the owning ranks
in the distributed sampler. :class:`HeteroSampler` is the same over a :class:`TypedGraph`, whose
types share the internal id space while sampling, so one dedup per hop renumbers every type.
Draws are keyed on (seed, key, hop, relation, node, slot), so a request's output does not depend
on the requests sharing its call. A hop is described per request (:class:`HopSegments`), so a
distributed hop sends one small header per request, not constants repeated per node.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..errors import SamplingInputError
from ..graph.csr import CSRGraph
from ..graph.typed import TypedGraph, edge_type_of
from ..graph.unique import has_duplicates
from ..ops import cpu
from ..ops import typed as typed_ops
from ..ops.dedup import dedup_hop
from ..ops.rng import request_key
from ..system.host_malloc import tune_host_malloc
from .batch import MiniBatch
from .temporal import (
    TIME_MAX,
    check_temporal_options,
    check_tree_ids,
    mark_trees,
    seed_times,
    untimed_input,
)

__all__ = ["HeteroSampleRequest", "HeteroSampler", "HopSegments", "MultiHopSampler",
           "SampleRequest", "assemble_batch", "check_fanouts", "check_new_seeds", "check_seed",
           "fanout_table", "local_hop_fn", "multi_hop", "renumber_hop", "request_key",
           "run_cpu_kernel", "run_hops", "sample", "sample_hetero", "sample_trees"]


@dataclass
class HopSegments:
    """One hop of several requests: the frontier of each, concatenated, and per-request constants.

    ``nodes[sum(sizes[:s]):sum(sizes[:s+1])]`` is request ``s``'s frontier; ``keys``, ``fanouts``
    and ``replace`` hold one entry per request (on a typed graph ``fanouts`` is ``[S, R]``, one
    per relation). ``edge_ids`` asks for edge ids (off: the hop function may return ``None`` for
    them and nothing is fetched). Time (typed graphs): ``bounds``, one time bound per node, and
    ``last``, per request ``"last"`` instead of ``"uniform"``; ``None`` without time.
    """

    nodes: np.ndarray
    sizes: np.ndarray
    keys: np.ndarray
    fanouts: np.ndarray
    replace: np.ndarray
    hop: int
    edge_ids: bool = True
    bounds: np.ndarray | None = None
    last: np.ndarray | None = None

    def per_node(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(keys, fanouts, replace)`` repeated for every node, as the kernels take them."""
        return (np.repeat(self.keys, self.sizes), np.repeat(self.fanouts, self.sizes, axis=0),
                np.repeat(self.replace, self.sizes))


# hop_fn(segments) -> (counts per node, neighbors, edge ids or None), nodes in input order
HopFn = Callable[[HopSegments], tuple[np.ndarray, np.ndarray, "np.ndarray | None"]]


def run_cpu_kernel(indptr, indices, eids, rows, nodes, keys, seed, hop, fanouts, replace,
                   edge_ids: bool = True):
    """Thin adapter over :func:`mnmg_sampler.ops.cpu.sample_neighbors`: edge ids skipped in the
    kernel and ``None`` when not asked."""
    c, nb, e = cpu.sample_neighbors(indptr, indices, eids, rows, nodes, keys, seed, hop,
                                    fanouts, replace, with_eids=edge_ids)
    return c, nb, (e if edge_ids else None)


@dataclass
class SampleRequest:
    """One minibatch to sample: its seeds, fanouts per hop (PyG's ``num_neighbors``) and RNG
    key, for any graph: a homogeneous graph is the case ``input_type=None``.

    On a typed graph ``seeds`` are per-type ids of ``input_type`` and ``fanouts`` a list (every
    relation) or a dict per edge type; ``other_seeds`` holds seeds of further types (PyG's
    ``seed_dict``; each type's seeds come first in its ``n_id``). ``input_time``,
    ``time_attr``, ``temporal_strategy`` and ``disjoint`` are PyG's temporal options, per
    request because one service serves every loader; disjoint and temporal trees may repeat a
    seed, other requests take each seed once. ``edge_ids=False`` leaves ``e_id`` empty and
    skips fetching edge ids. ``new_seeds`` (optional, distributed, homogeneous): the seeds' ids
    in the partitioning, one per seed, translated once by their loader so a round needs no seed
    lookup.
    """

    seeds: np.ndarray
    fanouts: Sequence[int] | Mapping
    key: int
    replace: bool = False
    input_id: np.ndarray | None = None
    edge_ids: bool = True
    new_seeds: np.ndarray | None = None
    input_type: str | None = None
    input_time: np.ndarray | None = None
    time_attr: str | None = None
    temporal_strategy: str = "uniform"
    disjoint: bool | None = None
    other_seeds: dict[str, np.ndarray] | None = None

    def __post_init__(self) -> None:
        once = not (self.disjoint or self.time_attr is not None or self.input_time is not None)
        self.seeds = _seed_ids(self.seeds, once)
        if self.input_type is None:
            self.fanouts = check_fanouts(self.fanouts)
        if self.other_seeds:
            if self.input_type in self.other_seeds:
                raise SamplingInputError(f"other_seeds repeats the input type "
                                         f"{self.input_type!r}", "its seeds would come twice",
                                         "put every seed of input_type in seeds")
            self.other_seeds = {t: _seed_ids(v, once) for t, v in self.other_seeds.items()}
        if not (int(self.key) == self.key and 0 <= int(self.key) < 2**63):
            raise SamplingInputError(f"request key {self.key!r} is negative or not an integer "
                                     "below 2**63", "",
                                     "use a key in [0, 2**63)")
        if self.new_seeds is not None:
            self.new_seeds = _seed_ids(self.new_seeds, False, "new_seeds")
            check_new_seeds(self)

    @property
    def num_neighbors(self) -> Sequence[int] | Mapping:
        """PyG's name of :attr:`fanouts`."""
        return self.fanouts

    def seed_groups(self) -> list[tuple[str, np.ndarray]]:
        """``(node type, per-type ids)`` of every seed: ``input_type``'s, then ``other_seeds``."""
        return [(self.input_type, self.seeds), *(self.other_seeds or {}).items()]

    def internal_seeds(self, node_types: Sequence[str],
                       node_type_offset: np.ndarray) -> np.ndarray:
        """Every seed in the graph's internal ids (types already checked by the caller)."""
        return np.concatenate([ids + node_type_offset[list(node_types).index(t)]
                               for t, ids in self.seed_groups()])


def HeteroSampleRequest(input_type: str, seeds, num_neighbors, key: int, replace: bool = False,
                        input_id=None, input_time=None, **options) -> SampleRequest:
    """A :class:`SampleRequest` of seeds of ``input_type``, in the typed argument order."""
    return SampleRequest(seeds, num_neighbors, key, replace, input_id, input_type=input_type,
                         input_time=input_time, **options)


def _seed_ids(seeds, once: bool = True, name: str = "seeds") -> np.ndarray:
    """Seed ids as flat int64 (each once when ``once``), or :class:`SamplingInputError`."""
    if torch.is_tensor(seeds):
        seeds = seeds.detach().cpu().numpy()
    seeds = np.asarray(seeds)
    if seeds.size and not np.issubdtype(seeds.dtype, np.integer):
        raise SamplingInputError(f"{name} have dtype {seeds.dtype}; ids are integers",
                                 "they cannot index nodes", "pass integer ids")
    seeds = np.ascontiguousarray(seeds, dtype=np.int64).ravel()
    if once and has_duplicates(seeds):
        raise SamplingInputError("a request has duplicate seed ids",
                                 "n_id[:batch_size] could not equal the seeds",
                                 "deduplicate the seeds of each minibatch (loaders do this)")
    return seeds


def check_new_seeds(r: SampleRequest) -> None:
    """:class:`SamplingInputError` unless ``r.new_seeds`` (when given) has one id per seed."""
    if r.new_seeds is not None and np.shape(r.new_seeds) != r.seeds.shape:
        raise SamplingInputError(
            f"a request has {np.size(r.new_seeds)} translated seed ids for {r.seeds.size} seeds",
            "its seeds cannot be located in the partitioning",
            "pass new_seeds=None (the sampler translates the seeds) or one new id per seed")


def _cat(arrays: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(arrays) if arrays else np.empty(0, np.int64)


def _edge_index(rows: list[np.ndarray], cols: list[np.ndarray]) -> np.ndarray:
    """``[2, E]`` int64 of the hops' rows over their columns, each written once in place (no
    concatenation then stack: one copy of the edges fewer; torch.stack of two small tensors
    costs ms of CPU with intra-op threads)."""
    E = sum(int(r.size) for r in rows)
    out = np.empty((2, E), np.int64)
    if rows:
        np.concatenate(rows, out=out[0])
        np.concatenate(cols, out=out[1])
    return out


def renumber_hop(nids: list[np.ndarray], sizes: np.ndarray, counts: np.ndarray,
                 nbr: np.ndarray) -> tuple[np.ndarray, ...]:
    """One hop's renumbering for several requests (their ``n_id`` so far in ``nids``, their
    frontier sizes, the kernel's per-node counts and neighbors): ``(node_off, cand_off, new,
    new_off, local)``, the per-request offsets of frontier nodes and of sampled neighbors, then
    :func:`~mnmg_sampler.ops.dedup.dedup_hop`'s results."""
    node_off = np.zeros(len(nids) + 1, np.int64)
    np.cumsum(sizes, out=node_off[1:])
    cnt_cum = np.zeros(counts.size + 1, np.int64)
    np.cumsum(counts, out=cnt_cum[1:])
    cand_off = cnt_cum[node_off]
    nid_off = np.zeros(len(nids) + 1, np.int64)
    np.cumsum([n.size for n in nids], out=nid_off[1:])
    new, new_off, local = dedup_hop(_cat(nids), nid_off, nbr, cand_off)
    return node_off, cand_off, new, new_off, local


FANOUT_MAX = 2**31 - 1
"""Largest fanout of one hop (a larger one would overflow the kernels' integers; -1 takes all)."""


def check_fanouts(fanouts: Sequence[int]) -> list[int]:
    """Validate PyG-style fanouts: hop i from the seeds; ``-1`` = all neighbors, ``0`` = none."""
    try:
        out = [int(f) for f in fanouts]
    except (TypeError, ValueError):
        out = None
    if not out or any(f < -1 or f > FANOUT_MAX for f in out) or any(
        int(f) != f for f in fanouts
    ):
        raise SamplingInputError(
            f"invalid fanouts {list(fanouts) if out is not None else fanouts!r}",
            "each hop needs a number of neighbors in [0, 2**31 - 1], or -1 for all",
            "pass e.g. [15, 10, 5]; hop 1 (nearest the seeds) comes first",
        )
    return out


def check_seed(seed: int) -> int:
    """The RNG seed as an int in ``[0, 2**63)``, or :class:`SamplingInputError`."""
    try:
        ok = int(seed) == seed and 0 <= int(seed) < 2**63
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise SamplingInputError(f"seed {seed!r} is not an integer in [0, 2**63)",
                                 "the counter-based RNG is keyed on a 63-bit seed",
                                 "pass a non-negative integer seed, e.g. 0")
    return int(seed)


def local_hop_fn(graph: CSRGraph, seed: int) -> HopFn:
    """The hop function of a whole graph in this process (ids are rows and RNG node ids)."""
    seed = check_seed(seed)

    def hop_fn(h: HopSegments):
        keys, fanouts, replace = h.per_node()
        return run_cpu_kernel(graph.indptr, graph.indices, graph.edge_ids, h.nodes, h.nodes,
                              keys, seed, h.hop, fanouts, replace, h.edge_ids)

    return hop_fn


def fanout_table(graph: TypedGraph, num_neighbors) -> np.ndarray:
    """``[hops, R]`` int64 fanouts from PyG's ``num_neighbors`` (list for every relation, or a
    dict per edge type; keys ``(src, rel, dst)`` or ``"src__rel__dst"``), in relation order.

    As PyG: a dict must name every relation of the graph and only those, with equally many hops.
    """
    R = len(graph.edge_types)
    if not isinstance(num_neighbors, Mapping):
        hops = check_fanouts(num_neighbors)
        return np.repeat(np.array(hops, np.int64)[:, None], R, axis=1)
    per = {}
    for k, v in num_neighbors.items():
        et = edge_type_of(k, "num_neighbors")
        if et not in graph.edge_types:
            raise SamplingInputError(f"num_neighbors names {et}, not a relation of the graph",
                                     "no neighbor can be sampled along it",
                                     f"use the graph's relations: {list(graph.edge_types)}")
        per[et] = check_fanouts(v)
    missing = [et for et in graph.edge_types if et not in per]
    if missing:
        raise SamplingInputError(f"num_neighbors has no fanouts for {missing}",
                                 "PyG's semantics need one list per relation",
                                 "add them (0 per hop samples none), or pass one list for all")
    lengths = {len(v) for v in per.values()}
    if len(lengths) > 1:
        raise SamplingInputError(f"num_neighbors has lists of {sorted(lengths)} hops",
                                 "every relation needs the same number of hops",
                                 "give every relation as many fanouts (0 for none)")
    return np.array([per[et] for et in graph.edge_types], np.int64).T.copy()


def run_hops(hop_fn, seeds: list[np.ndarray], tables: Sequence, requests: Sequence,
             n_hops: int, n_rel: int | None = None) -> list[tuple]:
    """The one hop loop: every request's ``(n_id, nodes per hop, edges per hop)`` with ONE
    ``hop_fn`` call per hop for all of them.

    ``hop_fn(HopSegments) -> (counts, neighbors, relations or None, edge ids or None)`` draws
    the frontier (ids of any space the caller dedups in: node ids, internal ids, new ids over
    ranks); ``tables[i]`` holds request ``i``'s fanouts per hop, one per hop (one type) or
    ``[hops, n_rel]`` (one per relation: ``fanouts`` is then ``[active requests, n_rel]`` even
    when no request is active). Edges per hop are ``(local src, dst0, counts, relation, edge
    id)``: ``counts[i]`` edges from local node ``dst0 + i``, in frontier order (``None`` where
    the hop function gave none)."""
    R = len(requests)
    nid = list(seeds)
    frontier = list(seeds)
    front_start = [0] * R
    n_nodes = [[s.size] for s in seeds]
    edges: list[list[tuple]] = [[] for _ in requests]
    for hop in range(n_hops):
        active = [i for i in range(R) if hop < len(tables[i])]
        sizes = np.array([frontier[i].size for i in active], np.int64)
        fan = np.array([tables[i][hop] for i in active], np.int64) if active else np.zeros(
            (0, n_rel) if n_rel is not None else 0, np.int64)
        counts, nbr, rel, eid = hop_fn(HopSegments(
            _cat([frontier[i] for i in active]), sizes,
            np.array([requests[i].key for i in active], np.int64), fan,
            np.array([requests[i].replace for i in active], np.uint8), hop,
            any(requests[i].edge_ids for i in active)))
        node_off, cand_off, new, new_off, local = renumber_hop(
            [nid[i] for i in active], sizes, counts, nbr)
        for j, i in enumerate(active):
            c0, c1 = cand_off[j], cand_off[j + 1]
            edges[i].append((local[c0:c1], front_start[i], counts[node_off[j]:node_off[j + 1]],
                             None if rel is None else rel[c0:c1],
                             None if eid is None else eid[c0:c1]))
            fresh = new[new_off[j]:new_off[j + 1]]
            front_start[i] = nid[i].size
            nid[i] = np.concatenate([nid[i], fresh])
            frontier[i] = fresh
            n_nodes[i].append(int(fresh.size))
    return list(zip(nid, n_nodes, edges, strict=True))


def multi_hop(hop_fn, seeds: list[np.ndarray], tables: list[np.ndarray],
              requests: Sequence[HeteroSampleRequest], n_hops: int, n_rel: int) -> list[tuple]:
    """:func:`run_hops` with a typed kernel's hop function ``hop_fn(rows, keys, req, fanouts,
    replace, hop) -> (counts, neighbors, relations, edge ids)``: keys and request index per
    frontier node, ``fanouts`` ``[active requests, n_rel]``."""
    def hop(h: HopSegments):
        req = np.repeat(np.arange(h.sizes.size, dtype=np.int64), h.sizes)
        return hop_fn(h.nodes, np.repeat(h.keys, h.sizes), req, h.fanouts, h.replace, h.hop)

    return run_hops(hop, seeds, tables, requests, n_hops, n_rel)


class MultiHopSampler:
    """Samples lists of requests hop by hop through one ``hop_fn`` call per hop
    (:func:`run_hops`; ``hop_calls`` counts the calls).

    Args:
        hop_fn: draws one hop of several requests (:class:`HopSegments`): ``(counts,
            neighbors, edge ids or None)``.
        num_nodes: number of nodes in the (global) graph, for seed validation.
    """

    def __init__(self, hop_fn: HopFn, num_nodes: int) -> None:
        tune_host_malloc()  # reuse the hops' buffers instead of faulting them in each batch
        self.hop_fn = hop_fn
        self.num_nodes = int(num_nodes)
        self.hop_calls = 0

    def check_seeds(self, seeds: np.ndarray) -> None:
        if seeds.size and (int(seeds.min()) < 0 or int(seeds.max()) >= self.num_nodes):
            bad = int(seeds.min()) if int(seeds.min()) < 0 else int(seeds.max())
            raise SamplingInputError(
                f"seed id {bad} is out of range for a graph with {self.num_nodes} nodes",
                "no neighbors can be sampled for it",
                f"pass seed ids in [0, {self.num_nodes})",
            )

    def sample(self, requests: Sequence[SampleRequest]) -> list[MiniBatch]:
        """Sample every request; each result equals sampling that request alone."""
        for r in requests:
            self.check_seeds(r.seeds)
        return self.sample_checked(requests)

    def _hop(self, h: HopSegments):
        self.hop_calls += 1
        counts, nbr, eid = self.hop_fn(h)
        return counts, nbr, None, eid

    def sample_checked(self, requests: Sequence, num_hops: int | None = None) -> list[MiniBatch]:
        """Sample validated requests; ``num_hops`` forces that many ``hop_fn`` calls (a rank in a
        distributed round must join every hop even when its own requests are done)."""
        seeds, tables, n_rel = self._inputs(requests)
        if num_hops is None:
            num_hops = max((len(t) for t in tables), default=0)
        out = run_hops(self._hop, seeds, tables, requests, num_hops, n_rel)
        return [self._batch(r, *o) for r, o in zip(requests, out, strict=True)]

    def _inputs(self, requests: Sequence) -> tuple[list[np.ndarray], list, int | None]:
        """The requests' seeds in the ids the hops dedup in, fanout tables, relation count."""
        return [r.seeds for r in requests], [r.fanouts for r in requests], None

    def _batch(self, req: SampleRequest, n_id: np.ndarray, n_nodes: list[int],
               hops: list[tuple]) -> MiniBatch:
        input_id = req.input_id if req.input_id is not None else np.arange(req.seeds.size)
        return MiniBatch(
            n_id=torch.from_numpy(n_id),
            edge_index=torch.from_numpy(_edge_index(
                [e[0] for e in hops],
                [np.repeat(np.arange(d0, d0 + cnt.size), cnt) for _, d0, cnt, _, _ in hops])),
            e_id=torch.from_numpy(_cat([e[4] for e in hops] if req.edge_ids else [])),
            input_id=torch.as_tensor(np.asarray(input_id, np.int64)),
            batch_size=int(req.seeds.size),
            num_sampled_nodes=n_nodes,
            num_sampled_edges=[int(e[0].size) for e in hops],
            key=int(req.key),
        )


class HeteroSampler(MultiHopSampler):
    """The :class:`MultiHopSampler` of a :class:`TypedGraph`: one typed kernel call per hop for
    every request and relation (``kernel_calls`` counts the calls). ``disjoint``, ``time_attr``
    and ``temporal_strategy`` are PyG's (:mod:`mnmg_sampler.sampling.temporal`).
    """

    def __init__(self, graph: TypedGraph, seed: int = 0, *, disjoint: bool | None = None,
                 time_attr: str | None = None, temporal_strategy: str = "uniform") -> None:
        super().__init__(self._hop, graph.num_nodes)
        self.graph = graph
        self.seed = check_seed(seed)
        self.disjoint = check_temporal_options(graph, time_attr, temporal_strategy, disjoint)
        self.time_attr = time_attr
        self.temporal_strategy = temporal_strategy

    @property
    def kernel_calls(self) -> int:
        return self.hop_calls

    def sample(self, requests: Sequence[HeteroSampleRequest]) -> list[MiniBatch]:
        """Sample every request; each result equals sampling that request alone."""
        for r in requests:
            if (r.time_attr, r.temporal_strategy, r.disjoint) != (None, "uniform", None):
                raise SamplingInputError(
                    "a request carries time_attr / temporal_strategy / disjoint",
                    "the one-process sampler takes them at construction, not per request",
                    "pass them to HeteroSampler(...) (or sample_hetero)")
        if self.disjoint or any(r.input_time is not None for r in requests):
            return self._sample_trees(requests)
        return self.sample_checked(requests)

    def _sample_trees(self, requests: Sequence[HeteroSampleRequest]) -> list[MiniBatch]:
        """Sample ``requests`` as disjoint trees (with time when ``time_attr`` is set): one
        kernel call per hop for all of them (:func:`sample_trees`)."""
        g = self.graph
        temporal = self.time_attr is not None
        if not temporal and any(r.input_time is not None for r in requests):
            raise untimed_input()
        seeds, tables, n_rel = self._inputs(requests)
        times = [seed_times(g, r, s) if temporal else None
                 for r, s in zip(requests, seeds, strict=True)]

        def hop(rows, keys, req, fan, rep, hop, bounds, last):
            self.hop_calls += 1
            return typed_ops.sample_typed_neighbors(g, rows, rows, keys, req, fan, rep,
                                                    self.seed, hop, bounds=bounds, last=last)

        got = sample_trees(hop, seeds, requests, tables, times, [True] * len(requests),
                           self.temporal_strategy == "last", g.num_nodes, n_rel)
        out = []
        for r, t, (tree, v, n, e) in zip(requests, times, got, strict=True):
            b = self._batch(r, v, n, e)
            mark_trees(b, tree, v, g.node_types, g.node_type_offset, t)
            out.append(b)
        return out

    def _inputs(self, requests: Sequence[HeteroSampleRequest]):
        g = self.graph
        return ([np.concatenate([g.to_internal(t, ids) for t, ids in r.seed_groups()])
                 for r in requests], [fanout_table(g, r.num_neighbors) for r in requests],
                len(g.edge_types))

    def _hop(self, h: HopSegments):
        """One typed kernel call: every relation of every request's frontier (internal ids)."""
        self.hop_calls += 1
        req = np.repeat(np.arange(h.sizes.size, dtype=np.int64), h.sizes)
        return typed_ops.sample_typed_neighbors(self.graph, h.nodes, h.nodes,
                                                np.repeat(h.keys, h.sizes), req, h.fanouts,
                                                h.replace, self.seed, h.hop)

    def _batch(self, req: HeteroSampleRequest, nid: np.ndarray, n_nodes: list[int],
               hops: list[tuple]) -> MiniBatch:
        g = self.graph
        b = assemble_batch(g.node_types, g.edge_types, g.node_type_offset, req, nid, n_nodes,
                           hops)
        for name, ids in b.n_id.items():
            ids = ids.numpy()
            if name in g.x:
                b.x[name] = torch.from_numpy(np.ascontiguousarray(g.x[name][ids]))
            if name in g.y:
                b.y[name] = torch.from_numpy(np.ascontiguousarray(g.y[name][ids]))
        return b


def sample_trees(hop_fn, seeds: list[np.ndarray], requests: Sequence, tables: list, times: list,
                 disjoint: Sequence[bool], last, num_nodes: int, n_rel: int,
                 n_hops: int | None = None) -> list[tuple]:
    """Every request's ``(tree, node, nodes per hop, edges per hop)`` with one ``hop_fn`` call
    per hop: :func:`multi_hop` over pair ids ``b * N + v`` for the ``disjoint`` requests (plain
    ids for the others: tree 0), each node bounded by its seed's time for the requests with
    ``times`` (``None``: no time).

    ``hop_fn(rows, keys, req, fanouts, replace, hop, bounds, last)`` is the typed kernel's
    call (``bounds``: ``None`` when no active request has time, ``TIME_MAX`` for the untimed
    ones); ``seeds`` are ids of ``hop_fn``'s space (``N = num_nodes`` of them); ``last`` per
    request or for all: ``"last"`` instead of ``"uniform"``; ``n_hops`` (default: the deepest
    table) is given over ranks, where every rank runs the deepest request of any rank."""
    N = max(int(num_nodes), 1)
    Q = len(requests)
    last = np.broadcast_to(np.asarray(last, np.uint8), (Q,))
    pairs = []
    for s, dj in zip(seeds, disjoint, strict=True):
        if dj:
            check_tree_ids(s.size, N)
        pairs.append(np.arange(s.size, dtype=np.int64) * N + s if dj else s)

    def hop(rows, keys, req, fan, rep, h):
        active = [i for i in range(Q) if h < tables[i].shape[0]]
        tree, v = np.divmod(rows, N)
        bounds = lasts = None
        if any(times[i] is not None for i in active):
            bounds = np.full(rows.size, TIME_MAX, np.int64)
            at = np.searchsorted(req, np.arange(len(active) + 1))  # req ascends by request
            for j, i in enumerate(active):
                if times[i] is not None:
                    bounds[at[j]:at[j + 1]] = times[i][tree[at[j]:at[j + 1]]]
            lasts = np.ascontiguousarray(last[active])
        counts, nbr, rel, eid = hop_fn(v, keys, req, fan, rep, h, bounds, lasts)
        return counts, np.repeat(tree, counts) * N + nbr, rel, eid

    if n_hops is None:
        n_hops = max((t.shape[0] for t in tables), default=0)
    out = multi_hop(hop, pairs, tables, requests, n_hops, n_rel)
    return [(*np.divmod(nid, N), n, e) for nid, n, e in out]


def assemble_batch(node_types, edge_types, node_type_offset: np.ndarray,
                   req: HeteroSampleRequest, nid: np.ndarray, n_nodes: list[int],
                   hops: list[tuple]) -> MiniBatch:
    """A :class:`MiniBatch` (without ``x``/``y``) from one request's internal ``n_id``
    (seeds first, then hop by hop; ``n_nodes`` per hop) and its sampled edges per hop
    ``(src, dst0, counts, relation, edge id)`` (batch indices; ``counts[i]`` edges from
    ``dst0 + i``: :func:`~mnmg_sampler.ops.typed.group_hops_by_relation`'s), as
    :func:`run_hops` gives them to the single-process and distributed samplers."""
    R = len(edge_types)
    ids, at, n_hop, loc = typed_ops.group_nodes_by_type(nid, node_type_offset, n_nodes)
    n_id = {name: torch.from_numpy(ids[at[t]:at[t + 1]]) for t, name in enumerate(node_types)}
    n_sampled = {name: n_hop[t].tolist() for t, name in enumerate(node_types)}
    # per relation, in sampling order, in one pass over each hop's edges (a per-relation gather
    # cost half the batch; concatenating the hops first, a tenth)
    ei, eid_o, bounds, per_hop = typed_ops.group_hops_by_relation(hops, loc, R)
    edge_index, e_id, e_sampled = {}, {}, {}
    for r, et in enumerate(edge_types):
        a, b = int(bounds[r]), int(bounds[r + 1])
        edge_index[et] = torch.from_numpy(ei[2 * a:2 * b].reshape(2, b - a))
        e_id[et] = torch.from_numpy(eid_o[a:b] if req.edge_ids else eid_o[:0])
        e_sampled[et] = per_hop[r].tolist()
    input_id = req.input_id if req.input_id is not None else np.arange(req.seeds.size)
    return MiniBatch(
        n_id=n_id, edge_index=edge_index, e_id=e_id, input_type=req.input_type,
        input_id=torch.as_tensor(np.asarray(input_id, np.int64)),
        batch_size=int(req.seeds.size), num_sampled_nodes=n_sampled,
        num_sampled_edges=e_sampled, key=int(req.key))


def check_input_nodes(input_nodes, num_nodes: int, *, node_ids: np.ndarray | None = None,
                      name: str = "input_nodes",
                      what: str = "the loader cannot be built; every rank raises this before "
                                  "sampling") -> np.ndarray:
    """``input_nodes`` as a flat int64 array of distinct ids in ``[0, num_nodes)``, or a
    :class:`SamplingInputError` saying what is wrong (the same on every rank for the same input).

    Accepted, as in PyG's ``NeighborLoader``: integer node ids (any int dtype, tensor, array or
    sequence) or a bool mask of length ``num_nodes``. Refused: float ids (never cast silently),
    other shapes, out-of-range or repeated ids. An empty input gives no batch. For a renumbered
    graph (``node_ids``: ascending original ids) ids are original ids, translated here, and a
    mask is in ascending original id. ``name`` and ``what`` word the errors.
    """
    if torch.is_tensor(input_nodes):
        input_nodes = input_nodes.detach().cpu().numpy()
    arr = np.asarray(input_nodes)
    if arr.size == 0 and arr.ndim <= 1:
        return np.empty(0, np.int64)
    if arr.ndim != 1:
        raise SamplingInputError(f"{name} has shape {arr.shape}", what,
                                 "pass a 1-D array of node ids or a bool mask")
    if arr.dtype == np.bool_:
        if arr.shape[0] != num_nodes:
            raise SamplingInputError(
                f"{name} is a bool mask of length {arr.shape[0]}, but the graph has "
                f"{num_nodes} nodes", what,
                f"pass a mask of length {num_nodes} (True = seed), or integer node ids")
        return np.flatnonzero(arr).astype(np.int64)
    if not np.issubdtype(arr.dtype, np.integer):
        raise SamplingInputError(
            f"{name} has dtype {arr.dtype}; node ids must be integers", what,
            "pass integer ids (e.g. ids.long() or ids.astype(np.int64)) or a bool mask")
    if node_ids is not None:
        arr = renumbered_ids(arr, node_ids, name, what)
    lo, hi = arr.min(), arr.max()
    if lo < 0 or hi >= num_nodes:
        bad = lo if lo < 0 else hi
        raise SamplingInputError(f"{name} holds id {bad}, out of range for a graph with "
                                 f"{num_nodes} nodes", what, f"pass ids in [0, {num_nodes})")
    ids = arr.astype(np.int64)
    uniq, counts = np.unique(ids, return_counts=True)
    if uniq.size != ids.size:
        dup = uniq[counts > 1]
        raise SamplingInputError(
            f"{name} holds {ids.size - uniq.size} repeated ids (e.g. "
            f"{int(dup[0]) if node_ids is None else int(node_ids[dup[0]])})", what,
            "pass each seed once, no duplicate (e.g. np.unique(ids))")
    return ids


def renumbered_ids(arr: np.ndarray, node_ids: np.ndarray, name: str, what: str) -> np.ndarray:
    """Node ids of the original ids ``arr`` (``node_ids`` ascending, memory-mapped is fine); a
    :class:`SamplingInputError` naming ``name`` for an id that is not a node of the graph."""
    if arr.dtype.kind == "u" and arr.size and int(arr.max()) >= 2**63:
        raise SamplingInputError(f"{name} holds id {int(arr.max())}, above 2**63 - 1", what,
                                 "pass original node ids of the graph")
    arr = arr.astype(np.int64, copy=False)
    pos = np.minimum(np.searchsorted(node_ids, arr), max(int(node_ids.shape[0]) - 1, 0))
    bad = np.asarray(node_ids[pos]) != arr if node_ids.shape[0] else np.ones(arr.shape, bool)
    if bad.any():
        raise SamplingInputError(
            f"{name} holds id {int(arr[np.argmax(bad)])}, which is not a node of the graph "
            "(its ids were renumbered; seeds are original ids)", what,
            "pass original node ids that occur in the graph's edges")
    return pos.astype(np.int64)


def sample(graph: CSRGraph | TypedGraph, seeds, fanouts, *, seed: int = 0, key: int = 0,
           replace: bool = False, weights: np.ndarray | None = None,
           disjoint: bool | None = None, time_attr: str | None = None, input_time=None,
           temporal_strategy: str = "uniform") -> MiniBatch:
    """Sample one minibatch from ``graph`` in this process (convenience wrapper).

    A :class:`CSRGraph`: ``seeds`` are node ids (original ids for a renumbered graph, as
    ``n_id`` shows) or a bool mask (:func:`check_input_nodes`); ``weights`` (one per CSR entry)
    samples neighbors with probability proportional to weight. A :class:`TypedGraph`: ``seeds``
    is PyG's ``(node type, ids)`` (plain ids for a graph of one type), ``fanouts`` a list or a
    dict per edge type, and ``disjoint``, ``time_attr``, ``input_time`` and
    ``temporal_strategy`` are PyG's (docs/temporal.md)."""
    if isinstance(graph, TypedGraph):
        if len(graph.node_types) == 1 and not isinstance(seeds, tuple):
            seeds = (graph.node_types[0], seeds)
        if not (isinstance(seeds, tuple) and len(seeds) == 2 and isinstance(seeds[0], str)):
            raise SamplingInputError(f"input_nodes is {type(seeds).__name__}, not a "
                                     "(node type, ids) pair", "the seeds' type is unknown",
                                     "pass input_nodes=('paper', ids), as PyG's NeighborLoader")
        sampler = HeteroSampler(graph, seed, disjoint=disjoint, time_attr=time_attr,
                                temporal_strategy=temporal_strategy)
        return sampler.sample([SampleRequest(seeds[1], fanouts, key, replace,
                                             input_type=seeds[0], input_time=input_time)])[0]
    ids = check_input_nodes(seeds, graph.num_nodes, node_ids=graph.node_ids, name="seeds",
                            what="no minibatch can be sampled")
    if weights is not None:
        from ..ops.weighted import local_weighted_hop_fn

        hop_fn = local_weighted_hop_fn(graph, weights, seed)
    else:
        hop_fn = local_hop_fn(graph, seed)
    batch = MultiHopSampler(hop_fn, graph.num_nodes).sample(
        [SampleRequest(ids, fanouts, key, replace)])[0]
    if graph.node_ids is not None:
        batch.n_id = torch.from_numpy(graph.original_ids(batch.n_id.numpy()))
    return batch


sample_hetero = sample  # the typed graphs' name: (graph, (node type, ids), num_neighbors, ...)
