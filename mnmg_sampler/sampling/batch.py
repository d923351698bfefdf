"""The minibatch a sampler returns, in PyG's NeighborLoader conventions: one type for every graph.

A batch of a one-type graph holds tensors and ``to_pyg()`` gives a ``Data``; a batch of a typed
graph holds the same fields per node type and per edge type (dicts, every type of the graph an
entry, empty when nothing of it was sampled) and ``to_pyg()`` gives a ``HeteroData``, as PyG's
loaders lay them out. :meth:`MiniBatch.to_homogeneous` reads a one-type typed batch (a PyG
``Data`` with time, sampled through the typed path) as the tensors of a one-type batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TypeVar

import torch

_B = TypeVar("_B", bound="MiniBatch")
EdgeType = tuple[str, str, str]
_PER_EDGE_TYPE = ("edge_index", "e_id", "num_sampled_edges")


def _same(a, b) -> bool:
    """Bit-for-bit equality of tensors, also inside dicts (keys in order)."""
    if isinstance(a, dict) or isinstance(b, dict):
        return (isinstance(a, dict) and isinstance(b, dict) and list(a) == list(b)
                and all(_same(a[k], b[k]) for k in a))
    if torch.is_tensor(a) or torch.is_tensor(b):
        return (torch.is_tensor(a) and torch.is_tensor(b) and a.dtype == b.dtype
                and a.shape == b.shape and torch.equal(a, b))
    return a == b


def _pyg(cls: str):
    try:
        import torch_geometric.data as pyg_data
    except ImportError as e:
        from ..errors import MissingDependencyError

        raise MissingDependencyError("torch_geometric is not installed",
                                     f"to_pyg() cannot build a {cls} object",
                                     "pip install 'mnmg-sampler[pyg]'") from e
    return getattr(pyg_data, cls)


@dataclass
class MiniBatch:
    """One sampled subgraph: tensors for a one-type graph, dicts per type for a typed graph.

    Attributes:
        n_id: global node ids, seeds first, then each hop's newly reached nodes (typed: per
            node type, per-type ids; ``n_id[input_type][:batch_size]`` are the seeds).
        edge_index: ``[2, E]`` local ids; row 0 = sampled neighbor, row 1 = the node it was
            sampled for (message flow source -> target, as in PyG). Typed: per edge type
            ``(src, rel, dst)``, row 0 indexes ``n_id[src]``, row 1 ``n_id[dst]``.
        e_id: edge id of every sampled edge (typed: its column in the relation's input
            ``edge_index``).
        input_id: position of each seed in the loader's ``input_nodes`` (or ``arange``).
        batch_size: number of seeds; ``n_id[:batch_size]`` are the seeds.
        num_sampled_nodes: nodes per hop, ``[batch_size, new in hop 1, ...]`` (typed: per type).
        num_sampled_edges: edges per hop, ``[hop 1, hop 2, ...]`` (typed: per edge type).
        x, y: feature rows and labels of ``n_id`` when a feature store is attached (typed: per
            node type with features / labels).
        key: the request key the RNG used (reproduces this batch).
        input_type: typed only: node type of the seeds (``None`` for a one-type batch).
        batch: disjoint sampling only: the seed (0 .. batch_size - 1) whose subgraph each node
            belongs to (PyG's ``batch`` vector; typed: per node type, empty otherwise).
        seed_time: temporal sampling only: the time of each seed (PyG's ``seed_time``).
    """

    n_id: torch.Tensor | dict[str, torch.Tensor]
    edge_index: torch.Tensor | dict[EdgeType, torch.Tensor]
    e_id: torch.Tensor | dict[EdgeType, torch.Tensor]
    input_id: torch.Tensor
    batch_size: int
    num_sampled_nodes: list[int] | dict[str, list[int]]
    num_sampled_edges: list[int] | dict[EdgeType, list[int]]
    x: torch.Tensor | dict[str, torch.Tensor] | None = None
    y: torch.Tensor | dict[str, torch.Tensor] | None = None
    key: int = 0
    meta: dict = field(default_factory=dict)
    input_type: str | None = None
    batch: torch.Tensor | dict[str, torch.Tensor] | None = None
    seed_time: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.typed:  # per-type stores: a type without rows has no entry
            for name in ("x", "y", "batch"):
                if getattr(self, name) is None:
                    setattr(self, name, {})

    @property
    def typed(self) -> bool:
        """True for a batch of a typed graph (fields per type)."""
        return isinstance(self.n_id, dict)

    @property
    def num_nodes(self) -> int | dict[str, int]:
        if self.typed:
            return {t: int(v.numel()) for t, v in self.n_id.items()}
        return int(self.n_id.numel())

    def __repr__(self) -> str:
        """Shapes, not contents (PyG's ``Data`` style): ``MiniBatch(n_id=[N], ...)``; typed:
        the seeds' type and batch size, nodes per type and edges per relation."""
        name = type(self).__name__
        if self.typed:
            nodes = ", ".join(f"{t}={v.numel()}" for t, v in self.n_id.items())
            edges = ", ".join(f"{'__'.join(et)}={v.shape[1]}"
                              for et, v in self.edge_index.items())
            return (f"{name}(input_type={self.input_type}, batch_size={self.batch_size}, "
                    f"nodes={{{nodes}}}, edges={{{edges}}})")
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
        return f"{name}({', '.join(parts)})"

    def to(self: _B, device: torch.device | str, non_blocking: bool = False) -> _B:
        """A copy with every tensor (also inside dicts) on ``device``, of the same class."""
        def move(v):
            if isinstance(v, dict):
                return {k: move(x) for k, x in v.items()}
            return v.to(device, non_blocking=non_blocking) if torch.is_tensor(v) else v

        return type(self)(**{f.name: move(getattr(self, f.name)) for f in fields(self)})

    def equal(self, other: MiniBatch) -> bool:
        """Bit-for-bit equality of every field (tensors compared exactly, dict keys in order)."""
        return all(_same(getattr(self, f.name), getattr(other, f.name)) for f in fields(self))

    def to_homogeneous(self: _B) -> _B:
        """This batch of a one-type graph (one node type, one relation) as tensors, so that
        ``to_pyg()`` gives a ``Data``; a batch of tensors is returned as it is."""
        if not self.typed:
            return self
        if len(self.n_id) != 1 or len(self.edge_index) != 1:
            from ..errors import SamplingInputError

            raise SamplingInputError(
                f"a batch of {len(self.n_id)} node types and {len(self.edge_index)} relations "
                "read as homogeneous", "its types have no single id space",
                "call to_homogeneous() on batches of one-type graphs only")
        (t,), (et,) = self.n_id, self.edge_index
        kw = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, dict) and f.name != "meta":
                v = v.get(et if f.name in _PER_EDGE_TYPE else t)
            kw[f.name] = v
        kw.update(input_type=None, **({"edge_type": None} if "edge_type" in kw else {}))
        return type(self)(**kw)

    def to_pyg(self):
        """A ``torch_geometric.data.Data`` (one type) or ``HeteroData`` (typed) laid out as PyG's
        ``NeighborLoader`` returns it (needs the ``pyg`` extra): this batch's fields under the
        same names, so ``model(data.x, data.edge_index)`` works as with PyG. Typed: node fields
        per node type, edge fields per edge type, ``input_id``, ``batch_size`` (and
        ``seed_time``) on ``data[input_type]``."""
        if self.typed:
            return self._hetero_data()
        data = _pyg("Data")(edge_index=self.edge_index, n_id=self.n_id, e_id=self.e_id,
                            input_id=self.input_id, batch_size=self.batch_size,
                            num_sampled_nodes=self.num_sampled_nodes,
                            num_sampled_edges=self.num_sampled_edges, num_nodes=self.num_nodes)
        for name in ("x", "y", "batch", "seed_time"):
            if getattr(self, name) is not None:
                setattr(data, name, getattr(self, name))
        return data

    def _hetero_data(self):
        data = _pyg("HeteroData")()
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
class LinkMiniBatch(MiniBatch):
    """A sampled subgraph around a batch of seed edges (PyG's ``LinkNeighborLoader`` output).

    Beyond :class:`MiniBatch`: the seeds of the node sampling are the distinct endpoints
    (ascending) of the batch's positive and negative edges (one type: ``n_id`` starts with
    them; typed: sources first in ``n_id[edge_type[0]]``, destinations first in
    ``n_id[edge_type[2]]``, one sorted list when both are of one type; ``input_type`` is the
    source type, ``batch_size`` its seed count, which ``to_pyg`` sets on no store, as PyG's
    link loader). ``input_id`` holds the positions of the positive edges in the loader's
    ``edge_label_index``.

    Attributes:
        edge_type: typed only: the target relation ``(src, rel, dst)`` of the seed edges.
        edge_label_index: ``[2, L]`` local ids (typed: row 0 into ``n_id[src]``, row 1 into
            ``n_id[dst]``); positives first, then (binary mode) ``amount`` negatives per
            positive, positive by positive.
        edge_label: ``[L]`` labels (binary: positives' labels, or 1, then 0 for negatives;
            ``None`` without labels and negatives).
        src_index, dst_pos_index: triplet mode, ``[P]`` local ids of each positive's endpoints.
        dst_neg_index: triplet mode, ``[P, amount]`` (``[P]`` when ``amount == 1``).
        edge_label_time: temporal: the time of each label edge (binary: ``[L]``, a negative at
            its positive's time; triplet: ``[P]``); ``to_pyg`` puts it where PyG's
            ``LinkLoader`` does (``edge_label_time``, triplet ``seed_time``).

    Disjoint or temporal (``docs/temporal.md``): every endpoint of every label edge grows its own
    tree (sources, then destinations, not de-duplicated); ``batch`` gives each node's positive
    (0 .. P - 1, PyG's ``batch % num_pos``) and ``seed_time`` each tree's time.
    """

    edge_label_index: torch.Tensor | None = None
    edge_label: torch.Tensor | None = None
    src_index: torch.Tensor | None = None
    dst_pos_index: torch.Tensor | None = None
    dst_neg_index: torch.Tensor | None = None
    edge_type: EdgeType | None = None
    edge_label_time: torch.Tensor | None = None

    def to_pyg(self):
        """The node fields of :meth:`MiniBatch.to_pyg`, then the link fields where PyG's
        ``LinkNeighborLoader`` puts them: one type, on the ``Data``; typed,
        ``data[edge_type].input_id``, binary or no negatives ``data[edge_type].edge_label_index``
        and ``.edge_label``, triplet ``data[src].src_index``, ``data[dst].dst_pos_index``,
        ``data[dst].dst_neg_index``."""
        if not self.typed:
            data = super().to_pyg()
            if self.seed_time is not None:  # PyG's link batches carry the label times instead
                del data.seed_time
            for name in ("edge_label_index", "edge_label", "src_index", "dst_pos_index",
                         "dst_neg_index"):
                if getattr(self, name) is not None:
                    setattr(data, name, getattr(self, name))
            if self.edge_label_time is not None:  # PyG: triplet batches carry seed_time
                if self.src_index is not None:
                    data.seed_time = self.edge_label_time
                else:
                    data.edge_label_time = self.edge_label_time
            return data
        data = self._hetero_data()
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


HeteroMiniBatch = MiniBatch  # the public names of the typed batches: one class serves both
HeteroLinkMiniBatch = LinkMiniBatch
