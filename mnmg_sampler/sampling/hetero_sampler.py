"""Multi-hop sampling of a typed graph in one process: one typed kernel call per hop for every
relation and every request.

Seeds are ``(input_type, per-type ids)``; ``num_neighbors`` is PyG's: a list (the same fanouts
for every relation) or a dict per edge type, hop ``i`` from the seeds first. Nodes of all types
live in the graph's internal id space while sampling, so one dedup per hop renumbers every type
at once (:func:`~mnmg_sampler.ops.dedup.dedup_hop`, as the homogeneous sampler); a batch is split
into per-type ids and local indices only when it is built.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..errors import SamplingInputError
from ..graph.typed import TypedGraph, edge_type_of
from ..graph.unique import has_duplicates
from ..ops import typed as typed_ops
from ..system.host_malloc import tune_host_malloc
from .hetero_batch import HeteroMiniBatch
from .sampler import check_fanouts, check_seed, renumber_hop
from .temporal import (
    TIME_MAX,
    check_temporal_options,
    check_tree_ids,
    mark_trees,
    seed_times,
    untimed_input,
)

__all__ = ["HeteroSampleRequest", "HeteroSampler", "assemble_batch", "fanout_table",
           "multi_hop", "sample_disjoint", "sample_hetero", "sample_trees"]


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


@dataclass
class HeteroSampleRequest:
    """One minibatch to sample: seeds of ``input_type`` (per-type ids), fanouts, RNG key."""

    input_type: str
    seeds: np.ndarray
    num_neighbors: Sequence[int] | Mapping
    key: int
    replace: bool = False
    input_id: np.ndarray | None = None
    input_time: np.ndarray | None = None  # per seed, for temporal sampling (docs/temporal.md)
    # PyG's loader options, per request for the distributed sampler (one service serves every
    # loader); the one-process HeteroSampler takes them at construction instead
    time_attr: str | None = None
    temporal_strategy: str = "uniform"
    disjoint: bool | None = None
    # seeds of further node types (a link batch's destination type when it differs from the
    # source type: PyG's seed_dict); each type's seeds come first in its n_id
    other_seeds: dict[str, np.ndarray] | None = None
    # False: e_id stays empty and the distributed sampler sends no edge ids
    edge_ids: bool = True

    def __post_init__(self) -> None:
        # disjoint / temporal trees may repeat a seed (each its own tree: a link batch's
        # endpoints, as PyG's); otherwise each seed once
        once = not (self.disjoint or self.time_attr is not None or self.input_time is not None)
        self.seeds = _seed_ids(self.seeds, once)
        if self.other_seeds:
            if self.input_type in self.other_seeds:
                raise SamplingInputError(f"other_seeds repeats the input type "
                                         f"{self.input_type!r}", "its seeds would come twice",
                                         "put every seed of input_type in seeds")
            self.other_seeds = {t: _seed_ids(v, once) for t, v in self.other_seeds.items()}
        if not (int(self.key) == self.key and 0 <= int(self.key) < 2**63):
            raise SamplingInputError(f"request key {self.key!r} is not in [0, 2**63)", "",
                                     "use a key in [0, 2**63)")

    def seed_groups(self) -> list[tuple[str, np.ndarray]]:
        """``(node type, per-type ids)`` of every seed: ``input_type``'s, then ``other_seeds``."""
        return [(self.input_type, self.seeds), *(self.other_seeds or {}).items()]

    def internal_seeds(self, node_types: Sequence[str],
                       node_type_offset: np.ndarray) -> np.ndarray:
        """Every seed in the graph's internal ids (types already checked by the caller)."""
        return np.concatenate([ids + node_type_offset[list(node_types).index(t)]
                               for t, ids in self.seed_groups()])


def _seed_ids(seeds, once: bool = True) -> np.ndarray:
    """Per-type seed ids as int64 (each once when ``once``)."""
    if torch.is_tensor(seeds):
        seeds = seeds.detach().cpu().numpy()
    seeds = np.asarray(seeds)
    if seeds.size and not np.issubdtype(seeds.dtype, np.integer):
        raise SamplingInputError(f"seeds have dtype {seeds.dtype}; ids are integers",
                                 "they cannot index nodes", "pass integer per-type ids")
    seeds = np.ascontiguousarray(seeds, dtype=np.int64).ravel()
    if once and has_duplicates(seeds):
        raise SamplingInputError("a request has duplicate seed ids",
                                 "n_id[input_type][:batch_size] could not equal the seeds",
                                 "deduplicate the seeds of each minibatch")
    return seeds


