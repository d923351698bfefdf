"""The minibatch a sampler returns, in PyG NeighborLoader's conventions."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TypeVar

import torch

_B = TypeVar("_B", bound="MiniBatch")


@dataclass
class MiniBatch:
    """One sampled subgraph.

    Attributes:
        n_id: global node ids, seeds first, then each hop's newly reached nodes.
        edge_index: ``[2, E]`` local ids; row 0 = sampled neighbor, row 1 = the node it was
            sampled for (message flow source -> target, as in PyG).
        e_id: edge id of every sampled edge.
        input_id: position of each seed in the loader's ``input_nodes`` (or ``arange``).
        batch_size: number of seeds; ``n_id[:batch_size]`` are the seeds.
        num_sampled_nodes: nodes per hop, ``[batch_size, new in hop 1, ...]``.
        num_sampled_edges: edges per hop, ``[hop 1, hop 2, ...]``.
        x, y: feature rows and labels of ``n_id`` when a feature store is attached.
        key: the request key the RNG used (reproduces this batch).
    """

    n_id: torch.Tensor
    edge_index: torch.Tensor
    e_id: torch.Tensor
    input_id: torch.Tensor
    batch_size: int
    num_sampled_nodes: list[int]
    num_sampled_edges: list[int]
    x: torch.Tensor | None = None
    y: torch.Tensor | None = None
    key: int = 0
    meta: dict = field(default_factory=dict)

    @property
    def num_nodes(self) -> int:
        return int(self.n_id.numel())

    def __repr__(self) -> str:
        """Shapes, not contents (PyG's ``Data`` style): ``MiniBatch(n_id=[N], ...)``."""
        parts = []
        for f in fields(self):
            v = getattr(self, f.name)
            if v is None or (f.name == "meta" and not v):
                continue
            if torch.is_tensor(v):
                parts.append(f"{f.name}=[{', '.join(str(d) for d in v.shape)}]")
            elif f.name == "meta":
                parts.append(f"meta={{{', '.join(map(str, v))}}}")
            else:
                parts.append(f"{f.name}={v}")
        return f"MiniBatch({', '.join(parts)})"

    def to(self: _B, device: torch.device | str, non_blocking: bool = False) -> _B:
        """A copy with every tensor on ``device`` (of the same class: a ``LinkMiniBatch`` stays
        one)."""
        kw = {}
        for f in fields(self):
            v = getattr(self, f.name)
            kw[f.name] = v.to(device, non_blocking=non_blocking) if torch.is_tensor(v) else v
        return type(self)(**kw)

    def equal(self, other: MiniBatch) -> bool:
        """Bit-for-bit equality of every field (tensors compared exactly)."""
        for f in fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            if torch.is_tensor(a) or torch.is_tensor(b):
                if not (torch.is_tensor(a) and torch.is_tensor(b)):
                    return False
                if a.dtype != b.dtype or a.shape != b.shape or not torch.equal(a, b):
                    return False
            elif a != b:
                return False
        return True

    def to_pyg(self):
        """Convert to ``torch_geometric.data.Data`` (needs the ``pyg`` extra).

        The fields are those of a PyG ``NeighborLoader`` batch (``n_id``, ``e_id``,
        ``input_id``, ``batch_size``, ``num_sampled_nodes``, ``num_sampled_edges``,
        ``edge_index``, ``x``, ``y``), so ``model(data.x, data.edge_index)`` works as with PyG.
        """
        try:
            from torch_geometric.data import Data
        except ImportError as e:
            from ..errors import MissingDependencyError

            raise MissingDependencyError(
                "torch_geometric is not installed",
                "MiniBatch.to_pyg() cannot build a Data object",
                "pip install 'mnmg-sampler[pyg]'",
            ) from e
        data = Data(edge_index=self.edge_index, n_id=self.n_id, e_id=self.e_id,
                    input_id=self.input_id, batch_size=self.batch_size,
                    num_sampled_nodes=self.num_sampled_nodes,
                    num_sampled_edges=self.num_sampled_edges, num_nodes=self.num_nodes)
        if self.x is not None:
            data.x = self.x
        if self.y is not None:
            data.y = self.y
        return data


@dataclass
class LinkMiniBatch(MiniBatch):
    """A sampled subgraph around a batch of seed edges (PyG's ``LinkNeighborLoader`` output).

    Beyond :class:`~mnmg_sampler.sampling.batch.MiniBatch` (``n_id`` starts with the ``batch_size``
    distinct, ascending endpoints of the batch's positive and negative edges; ``input_id`` holds
    the positions of the positive edges in ``edge_label_index``):

    Attributes:
        edge_label_index: ``[2, L]`` local ids into ``n_id``; positives first, then (binary mode)
            ``amount`` negatives per positive, positive by positive.
        edge_label: ``[L]`` labels (binary: positives' labels, or 1, then 0 for negatives;
            ``None`` without labels and negatives).
        src_index, dst_pos_index: triplet mode, ``[P]`` local ids of each positive's endpoints.
        dst_neg_index: triplet mode, ``[P, amount]`` (``[P]`` when ``amount == 1``).
    """

    edge_label_index: torch.Tensor | None = None
    edge_label: torch.Tensor | None = None
    src_index: torch.Tensor | None = None
    dst_pos_index: torch.Tensor | None = None
    dst_neg_index: torch.Tensor | None = None

    def to_pyg(self):
        """Convert to ``torch_geometric.data.Data`` with the link fields (needs the pyg extra)."""
        data = super().to_pyg()
        for name in ("edge_label_index", "edge_label", "src_index", "dst_pos_index",
                     "dst_neg_index"):
            v = getattr(self, name)
            if v is not None:
                setattr(data, name, v)
        return data
