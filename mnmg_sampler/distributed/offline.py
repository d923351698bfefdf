"""Seed sets of a partitioned graph, gathered across ranks without pickling.

Used by ``mnmg-sampler sample --partitions`` (:func:`nonisolated_bits_everywhere`: a bitmap, one
bit per node) and the distributed benchmarks (:func:`global_nonisolated`: an id array), which
draw the same epoch seed order as one process.
"""

from __future__ import annotations

import numpy as np
import torch

from ..graph.node_bits import nonisolated_bits
from .collective import all_gather_1d

WORD_CHUNK = 1 << 17  # words per all-reduce (1 MiB): the collective's buffers stay small


def global_nonisolated(part, group=None) -> np.ndarray:
    """Sorted original ids of nodes with at least one neighbor, gathered from every rank."""
    deg = np.diff(np.asarray(part.indptr))
    mine = np.asarray(part.orig_ids)[deg > 0]
    allv = all_gather_1d(torch.from_numpy(np.ascontiguousarray(mine, np.int64)), group)
    return np.sort(np.concatenate([t.numpy() for t in allv]))


def nonisolated_bits_everywhere(part, group=None) -> np.ndarray:
    """Collective: bitmap (uint64 words, bit ``i`` = original id ``i``) of the nodes with at
    least one neighbor, the same on every rank: each rank sets its own part's bits, then the
    words are summed across ranks :data:`WORD_CHUNK` at a time (parts own disjoint nodes, so
    the sum is the union). ``num_nodes / 8`` bytes per rank, no id array of the graph."""
    import torch.distributed as dist

    words = nonisolated_bits(part.indptr, int(part.num_nodes), rows=part.orig_ids)
    flat = words.view(np.int64)  # disjoint bits: the int64 sum carries nowhere
    for lo in range(0, flat.size, WORD_CHUNK):
        dist.all_reduce(torch.from_numpy(flat[lo:lo + WORD_CHUNK]), group=group)
    return words
