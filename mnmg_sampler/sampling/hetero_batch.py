"""The minibatch of a typed graph, in PyG's hetero NeighborLoader conventions (dicts per type)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import torch

EdgeType = tuple[str, str, str]


@dataclass
class HeteroMiniBatch:
    """One sampled subgraph of a typed graph; every node type and relation of the graph has an
    entry (empty when nothing of it was sampled), as in PyG.

    Attributes:
        n_id: per node type, original per-type ids; ``n_id[input_type][:batch_size]`` are the
            seeds, then each hop's newly reached nodes of that type.
        edge_index: per edge type ``(src, rel, dst)``, ``[2, E]`` local ids: row 0 indexes
            ``n_id[src]`` (the sampled neighbor), row 1 ``n_id[dst]`` (the node it was sampled
            for).
        e_id: per edge type, the edge's column in that relation's input ``edge_index``.
        input_type: node type of the seeds.
        input_id: position of each seed in the caller's input (or ``arange``).
        batch_size: number of seeds.
        num_sampled_nodes: per node type, nodes per hop ``[seeds, new in hop 1, ...]``.
        num_sampled_edges: per edge type, edges per hop ``[hop 1, hop 2, ...]``.
        x, y: per node type with features / labels, rows of ``n_id``.
        key: the request key the RNG used (reproduces this batch).
        batch: disjoint sampling only: per node type, the seed (0 .. batch_size - 1) whose
            subgraph each node belongs to (PyG's ``batch`` vector); empty otherwise.
        seed_time: temporal sampling only: the time of each seed (PyG's ``seed_time``).
    """

    n_id: dict[str, torch.Tensor]
    edge_index: dict[EdgeType, torch.Tensor]
    e_id: dict[EdgeType, torch.Tensor]
    input_type: str
    input_id: torch.Tensor
    batch_size: int
    num_sampled_nodes: dict[str, list[int]]
    num_sampled_edges: dict[EdgeType, list[int]]
    x: dict[str, torch.Tensor] = field(default_factory=dict)
    y: dict[str, torch.Tensor] = field(default_factory=dict)
    key: int = 0
    batch: dict[str, torch.Tensor] = field(default_factory=dict)
    seed_time: torch.Tensor | None = None

    @property
    def num_nodes(self) -> dict[str, int]:
        return {t: int(v.numel()) for t, v in self.n_id.items()}

    def __repr__(self) -> str:
        nodes = ", ".join(f"{t}={v.numel()}" for t, v in self.n_id.items())
        edges = ", ".join(f"{'__'.join(et)}={v.shape[1]}" for et, v in self.edge_index.items())
        return (f"HeteroMiniBatch(input_type={self.input_type}, batch_size={self.batch_size}, "
                f"nodes={{{nodes}}}, edges={{{edges}}})")

    def equal(self, other: HeteroMiniBatch) -> bool:
        """Bit-for-bit equality of every field (tensors compared exactly, dict keys in order)."""
        def same(a, b) -> bool:
            if isinstance(a, dict) or isinstance(b, dict):
                return (isinstance(a, dict) and isinstance(b, dict) and list(a) == list(b)
                        and all(same(a[k], b[k]) for k in a))
            if torch.is_tensor(a) or torch.is_tensor(b):
                return (torch.is_tensor(a) and torch.is_tensor(b) and a.dtype == b.dtype
                        and a.shape == b.shape and torch.equal(a, b))
            return a == b

        return all(same(getattr(self, f.name), getattr(other, f.name)) for f in fields(self))

    def to_pyg(self):
        """A ``torch_geometric.data.HeteroData`` laid out as PyG's hetero ``NeighborLoader``
        returns it (needs the ``pyg`` extra): ``data[t].n_id``, ``data[t].x``, ``data[t].y``,
        ``data[t].num_sampled_nodes``, ``data[et].edge_index``, ``data[et].e_id``,
        ``data[et].num_sampled_edges``, ``data[input_type].input_id`` and ``.batch_size``, and with
        ``disjoint`` ``data[t].batch`` (with time ``data[input_type].seed_time``)."""
        try:
            from torch_geometric.data import HeteroData
        except ImportError as e:
            from ..errors import MissingDependencyError

            raise MissingDependencyError(
                "torch_geometric is not installed",
                "HeteroMiniBatch.to_pyg() cannot build a HeteroData object",
                "pip install 'mnmg-sampler[pyg]'") from e
        data = HeteroData()
        for t, nid in self.n_id.items():
            store = data[t]
            if t in self.x:
                store.x = self.x[t]
            if t in self.y:
                store.y = self.y[t]
            store.n_id = nid
            if t in self.batch:
                store.batch = self.batch[t]
            store.num_nodes = int(nid.numel())
        for et, ei in self.edge_index.items():
            data[et].edge_index = ei
            data[et].e_id = self.e_id[et]
        data.set_value_dict("num_sampled_nodes", self.num_sampled_nodes)
        data.set_value_dict("num_sampled_edges", self.num_sampled_edges)
        data[self.input_type].input_id = self.input_id
        data[self.input_type].batch_size = self.batch_size
        if self.seed_time is not None:
            data[self.input_type].seed_time = self.seed_time
        return data


@dataclass
class HeteroLinkMiniBatch(HeteroMiniBatch):
    """A sampled subgraph around a batch of seed edges of one relation (PyG's hetero
    ``LinkNeighborLoader`` output).

    The seeds of the node sampling are the distinct endpoints (ascending) of the batch's positive
    and negative edges: sources first in ``n_id[edge_type[0]]``, destinations first in
    ``n_id[edge_type[2]]`` (one sorted list when both are of one type); ``num_sampled_nodes[t][0]``
    counts them. ``input_type`` is the source type, ``batch_size`` its seed count (``to_pyg`` sets
    neither, as PyG's link loader).

    Attributes:
        edge_type: the target relation ``(src, rel, dst)`` of the seed edges.
        edge_label_index: ``[2, L]``: row 0 local ids into ``n_id[src]``, row 1 into
            ``n_id[dst]``; positives first, then (binary) ``amount`` negatives per positive.
        edge_label: ``[L]`` (binary: positives' labels, or 1, then 0 per negative); ``None``
            without labels and negatives.
        src_index: triplet, ``[P]`` local ids into ``n_id[src]``.
        dst_pos_index, dst_neg_index: triplet, ``[P]`` and ``[P, amount]`` (``[P]`` when
            ``amount == 1``) local ids into ``n_id[dst]``.
        input_id: positions of the positive edges in the loader's ``edge_label_index``.
        edge_label_time: temporal: the time of each label edge (binary: ``[L]``, a negative at
            its positive's time; triplet: ``[P]``); ``to_pyg`` puts it where PyG's
            ``LinkLoader`` does (``data[edge_type].edge_label_time``, triplet
            ``data[src].seed_time`` and ``data[dst].seed_time``).

    Disjoint or temporal (``docs/temporal.md``): every endpoint of every label edge grows its own
    tree (sources, then destinations, not de-duplicated); ``batch[t]`` gives each node's positive
    (0 .. P - 1, PyG's ``batch % num_pos``) and ``seed_time`` each tree's time.
    """

    edge_type: EdgeType = ("", "", "")
    edge_label_index: torch.Tensor | None = None
    edge_label: torch.Tensor | None = None
    src_index: torch.Tensor | None = None
    dst_pos_index: torch.Tensor | None = None
    dst_neg_index: torch.Tensor | None = None
    edge_label_time: torch.Tensor | None = None

    def to_pyg(self):
        """A ``HeteroData`` laid out as PyG's hetero ``LinkNeighborLoader`` returns it: the node
        fields of :meth:`HeteroMiniBatch.to_pyg`, then ``data[edge_type].input_id``; binary or
        no negatives: ``data[edge_type].edge_label_index`` and ``.edge_label``; triplet:
        ``data[src].src_index``, ``data[dst].dst_pos_index``, ``data[dst].dst_neg_index``."""
        data = super().to_pyg()
        del data[self.input_type].input_id, data[self.input_type].batch_size
        if self.seed_time is not None:  # PyG's link batches carry the label times instead
            del data[self.input_type].seed_time
        s, _, d = self.edge_type
        data[self.edge_type].input_id = self.input_id
        if self.src_index is not None:  # triplet
            data[s].src_index = self.src_index
            data[d].dst_pos_index = self.dst_pos_index
            data[d].dst_neg_index = self.dst_neg_index
            if self.edge_label_time is not None:
                data[s].seed_time = data[d].seed_time = self.edge_label_time
            return data
        data[self.edge_type].edge_label_index = self.edge_label_index
        if self.edge_label is not None:
            data[self.edge_type].edge_label = self.edge_label
        if self.edge_label_time is not None:
            data[self.edge_type].edge_label_time = self.edge_label_time
        return data
