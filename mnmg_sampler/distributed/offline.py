"""Seed sets of a partitioned graph, gathered across ranks without pickling.

Used by ``mnmg-sampler sample --partitions`` and the distributed benchmarks, which draw the same
epoch seed order as one process.
"""

from __future__ import annotations

import numpy as np
import torch

from .collective import all_gather_1d


def global_nonisolated(part, group=None) -> np.ndarray:
    """Sorted original ids of nodes with at least one neighbor, gathered from every rank."""
    deg = np.diff(np.asarray(part.indptr))
    mine = np.asarray(part.orig_ids)[deg > 0]
    allv = all_gather_1d(torch.from_numpy(np.ascontiguousarray(mine, np.int64)), group)
    return np.sort(np.concatenate([t.numpy() for t in allv]))