class HeteroSampler:
    """Samples lists of :class:`HeteroSampleRequest` over a :class:`TypedGraph`, one kernel call
    per hop for all of them (``kernel_calls`` counts the calls).

    Each request's batch equals sampling it alone: every draw is keyed on (seed, request key,
    hop, relation, node, slot). ``disjoint``, ``time_attr`` and ``temporal_strategy`` are
    PyG's (:mod:`mnmg_sampler.sampling.temporal`, ``docs/temporal.md``).
    """

    def __init__(self, graph: TypedGraph, seed: int = 0, *, disjoint: bool | None = None,
                 time_attr: str | None = None, temporal_strategy: str = "uniform") -> None:
        tune_host_malloc()
        self.graph = graph
        self.seed = check_seed(seed)
        self.kernel_calls = 0
        self.disjoint = check_temporal_options(graph, time_attr, temporal_strategy, disjoint)
        self.time_attr = time_attr
        self.temporal_strategy = temporal_strategy

    def sample(self, requests: Sequence[HeteroSampleRequest]) -> list[HeteroMiniBatch]:
        """Sample every request; each result equals sampling that request alone."""
        for r in requests:
            if (r.time_attr, r.temporal_strategy, r.disjoint) != (None, "uniform", None):
                raise SamplingInputError(
                    "a HeteroSampleRequest carries time_attr / temporal_strategy / disjoint",
                    "the one-process sampler takes them at construction, not per request",
                    "pass them to HeteroSampler(...) (or sample_hetero)")
        if self.disjoint or any(r.input_time is not None for r in requests):
            return sample_disjoint(self, requests)
        g = self.graph
        seeds = [np.concatenate([g.to_internal(t, ids) for t, ids in r.seed_groups()])
                 for r in requests]
        tables = [fanout_table(g, r.num_neighbors) for r in requests]
        n_hops = max((t.shape[0] for t in tables), default=0)
        out = multi_hop(self._hop, seeds, tables, requests, n_hops, len(g.edge_types))
        return [self._batch(r, *o) for r, o in zip(requests, out, strict=True)]

    def _hop(self, rows, keys, req, fan, rep, hop):
        self.kernel_calls += 1
        return typed_ops.sample_typed_neighbors(self.graph, rows, rows, keys, req, fan, rep,
                                                self.seed, hop)

    def _batch(self, req: HeteroSampleRequest, nid: np.ndarray, n_nodes: list[int],
               hops: list[tuple]) -> HeteroMiniBatch:
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


def multi_hop(hop_fn, seeds: list[np.ndarray], tables: list[np.ndarray],
              requests: Sequence[HeteroSampleRequest], n_hops: int, n_rel: int) -> list[tuple]:
    """Every request's ``(n_id, nodes per hop, edges per hop)`` with ONE ``hop_fn`` call per
    hop for all of them: ``hop_fn(rows, keys, req, fanouts, replace, hop)`` returns the typed
    kernel's ``(counts, neighbors, relations, edge ids)`` for the frontier ``rows`` (ids of any
    space the caller dedups in: internal ids here, new ids over ranks); ``fanouts`` is
    ``[active requests, n_rel]`` even when no request is active."""
    R = len(requests)
    nid = list(seeds)
    frontier = list(seeds)
    front_start = [0] * R
    n_nodes = [[s.size] for s in seeds]
    edges: list[list[tuple]] = [[] for _ in requests]
    for hop in range(n_hops):
        active = [i for i in range(R) if hop < tables[i].shape[0]]
        sizes = np.array([frontier[i].size for i in active], np.int64)
        rows = np.concatenate([frontier[i] for i in active]) if active else np.zeros(0,
                                                                                     np.int64)
        keys = np.repeat(np.array([requests[i].key for i in active], np.int64), sizes)
        req = np.repeat(np.arange(len(active), dtype=np.int64), sizes)
        fan = np.stack([tables[i][hop] for i in active]) if active else np.zeros(
            (0, n_rel), np.int64)
        rep = np.array([requests[i].replace for i in active], np.uint8)
        counts, nbr, rel, eid = hop_fn(rows, keys, req, fan, rep, hop)
        node_off, cand_off, new, new_off, local = renumber_hop(
            [nid[i] for i in active], sizes, counts, nbr)
        for j, i in enumerate(active):
            c0, c1 = cand_off[j], cand_off[j + 1]
            edges[i].append((local[c0:c1], front_start[i], counts[node_off[j]:node_off[j + 1]],
                             rel[c0:c1], eid[c0:c1]))
            fresh = new[new_off[j]:new_off[j + 1]]
            front_start[i] = nid[i].size
            nid[i] = np.concatenate([nid[i], fresh])
            frontier[i] = fresh
            n_nodes[i].append(int(fresh.size))
    return list(zip(nid, n_nodes, edges, strict=True))


