"""Distributed feature store: each rank holds the feature rows and labels of its own nodes.

:meth:`DistFeatureStore.fetch` is collective. It gathers the rows of every request's ``n_id`` in
one exchange each way: ids go to their owners, rows come back. Labels travel in the same
payload as features, their int64 bits reinterpreted as two float32 columns (exact, no rounding).
"""

from __future__ import annotations

import mmap
from collections.abc import Sequence

import numpy as np
import torch

from .collective import Exchanger
from .partition_book import PartitionBook

PLACEMENTS = ("host", "pinned", "device")


def _release(arr) -> None:
    """Drop the resident pages of a memory-mapped array from this process (they stay in the
    page cache), so a file copied into the table is not counted twice in the rank's RSS."""
    mm = getattr(arr, "_mmap", None)  # numpy.memmap's mapping
    if mm is not None and hasattr(mm, "madvise") and hasattr(mmap, "MADV_DONTNEED"):
        mm.madvise(mmap.MADV_DONTNEED)


class DistFeatureStore:
    """Feature rows and labels of one partition, fetched across ranks by new (relabelled) id.

    Args:
        part: this rank's partition (``x`` and/or ``y`` may be ``None``).
        exchanger: the sampler's exchanger (same process group).
        placement: ``host`` (memory-mapped / host memory), ``pinned`` (page-locked host memory,
            CUDA only) or ``device`` (on ``device``). Decided once, here, in the owning process.
        device: the device for ``placement='device'``.
    """

    def __init__(self, part, exchanger: Exchanger, placement: str = "host",
                 device: torch.device | None = None) -> None:
        from ..errors import ConfigError

        if placement not in PLACEMENTS:
            raise ConfigError(f"features.placement: unknown placement {placement!r}",
                              "features cannot be placed", f"use one of {PLACEMENTS}")
        self.ex = exchanger
        self.book = PartitionBook(torch.from_numpy(np.asarray(part.boundaries, np.int64)))
        self.lo = int(part.boundaries[part.rank])
        n_local = int(part.indptr.shape[0] - 1)
        self.has_x, self.has_y = part.x is not None, part.y is not None
        F = int(part.x.shape[1]) if self.has_x else 0
        # One row table (one copy of the mapped arrays): features, then the label's 8 bytes as
        # two float32 columns, so one exchange carries both, bit-exact.
        table = np.empty((n_local, F + 2), np.float32)
        if self.has_x:
            table[:, :F] = part.x
        y = np.ascontiguousarray(part.y if self.has_y else np.zeros(n_local), dtype=np.int64)
        table[:, F:] = y.view(np.float32).reshape(n_local, 2)
        for mapped in (part.x, part.y):  # the table is the copy in use: unmap the file's pages
            _release(mapped)
        table = torch.from_numpy(table)
        if placement == "pinned":
            table = table.pin_memory()
        elif placement == "device":
            table = table.to(device)
        self.table = table
        self.num_features = F
        self.placement = placement

    @property
    def enabled(self) -> bool:
        return self.has_x or self.has_y

    def fetch(self, n_ids: Sequence[np.ndarray]) -> list[tuple[torch.Tensor | None,
                                                              torch.Tensor | None]]:
        """Collective: ``(x, y)`` rows of each array of new ids, in order."""
        sizes = [int(a.size) for a in n_ids]
        ids = np.concatenate(n_ids) if n_ids else np.empty(0, np.int64)
        owner = self.book.owner(torch.from_numpy(ids)).numpy()
        perm = np.argsort(owner.astype(np.int16 if self.ex.world_size < 2**15 else np.int64),
                          kind="stable")
        send_counts = torch.from_numpy(np.bincount(owner, minlength=self.ex.world_size)
                                       .astype(np.int64))
        recv, recv_counts = self.ex.exchange(torch.from_numpy(ids[perm]), send_counts)
        rows = self.table[(recv - self.lo).to(self.table.device)].cpu()
        back = self.ex.payload(rows, recv_counts.tolist(), send_counts.tolist())
        out = torch.empty_like(back)
        out[torch.from_numpy(perm)] = back
        F = self.num_features
        res = []
        for chunk in torch.split(out, sizes):
            x = chunk[:, :F].contiguous() if self.has_x else None
            y = chunk[:, F:].contiguous().view(torch.int64).reshape(-1) if self.has_y else None
            res.append((x, y))
        return res
