"""Disjoint and temporal multi-hop sampling of a typed graph in one process (PyG's ``disjoint``,
``time_attr``, ``input_time``, ``temporal_strategy``).

Disjoint: seed ``b`` of a request grows its own tree, so a node reached from two seeds appears
twice, once per tree, and ``batch[t]`` names the seed of every node (PyG's ``batch`` vector).
While sampling, a node of tree ``b`` is the pair id ``b * N + v`` (``N`` nodes in the graph,
``v`` internal), so the one dedup per hop of :class:`~mnmg_sampler.hetero_sampler.HeteroSampler`
dedups within each tree. Draws are keyed on ``v`` as without ``disjoint``, so each tree equals
that seed sampled alone with the same key.

Temporal: every node of tree ``b`` is bounded by the seed's time (``input_time``, default the
seed's node time) and one call of :func:`~mnmg_sampler.ops.typed.sample_typed_neighbors`
(with ``bounds``) per hop serves every relation and request. Temporal sampling is disjoint
(as PyG requires).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from .errors import SamplingInputError
from .hetero_batch import HeteroMiniBatch
from .ops import temporal as temporal_ops
from .ops import typed as typed_ops
from .sampler import renumber_hop

__all__ = ["check_temporal_options", "sample_disjoint", "seed_times"]

TIME_MAX = np.iinfo(np.int64).max


def check_temporal_options(graph, time_attr: str | None, temporal_strategy: str,
                           disjoint: bool | None) -> bool:
    """Validate the sampler's temporal options; returns the effective ``disjoint``."""
    if temporal_strategy not in temporal_ops.STRATEGIES:
        raise SamplingInputError(f"temporal_strategy is {temporal_strategy!r}",
                                 "no temporal draw is defined for it",
                                 f"use one of {list(temporal_ops.STRATEGIES)}")
    if time_attr is not None:
        if graph.time_attr is None:
            raise SamplingInputError(f"time_attr={time_attr!r} but graph '{graph.name}' has no "
                                     "time", "no neighbor could be filtered by time",
                                     "load the graph with load_temporal_graph(..., time_attr) "
                                     "or the dict keys edge_time / node_time")
        if time_attr != graph.time_attr:
            raise SamplingInputError(f"time_attr={time_attr!r} but graph '{graph.name}' holds "
                                     f"time {graph.time_attr!r}", "the times would not match",
                                     f"pass time_attr={graph.time_attr!r}")
        if disjoint is False:
            raise SamplingInputError("disjoint=False with time_attr",
                                     "a node reached from seeds of different times has no "
                                     "single time bound", "leave disjoint unset or True")
        return True
    return bool(disjoint)


def seed_times(graph, req, internal: np.ndarray) -> np.ndarray:
    """int64 time of each seed: ``req.input_time`` or, by default, the seed's node time."""
    if req.input_time is not None:
        t = req.input_time
        if torch.is_tensor(t):
            t = t.detach().cpu().numpy()
        t = np.asarray(t)
        if t.dtype.kind not in "iu" or t.ravel().size != internal.size:
            raise SamplingInputError(
                f"input_time is a {t.dtype} array of {t.size} values for {internal.size} seeds",
                "each seed needs one int64 time", "pass one integer time per seed")
        return np.ascontiguousarray(t, dtype=np.int64).ravel()
    if graph.node_time is None:
        raise SamplingInputError("temporal sampling without input_time on a graph with edge "
                                 "time only", "the seeds have no time to bound their neighbors",
                                 "pass input_time (one time per seed), as PyG's NeighborLoader")
    return graph.node_time[internal]


def sample_disjoint(sampler, requests: Sequence) -> list[HeteroMiniBatch]:
    """Sample ``requests`` as disjoint trees (with time when ``sampler.time_attr`` is set): one
    kernel call per hop for all of them; ``sampler`` is a :class:`HeteroSampler`."""
    from .hetero_sampler import fanout_table

    g = sampler.graph
    N = max(g.num_nodes, 1)
    temporal = sampler.time_attr is not None
    if not temporal and any(r.input_time is not None for r in requests):
        raise SamplingInputError("input_time is given but time_attr is not set",
                                 "the times would be ignored and the future sampled",
                                 "pass time_attr (the graph's time name) with input_time")
    Q = len(requests)
    seeds = [g.to_internal(r.input_type, r.seeds) for r in requests]
    for s in seeds:
        if s.size and s.size > (2**62) // N:
            raise SamplingInputError(f"{s.size} seeds on a graph of {N} nodes",
                                     "disjoint tree ids (seed * nodes + node) overflow int64",
                                     "use fewer seeds per minibatch")
    times = [seed_times(g, r, s) if temporal else None for r, s in zip(requests, seeds,
                                                                        strict=True)]
    tables = [fanout_table(g, r.num_neighbors) for r in requests]
    last = np.full(Q, sampler.temporal_strategy == "last", np.uint8)
    n_hops = max((t.shape[0] for t in tables), default=0)
    nid = [np.arange(s.size, dtype=np.int64) * N + s for s in seeds]  # pair ids b * N + v
    frontier = list(nid)
    front_start = [0] * Q
    n_nodes = [[s.size] for s in seeds]
    edges: list[list[tuple]] = [[] for _ in requests]
    for hop in range(n_hops):
        active = [i for i in range(Q) if hop < tables[i].shape[0]]
        sizes = np.array([frontier[i].size for i in active], np.int64)
        pairs = _cat([frontier[i] for i in active])
        tree, rows = np.divmod(pairs, N)
        keys = np.repeat(np.array([requests[i].key for i in active], np.int64), sizes)
        req = np.repeat(np.arange(len(active), dtype=np.int64), sizes)
        fan = np.stack([tables[i][hop] for i in active]) if active else np.zeros(
            (0, len(g.edge_types)), np.int64)
        rep = np.array([requests[i].replace for i in active], np.uint8)
        bound = _cat([times[i][tree[a:b]] for i, a, b in
                      zip(active, np.r_[0, np.cumsum(sizes)[:-1]], np.cumsum(sizes),
                          strict=True)]) if temporal else None
        counts, nbr, rel, eid = typed_ops.sample_typed_neighbors(
            g, rows, rows, keys, req, fan, rep, sampler.seed, hop, bounds=bound,
            last=last[active] if temporal else None)
        sampler.kernel_calls += 1
        nbr_pairs = np.repeat(tree, counts) * N + nbr
        node_off, cand_off, new, new_off, local = renumber_hop(
            [nid[i] for i in active], sizes, counts, nbr_pairs)
        for j, i in enumerate(active):
            c0, c1 = cand_off[j], cand_off[j + 1]
            cnt = counts[node_off[j]:node_off[j + 1]]
            dst = np.repeat(np.arange(front_start[i], front_start[i] + cnt.size), cnt)
            edges[i].append((local[c0:c1], dst, rel[c0:c1], eid[c0:c1]))
            fresh = new[new_off[j]:new_off[j + 1]]
            front_start[i] = nid[i].size
            nid[i] = np.concatenate([nid[i], fresh])
            frontier[i] = fresh
            n_nodes[i].append(int(fresh.size))
    out = []
    for i in range(Q):
        tree, v = np.divmod(nid[i], N)
        b = sampler._batch(requests[i], v, n_nodes[i], edges[i])
        types = g.type_of(v)
        b.batch = {name: torch.from_numpy(tree[types == t])
                   for t, name in enumerate(g.node_types)}
        if temporal:
            b.seed_time = torch.from_numpy(times[i])
        out.append(b)
    return out


def _cat(arrays: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(arrays) if arrays else np.zeros(0, np.int64)
