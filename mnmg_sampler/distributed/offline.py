"""Seed sets of a partitioned graph, gathered across ranks without pickling.

Used by ``mnmg-sampler sample --partitions`` and the distributed benchmarks, which draw the same
epoch seed order as one process.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist


def global_nonisolated(part, group=None) -> np.ndarray:
    """Sorted original ids of nodes with at least one neighbor, gathered from every rank."""
    deg = np.diff(np.asarray(part.indptr))
    mine = torch.from_numpy(np.ascontiguousarray(np.asarray(part.orig_ids)[deg > 0], np.int64))
    W = dist.get_world_size(group)
    n = torch.tensor([mine.numel()], dtype=torch.int64)
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(W)]
    dist.all_gather(sizes, n, group=group)
    cap = max(int(t) for t in sizes)
    padded = torch.full((cap,), -1, dtype=torch.int64)
    padded[:mine.numel()] = mine
    bufs = [torch.empty(cap, dtype=torch.int64) for _ in range(W)]
    dist.all_gather(bufs, padded, group=group)
    return np.sort(np.concatenate([b[:int(s)].numpy() for b, s in zip(bufs, sizes,
                                                                         strict=True)]))
