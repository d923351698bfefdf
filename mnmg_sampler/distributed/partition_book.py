"""Which rank owns a node: pure torch, on the ids' own device, for any integer dtype.

Partitions are contiguous id ranges (:mod:`mnmg_sampler.graph.partition`), so the owner of ``v``
is the last ``r`` with ``boundaries[r] <= v``: one ``torch.searchsorted``. The boundaries are
copied once to each device that asks, so ids on a GPU are never moved to the host (the
``nid2partid`` + ``.numpy()`` pattern that breaks on CUDA tensors elsewhere).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ..errors import PartitionError, SamplingInputError

__all__ = ["PartitionBook"]

# Dtypes torch.searchsorted handles natively; others (uint16/32/64) are widened to int64.
_NATIVE = (torch.int8, torch.uint8, torch.int16, torch.int32)


class PartitionBook:
    """Owner rank and local row of global (new) node ids.

    Example::

        >>> book = PartitionBook([0, 3, 7, 10])
        >>> book.owner(torch.tensor([0, 2, 3, 9], dtype=torch.int32))
        tensor([0, 0, 1, 2])
        >>> book.local(torch.tensor([0, 2, 3, 9]))
        tensor([0, 2, 0, 2])

    ``owner`` and ``local`` do not range-check (an id ``>= num_nodes`` maps to ``num_parts``,
    a negative one to ``-1``); call :meth:`check` on untrusted ids first.
    """

    def __init__(self, boundaries: Sequence[int] | np.ndarray | torch.Tensor) -> None:
        if torch.is_tensor(boundaries):
            b = boundaries.detach().to("cpu", torch.int64).clone()
        else:
            b = torch.as_tensor(np.asarray(boundaries, dtype=np.int64).copy())
        if b.dim() != 1 or b.numel() < 2 or int(b[0]) != 0 or bool((b[1:] < b[:-1]).any()):
            raise PartitionError(
                f"invalid partition boundaries {b.tolist()[:8]}",
                "node owners cannot be computed",
                "pass non-decreasing boundaries [0, ..., num_nodes] with num_parts + 1 entries "
                "(Partition.boundaries)",
            )
        self._boundaries = b
        self._cache: dict[tuple[torch.device, torch.dtype], torch.Tensor] = {}

    @property
    def boundaries(self) -> torch.Tensor:
        """int64 CPU tensor ``[num_parts + 1]``."""
        return self._boundaries

    @property
    def num_parts(self) -> int:
        return int(self._boundaries.numel() - 1)

    @property
    def num_nodes(self) -> int:
        return int(self._boundaries[-1])

    def _on(self, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        """Boundaries on ``device`` in ``dtype`` (int64 when they do not fit ``dtype``)."""
        key = (device, dtype)
        b = self._cache.get(key)
        if b is None:
            fits = dtype in _NATIVE and self.num_nodes <= torch.iinfo(dtype).max
            b = self._boundaries.to(device=device, dtype=dtype if fits else torch.int64)
            self._cache[key] = b
        return b

    def _prepare(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if not torch.is_tensor(ids):
            ids = torch.as_tensor(ids)
        if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
            raise SamplingInputError(
                f"node ids have dtype {ids.dtype}",
                "owners are only defined for integer ids",
                "pass an integer tensor (int32 or int64)",
            )
        b = self._on(ids.device, ids.dtype)
        if b.dtype != ids.dtype:  # ids of a narrow dtype cannot be compared with wide bounds
            ids = ids.to(b.dtype)
        return ids, b

    def owner(self, ids: torch.Tensor) -> torch.Tensor:
        """int64 rank owning each id, same shape and device as ``ids``."""
        ids, b = self._prepare(ids)
        return torch.searchsorted(b, ids, right=True) - 1

    def local(self, ids: torch.Tensor) -> torch.Tensor:
        """int64 row of each id within its owner's part: ``ids - boundaries[owner(ids)]``."""
        return self.locate(ids)[1]

    def locate(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(owner(ids), local(ids))`` with one search."""
        ids, b = self._prepare(ids)
        own = torch.searchsorted(b, ids, right=True) - 1
        start = b.to(torch.int64)[own.clamp(0, self.num_parts - 1)]
        return own, ids.to(torch.int64) - start

    def check(self, ids: torch.Tensor, what: str = "node") -> None:
        """Raise :class:`SamplingInputError` if any id is outside ``[0, num_nodes)``."""
        ids, _ = self._prepare(ids)  # widened when num_nodes does not fit the ids' dtype
        if ids.numel() == 0:
            return
        bad = (ids < 0) | (ids >= self.num_nodes)
        if bool(bad.any()):
            first = int(ids[bad].reshape(-1)[0])
            raise SamplingInputError(
                f"{what} id {first} is out of range for a partitioned graph with "
                f"{self.num_nodes} nodes",
                "no rank owns it",
                f"pass ids in [0, {self.num_nodes}) (new ids; map original ids with "
                "orig_to_new)",
            )

    def __repr__(self) -> str:
        return f"PartitionBook(num_parts={self.num_parts}, num_nodes={self.num_nodes})"
