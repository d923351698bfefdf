"""Time for the typed sampler over ranks: the part's times on the graph the kernel reads
(``docs/temporal.md``; each frontier node's time bound travels with its id on the wire,
:mod:`~mnmg_sampler.ops.wire`).

The kernel reads a node's time bound per frontier node and, on a graph with node time only, the
*neighbor's* node time through ``indices`` (new global ids in a part). So every rank holds the
node time of every node by new id: one gather when the sampler is built (8 bytes per node),
which also gives the seeds their default time. Edge times are per local CSR entry, already in
the part. A temporal link loader draws negatives by node time in per-type id order
(:func:`node_time_of_types`: one gather of every part's internal ids when it is built).
"""

from __future__ import annotations

import numpy as np
import torch

from ..system.host_limits import check_allocation
from .collective import agree, all_gather_1d

__all__ = ["attach_part_time", "node_time_of_types"]


def attach_part_time(graph, part, ex, group, node_time: np.ndarray | None = None) -> None:
    """Collective when the part has node time and ``node_time`` is ``None``: set
    ``graph.edge_time`` (per local entry), ``graph.node_time`` (every node, by new id: the given
    one, e.g. the shared topology's, or exchanged) and ``graph.time_attr`` from ``part``.
    ``node_time`` must be given on every rank or on none."""
    tp = part.typed
    graph.time_attr = tp.time_attr
    graph.edge_time = None if tp.edge_time is None else np.asarray(tp.edge_time)
    if tp.node_time is None:  # the same on every rank: every part of a timed graph has it
        return
    if node_time is not None:
        graph.node_time = node_time
        return
    n = int(np.asarray(part.boundaries)[-1])
    own = np.ascontiguousarray(tp.node_time, np.int64)
    if ex.world_size == 1:
        graph.node_time = own
        return
    agree(lambda: check_allocation(f"the node time of all {n:,} nodes on every rank",
                                   8 * 2 * n, "use a machine with more memory, or edge time "
                                   "instead of node time"), group,
          "checking memory for the node time")
    graph.node_time = np.ascontiguousarray(np.concatenate(
        [t.numpy() for t in all_gather_1d(torch.from_numpy(np.array(own)), group)]))


def node_time_of_types(graph, part, types, group=None) -> dict[str, np.ndarray]:
    """Collective on ``group`` (every rank, the same ``types``): the node time of every node of
    each type in ``types``, by per-type id, from ``graph.node_time`` (every node by new id, see
    :func:`attach_part_time`) and every part's internal ids (one gather, 8 bytes per node)."""
    n = int(graph.node_time.shape[0])
    agree(lambda: check_allocation(f"the node time of all {n:,} nodes by internal id",
                                   8 * 2 * n, "use a machine with more memory, or no "
                                   "negatives on a graph with node time"), group,
          "checking memory for the negatives' node times")
    orig = np.concatenate([t.numpy() for t in all_gather_1d(
        torch.from_numpy(np.ascontiguousarray(part.orig_ids, np.int64)), group)])
    by_internal = np.empty(n, np.int64)
    by_internal[orig] = graph.node_time
    tp = part.typed
    off = np.asarray(tp.node_type_offset, np.int64)
    out = {}
    for name in types:
        t = tp.node_types.index(name)
        out[name] = by_internal[off[t]:off[t + 1]].copy()
    return out
