"""Disjoint and temporal sampling's options, times and trees (PyG's ``disjoint``, ``time_attr``,
``input_time``, ``temporal_strategy``): checked and resolved here, sampled by
:func:`~mnmg_sampler.sampling.sampler.sample_trees` in one process and over ranks
(:mod:`mnmg_sampler.distributed.sampler`, in new ids).

Disjoint: seed ``b`` of a request grows its own tree, so a node reached from two seeds appears
once per tree, and ``batch[t]`` names every node's seed (PyG's ``batch`` vector). While sampling,
a node of tree ``b`` is the pair id ``b * N + v`` (``N`` nodes, ``v`` internal), so the sampler's
one dedup per hop (:func:`~mnmg_sampler.sampling.sampler.run_hops`) dedups within each tree; draws
are keyed on ``v``, so each tree equals that seed sampled alone with the same key.

Temporal (always disjoint, as PyG requires): every node of tree ``b`` is bounded by the seed's
time (``input_time``, default its node time), one typed kernel call per hop for every relation
and request. Over ranks the options travel with each request (:func:`check_request_time`). See
docs/temporal.md#sampling.
"""

from __future__ import annotations

import numpy as np
import torch

from ..errors import SamplingInputError
from ..ops.typed import STRATEGIES
from .batch import HeteroMiniBatch

__all__ = ["TIME_MAX", "check_request_time", "check_temporal_options", "check_time_options",
           "check_tree_ids", "input_times", "link_time_options", "mark_trees", "num_seeds",
           "seed_times", "untimed_input"]

TIME_MAX = np.iinfo(np.int64).max


def check_temporal_options(graph, time_attr: str | None, temporal_strategy: str,
                           disjoint: bool | None) -> bool:
    """Validate the sampler's temporal options; returns the effective ``disjoint``."""
    if temporal_strategy not in STRATEGIES:
        raise SamplingInputError(f"temporal_strategy is {temporal_strategy!r}",
                                 "no temporal draw is defined for it",
                                 f"use one of {list(STRATEGIES)}")
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


def input_times(t, n: int) -> np.ndarray | None:
    """``input_time`` ``t`` as int64 ``[n]`` (``None`` when not given), or
    :class:`SamplingInputError` for another length or a non-integer dtype."""
    if t is None:
        return None
    if torch.is_tensor(t):
        t = t.detach().cpu().numpy()
    t = np.asarray(t)
    if t.dtype.kind not in "iu" or t.ravel().size != n:
        raise SamplingInputError(
            f"input_time is a {t.dtype} array of {t.size} values for {n} seeds",
            "each seed needs one int64 time", "pass one integer time per seed")
    if t.dtype == np.uint64 and t.size and int(t.max()) > TIME_MAX:
        raise SamplingInputError("input_time has values above int64's range",
                                 "times are int64", "pass int64 times")
    return np.ascontiguousarray(t, dtype=np.int64).ravel()


def untimed_input() -> SamplingInputError:
    return SamplingInputError("input_time is given but time_attr is not set",
                              "the times would be ignored and the future sampled",
                              "pass time_attr (the graph's time name) with input_time")


def _no_seed_time() -> SamplingInputError:
    return SamplingInputError("temporal sampling without input_time on a graph with edge "
                              "time only", "the seeds have no time to bound their neighbors",
                              "pass input_time (one time per seed), as PyG's NeighborLoader")


def seed_times(graph, req, ids: np.ndarray) -> np.ndarray:
    """int64 time of each seed: ``req.input_time`` or, by default, the seed's node time
    (``graph.node_time[ids]``: ``ids`` in the space ``graph.node_time`` is indexed by)."""
    t = input_times(req.input_time, ids.size)
    if t is not None:
        return t
    if graph.node_time is None:
        raise _no_seed_time()
    return graph.node_time[ids]


def check_time_options(graph, time_attr: str | None, temporal_strategy: str,
                       disjoint: bool | None, input_time, n: int) -> bool:
    """Every check of PyG's temporal options for ``n`` seeds (:func:`check_temporal_options`,
    ``input_time`` only with ``time_attr``, one integer per seed, required without node time);
    returns the effective ``disjoint``."""
    dj = check_temporal_options(graph, time_attr, temporal_strategy, disjoint)
    t = input_times(input_time, n)
    if time_attr is None and t is not None:
        raise untimed_input()
    if time_attr is not None and t is None and graph.node_time is None:
        raise _no_seed_time()
    return dj


def link_time_options(graph, n_edges: int, edge_label_time, time_attr: str | None,
                      temporal_strategy: str, disjoint: bool | None) -> dict:
    """A link loader's temporal options, checked (PyG's ``edge_label_time``: one integer per
    seed edge, required with ``time_attr`` and only with it): keyword arguments of
    :func:`~mnmg_sampler.sampling.link.build_link_request`."""
    # as PyG's loaders: temporal sampling is disjoint whatever ``disjoint`` (default False) says
    dj = check_temporal_options(graph, time_attr, temporal_strategy, disjoint or None)
    try:
        t = input_times(edge_label_time, n_edges)
    except SamplingInputError as e:
        raise SamplingInputError(str(e).replace("input_time", "edge_label_time").replace(
            "seeds", "seed edges"), "the loader cannot be built",
            "pass one integer time per column of edge_label_index") from e
    if time_attr is None and t is not None:
        raise SamplingInputError("edge_label_time is given but time_attr is not set",
                                 "the times would be ignored and the future sampled",
                                 "pass time_attr (the graph's time name) with edge_label_time")
    if time_attr is not None and t is None:
        raise SamplingInputError("time_attr is set but edge_label_time is not given",
                                 "the seed edges have no time to bound their subgraphs",
                                 "pass edge_label_time (one time per seed edge), as PyG's "
                                 "LinkNeighborLoader")
    return {"edge_label_time": t, "time_attr": time_attr,
            "temporal_strategy": temporal_strategy, "disjoint": dj}


def check_request_time(graph, req) -> bool:
    """:func:`check_time_options` of a request carrying its own options (the distributed
    sampler's)."""
    return check_time_options(graph, req.time_attr, req.temporal_strategy, req.disjoint,
                              req.input_time, num_seeds(req))


def num_seeds(req) -> int:
    """Seeds of a request over every type (a link batch's sources, then its destinations of
    another type): the trees of disjoint sampling, one time each."""
    return sum(int(ids.size) for _, ids in req.seed_groups())


def check_tree_ids(n_seeds: int, num_nodes: int) -> None:
    """:class:`SamplingInputError` when tree pair ids ``seed * nodes + node`` overflow."""
    if n_seeds and n_seeds > (2**62) // max(num_nodes, 1):
        raise SamplingInputError(f"{n_seeds} seeds on a graph of {num_nodes} nodes",
                                 "disjoint tree ids (seed * nodes + node) overflow int64",
                                 "use fewer seeds per minibatch")


def mark_trees(b: HeteroMiniBatch, tree: np.ndarray, internal: np.ndarray, node_types,
               node_type_offset: np.ndarray, times: np.ndarray | None) -> None:
    """Set PyG's ``batch`` vector per node type (the seed of every node, ``tree``, in ``n_id``
    order given the nodes' ``internal`` ids) and ``seed_time`` (``times``, if any) on ``b``."""
    types = np.searchsorted(node_type_offset, internal, side="right") - 1
    b.batch = {name: torch.from_numpy(tree[types == t]) for t, name in enumerate(node_types)}
    if times is not None:
        b.seed_time = torch.from_numpy(times)