def sample_disjoint(sampler, requests: Sequence) -> list[HeteroMiniBatch]:
    """Sample ``requests`` as disjoint trees (with time when ``sampler.time_attr`` is set): one
    kernel call per hop for all of them; ``sampler`` is a :class:`HeteroSampler`."""
    g = sampler.graph
    temporal = sampler.time_attr is not None
    if not temporal and any(r.input_time is not None for r in requests):
        raise untimed_input()
    seeds = [np.concatenate([g.to_internal(t, ids) for t, ids in r.seed_groups()])
             for r in requests]
    times = [seed_times(g, r, s) if temporal else None for r, s in zip(requests, seeds,
                                                                        strict=True)]

    def hop(rows, keys, req, fan, rep, hop, bounds, last):
        sampler.kernel_calls += 1
        return typed_ops.sample_typed_neighbors(g, rows, rows, keys, req, fan, rep,
                                                sampler.seed, hop, bounds=bounds, last=last)

    tables = [fanout_table(g, r.num_neighbors) for r in requests]
    got = sample_trees(hop, seeds, requests, tables, times, [True] * len(requests),
                       sampler.temporal_strategy == "last", g.num_nodes, len(g.edge_types))
    out = []
    for r, t, (tree, v, n, e) in zip(requests, times, got, strict=True):
        b = sampler._batch(r, v, n, e)
        mark_trees(b, tree, v, g.node_types, g.node_type_offset, t)
        out.append(b)
    return out


def sample_trees(hop_fn, seeds: list[np.ndarray], requests: Sequence, tables: list, times: list,
                 disjoint: Sequence[bool], last, num_nodes: int, n_rel: int,
                 n_hops: int | None = None) -> list[tuple]:
    """Every request's ``(tree, node, nodes per hop, edges per hop)`` with one ``hop_fn`` call
    per hop: :func:`multi_hop` over pair ids ``b * N + v`` for the
    ``disjoint`` requests (plain ids for the others: tree 0), each node bounded by its seed's
    time for the requests with ``times`` (``None``: no time).

    ``hop_fn(rows, keys, req, fanouts, replace, hop, bounds, last)`` is the typed kernel's
    call (``bounds``, ``last`` as :func:`~mnmg_sampler.ops.typed.sample_typed_neighbors` takes
    them; ``None`` when no active request has time, ``TIME_MAX`` for the untimed ones);
    ``tables`` are the requests' fanout tables; ``seeds`` ids of ``hop_fn``'s space
    (``N = num_nodes`` of them); ``last`` per request or for all: ``"last"`` instead of
    ``"uniform"``; ``n_hops`` (default: the deepest table) is given over ranks, where every
    rank runs the deepest request of any rank."""
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
                   hops: list[tuple]) -> HeteroMiniBatch:
    """A :class:`HeteroMiniBatch` (without ``x``/``y``) from one request's internal ``n_id``
    (seeds first, then hop by hop; ``n_nodes`` per hop) and its sampled edges per hop
    ``(src, dst0, counts, relation, edge id)`` (batch indices; ``counts[i]`` edges from
    ``dst0 + i``: :func:`~mnmg_sampler.ops.typed.group_hops_by_relation`'s), as
    :func:`multi_hop` gives them to the single-process and distributed samplers."""
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
    return HeteroMiniBatch(
        n_id=n_id, edge_index=edge_index, e_id=e_id, input_type=req.input_type,
        input_id=torch.as_tensor(np.asarray(input_id, np.int64)),
        batch_size=int(req.seeds.size), num_sampled_nodes=n_sampled,
        num_sampled_edges=e_sampled, key=int(req.key))


def sample_hetero(graph: TypedGraph, input_nodes: tuple[str, object], num_neighbors, *,
                  seed: int = 0, key: int = 0, replace: bool = False,
                  disjoint: bool | None = None, time_attr: str | None = None,
                  input_time=None, temporal_strategy: str = "uniform") -> HeteroMiniBatch:
    """Sample one minibatch of ``graph`` in this process: ``input_nodes=(type, ids)``,
    ``num_neighbors`` a list (every relation) or a dict per edge type (PyG's); ``disjoint``,
    ``time_attr``, ``input_time`` and ``temporal_strategy`` as PyG's (docs/temporal.md)."""
    if not (isinstance(input_nodes, tuple) and len(input_nodes) == 2
            and isinstance(input_nodes[0], str)):
        raise SamplingInputError(f"input_nodes is {type(input_nodes).__name__}, not a "
                                 "(node type, ids) pair", "the seeds' type is unknown",
                                 "pass input_nodes=('paper', ids), as PyG's NeighborLoader")
    t, ids = input_nodes
    sampler = HeteroSampler(graph, seed, disjoint=disjoint, time_attr=time_attr,
                            temporal_strategy=temporal_strategy)
    return sampler.sample([HeteroSampleRequest(t, ids, num_neighbors, key, replace,
                                               input_time=input_time)])[0]
