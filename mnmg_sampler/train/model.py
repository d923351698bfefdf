"""GraphSAGE for sampled minibatches of any graph (:class:`GraphSAGE`: a homogeneous graph is
the case of one node type and one relation) and the edge decoder of link prediction
(:class:`LinkModel`).

A layer computes, for every node ``i`` of the minibatch,
``lin_l(aggr_{j -> i} x_j) + lin_r(x_i)``, where the messages ``x_j`` flow along
``edge_index[0] -> edge_index[1]`` (row = sampled neighbor, col = the node it was sampled for,
PyG's convention) and nodes without a sampled neighbor aggregate to zero. That is PyG's
``SAGEConv`` with default arguments; the built-in :class:`SAGELayer` has the same parameter
names (``lin_l.weight``, ``lin_l.bias``, ``lin_r.weight``), so a checkpoint loads into either.

Each layer runs one such layer per relation ``(src, rel, dst)`` (its own input width per side)
and sums the results per destination type: PyG's ``to_hetero(GraphSAGE)`` with ``aggr="sum"``,
which for one relation is PyG's ``GraphSAGE``. Node types without features read learned
embedding rows that come in with the batch (``emb``, from a
:class:`~mnmg_sampler.distributed.embeddings.DistEmbedding`), so DDP never sees a table; with
``embeddings="all"`` a featured type's input is ``lin(x) + emb(n_id)``. Only what can reach the
target type's output is built, so every parameter gets a gradient from every batch.

Trimming (optional, PyG's ``trim_to_layer``): a minibatch's nodes and edges are ordered hop by
hop, and layer ``i`` of ``L`` only needs the rows of the nodes within ``L - 1 - i`` hops of the
seeds and the edges of the first ``L - i`` hops. Passing ``num_sampled_nodes`` and
``num_sampled_edges`` computes only those: the seeds' outputs are unchanged, less is computed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ConfigError, MissingDependencyError, SamplingInputError
from ..graph.typed import EDGE_TYPE, NODE_TYPE
from .budget import check_model_memory, sage_dims

__all__ = ["AGGRS", "EMBEDDINGS", "SAGELayer", "GraphSAGE", "HeteroGraphSAGE", "LinkModel",
           "accuracy", "embedded_types", "num_correct", "pyg_available",
           "relation_key", "relations_per_layer"]

EdgeType = tuple[str, str, str]

log = logging.getLogger(__name__)

AGGRS = ("mean", "sum", "max")
"""Neighbor aggregations supported by both backends."""

EMBEDDINGS = ("featureless", "all", "none")


def pyg_available() -> bool:
    """True when ``torch_geometric`` (and so ``SAGEConv``) imports."""
    try:
        from torch_geometric.nn import SAGEConv  # noqa: F401
    except Exception:  # ImportError, or a broken optional native extension
        return False
    return True


def _check_aggr(aggr: str) -> str:
    if aggr not in AGGRS:
        raise ConfigError(f"model.aggr is {aggr!r}", "the model cannot aggregate neighbors",
                          f"use one of {', '.join(AGGRS)}")
    return aggr


class SAGELayer(nn.Module):
    """One GraphSAGE layer: ``lin_l(aggr of neighbor messages) + lin_r(x_target)``.

    Same math and parameter names as PyG's ``SAGEConv(in_dim, out_dim, aggr)`` with default
    arguments; used when PyG is not installed. ``in_dim`` is one width, or ``(source width,
    target width)`` as PyG's. A node with no incoming edge aggregates to zero.
    """

    def __init__(self, in_dim: int | tuple[int, int], out_dim: int, aggr: str = "mean") -> None:
        super().__init__()
        self.aggr = _check_aggr(aggr)
        src, dst = (in_dim, in_dim) if isinstance(in_dim, int) else in_dim
        self.lin_l = nn.Linear(src, out_dim, bias=True)
        self.lin_r = nn.Linear(dst, out_dim, bias=False)

    def aggregate(self, x: torch.Tensor, edge_index: torch.Tensor,
                  num_dst: int | None = None) -> torch.Tensor:
        """Aggregate ``x[edge_index[0]]`` into rows ``edge_index[1]`` of ``num_dst`` rows
        (default: as many as ``x``; zeros where no edge)."""
        src, dst = edge_index[0], edge_index[1]
        msg = x.index_select(0, src)
        rows = x.size(0) if num_dst is None else int(num_dst)
        out = x.new_zeros((rows, x.size(1)))
        if self.aggr == "max":
            idx = dst.unsqueeze(1).expand_as(msg)
            return out.scatter_reduce(0, idx, msg, reduce="amax", include_self=False)
        out = out.index_add(0, dst, msg)
        if self.aggr == "mean":
            deg = torch.bincount(dst, minlength=rows).clamp_(min=1)
            out = out / deg.unsqueeze(1).to(out.dtype)
        return out

    def forward(self, x, edge_index: torch.Tensor) -> torch.Tensor:
        """``x`` is one tensor (messages between its own rows) or a pair ``(x_src, x_dst)``: a
        bipartite block whose ``edge_index[0]`` indexes ``x_src`` and ``[1]`` indexes ``x_dst``
        (PyG's convention)."""
        x_src, x_dst = x if isinstance(x, tuple) else (x, x)
        return self.lin_l(self.aggregate(x_src, edge_index, x_dst.size(0))) + self.lin_r(x_dst)


def _checked(dropout: float, aggr: str, **sizes: int) -> list[int]:
    """``sizes`` as positive ints, then ``dropout`` and ``aggr`` checked: a ConfigError naming
    the key."""
    for name, value in sizes.items():
        if isinstance(value, bool) or int(value) != value or int(value) < 1:
            raise ConfigError(f"model.{name} is {value!r}", "the model cannot be built",
                              f"set model.{name} to a positive integer")
    if not 0.0 <= float(dropout) < 1.0:
        raise ConfigError(f"model.dropout is {dropout!r}", "the model cannot be built",
                          "set model.dropout in [0, 1)")
    _check_aggr(aggr)
    return [int(v) for v in sizes.values()]


def relation_key(et: EdgeType) -> str:
    """``"src__rel__dst"``: PyG's ``EdgeTypeStr``, the module key of a relation's layer."""
    return "__".join(et)


def relations_per_layer(edge_types: Sequence[EdgeType], target: str | Sequence[str],
                        layers: int) -> list[list[EdgeType]]:
    """Per layer (first first), the relations whose output reaches ``target`` (a type, or
    several) at the end and whose inputs exist: a type no relation points to has no
    representation after layer 0."""
    targets = {target} if isinstance(target, str) else set(target)
    every = {t for et in edge_types for t in (et[0], et[2])}
    rels = [list(edge_types) for _ in range(layers)]
    while True:
        out, have = [], every
        for layer in rels:  # forward: both ends computed by the layer before
            layer = [et for et in layer if et[0] in have and et[2] in have]
            out.append(layer)
            have = {et[2] for et in layer}
        need = set(targets)
        for i in range(layers - 1, -1, -1):  # backward: read by the layer after
            out[i] = [et for et in out[i] if et[2] in need]
            need = {t for et in out[i] for t in (et[0], et[2])}
        if out == rels:
            return out
        rels = out


def embedded_types(first: Sequence[str], in_dims: Mapping[str, int], embeddings: str
                   ) -> list[str]:
    """The node types of ``first`` (those the first layer reads) that take embedding rows:
    the featureless ones, or all of them with ``embeddings="all"``; a featureless type with
    ``embeddings="none"`` is a :class:`ConfigError`."""
    if embeddings not in EMBEDDINGS:
        raise ConfigError(f"model.embeddings is {embeddings!r}", "the model cannot be built",
                          f"use one of {', '.join(EMBEDDINGS)}")
    bare = sorted(t for t in first if t not in in_dims)
    if bare and embeddings == "none":
        raise ConfigError(f"model.embeddings: none, but node types {', '.join(bare)} have no "
                          "features", "the model would have no input for them",
                          "set model.embeddings: featureless (learned rows for them), or give "
                          "them features")
    return sorted(first) if embeddings == "all" else bare


class GraphSAGE(nn.Module):
    """``layers`` GraphSAGE layers with ReLU and dropout between them, over one node type and
    relation (tensors in and out) or several (dicts per type and relation; module docstring).

    Args:
        in_dim: feature width of ``x``; on a typed graph the width per node type with features
            (the other types read embedding rows); ``None`` = no features.
        hidden: width of the hidden layers.
        out_dim: number of classes (the logits' width).
        layers: number of layers; use as many as the loader samples hops.
        dropout: dropout probability after every hidden layer (training only).
        aggr: neighbor aggregation, one of :data:`AGGRS`.
        use_pyg: ``None`` uses PyG's ``SAGEConv`` when ``torch_geometric`` imports, else the
            built-in :class:`SAGELayer`; ``True`` requires PyG; ``False`` never uses it.
        edge_types: the graph's relations ``(src, rel, dst)``; ``None`` = one type and one
            relation (``graph.typed.NODE_TYPE``, ``EDGE_TYPE``).
        target: the node type whose logits are returned, or several (link prediction: both
            endpoint types), then ``forward`` returns ``{type: output}``; ``None`` = the one
            type.
        embedding_dim: width of the embedding rows; ``None`` = ``hidden``.
        embeddings: ``featureless``, ``all`` or ``none`` (:func:`embedded_types`); the types
            that read rows are :attr:`embedded`.

    ``backend`` tells which layer was chosen (``"pyg"`` or ``"builtin"``).

    Example::

        model = GraphSAGE(batch.x.size(1), 64, num_classes, layers=2)
        out = model(batch.x, batch.edge_index)[: batch.batch_size]
        loss = F.cross_entropy(out, batch.y[: batch.batch_size])
    """

    def __init__(self, in_dim: int | Mapping[str, int] | None, hidden: int, out_dim: int,
                 layers: int, dropout: float = 0.5, aggr: str = "mean",
                 use_pyg: bool | None = None, *, edge_types: Sequence[EdgeType] | None = None,
                 target: str | Sequence[str] | None = None, embedding_dim: int | None = None,
                 embeddings: str = "featureless") -> None:
        super().__init__()
        one = edge_types is None
        in_dims = dict(in_dim) if isinstance(in_dim, Mapping) else \
            {} if in_dim is None else {NODE_TYPE: in_dim}
        hidden, out_dim, layers, embedding_dim, *_ = _checked(
            dropout, aggr, hidden=hidden, out_dim=out_dim, layers=layers,
            embedding_dim=embedding_dim or hidden, **({"in_dim": in_dim} if one and in_dims
                                                      else {}))
        if use_pyg is None:
            use_pyg = pyg_available()
        elif use_pyg and not pyg_available():
            raise MissingDependencyError(
                "torch_geometric is not installed (use_pyg=True)",
                "PyG's SAGEConv cannot be used",
                "pip install 'mnmg-sampler[pyg]', or pass use_pyg=None to fall back to the "
                "built-in layer",
            )
        if use_pyg:
            from torch_geometric.nn import SAGEConv as conv
        else:
            conv = SAGELayer
        self.backend = "pyg" if use_pyg else "builtin"
        self.dropout = float(dropout)
        self.edge_types = [EDGE_TYPE] if one else [tuple(et) for et in edge_types]
        target = NODE_TYPE if target is None else target
        self.target = target if isinstance(target, str) else tuple(target)
        self.layer_relations = relations_per_layer(self.edge_types, self.target, layers)
        ends = {et[2] for et in self.layer_relations[-1]}
        if not ends or not all(t in ends for t in ([target] if isinstance(target, str)
                                                   else target)):
            raise ConfigError(f"sampler.input_type: no chain of {layers} relations ends at node "
                              f"type {target!r}", "its nodes would never read a neighbor",
                              "classify a node type relations point to, and give every type "
                              "on the way incoming relations (reverse ones, PyG's rev_ naming)")
        first = {t for et in self.layer_relations[0] for t in (et[0], et[2])}
        self.embedded = embedded_types(first, in_dims, embeddings)
        dims = {t: int(in_dims[t]) for t in first if t in in_dims}
        lin = {t: dims[t] for t in self.embedded if t in dims}  # featured types with rows
        dims.update({t: embedding_dim for t in self.embedded})
        shapes = []  # per layer and relation: (src width, dst width, out width)
        for i, rels in enumerate(self.layer_relations):
            out = out_dim if i == layers - 1 else hidden
            shapes.append({et: (dims[et[0]], dims[et[2]], out) for et in rels})
            dims = {et[2]: out for et in rels}
        params = sum((a + 1 + b) * o for layer in shapes for a, b, o in layer.values()) + \
            sum((w + 1) * embedding_dim for w in lin.values())
        widths = sage_dims(max(a for a, _, _ in shapes[0].values()), hidden, out_dim, layers)
        check_model_memory(widths, bytes_per_param=4, params=params)  # before torch allocates
        self.id_lin = nn.ModuleDict({t: nn.Linear(w, embedding_dim) for t, w in lin.items()})
        self.convs = nn.ModuleList(
            nn.ModuleDict({relation_key(et): conv(a if a == b else (a, b), o, aggr=aggr)
                           for et, (a, b, o) in layer.items()}) for layer in shapes)
        log.debug("GraphSAGE %s, %d relations, backend %s", widths, len(self.edge_types),
                  self.backend)

    @property
    def num_layers(self) -> int:
        return len(self.convs)

    def inputs(self, x: Mapping[str, torch.Tensor], emb: Mapping[str, torch.Tensor] | None,
               device: torch.device | None = None) -> dict[str, torch.Tensor]:
        """Layer-0 inputs: features (as float32), the embedding rows ``emb`` of the
        featureless types, ``lin(x) + emb`` of featured types with rows."""
        h = {}
        emb = emb or {}
        for t in {t for et in self.layer_relations[0] for t in (et[0], et[2])}:
            if t in self.embedded and t not in emb:
                raise SamplingInputError(f"no embedding rows of node type {t!r} were given",
                                         "the model cannot read its nodes",
                                         "pass emb=DistEmbedding.fetch(...) of model.embedded")
            if t in x:
                h[t] = x[t].to(device, torch.float32) if device is not None else x[t].float()
                if t in self.id_lin:
                    h[t] = self.id_lin[t](h[t]) + emb[t].to(h[t].device)
            elif t in self.embedded:
                h[t] = emb[t].to(device) if device is not None else emb[t]
            else:
                raise SamplingInputError(f"the minibatch has no features of node type {t!r}",
                                         "the model cannot read its nodes",
                                         "build the model with the graph's feature widths")
        return h

    def forward(self, x, edge_index, emb=None, num_sampled_nodes=None, num_sampled_edges=None):
        """Logits of every ``target`` node of the minibatch (seeds first: slice
        ``[:batch_size]``), or ``{type: output}`` for several targets.

        One type: tensors ``x`` (or ``None`` with embedding rows), ``edge_index`` and ``emb``
        (the rows of ``n_id`` when :attr:`embedded`); ``model(x, edge_index,
        num_sampled_nodes, num_sampled_edges)`` works too. Several: the
        :class:`~mnmg_sampler.sampling.batch.MiniBatch` dicts, ``emb`` the rows of its
        ``n_id`` of the :attr:`embedded` types. With the batch's ``num_sampled_nodes`` and
        ``num_sampled_edges`` only the rows that reach the seeds are computed (module
        docstring): fewer rows come back, and the seeds' rows are the same."""
        if not isinstance(edge_index, Mapping):  # one type: its tensors as the one-type dicts
            if emb is not None and not torch.is_tensor(emb):  # (x, ei, nodes, edges)
                emb, num_sampled_nodes, num_sampled_edges = None, emb, num_sampled_nodes
            x, edge_index = {} if x is None else {NODE_TYPE: x}, {EDGE_TYPE: edge_index}
            emb = None if emb is None else {NODE_TYPE: emb}
            if num_sampled_nodes is not None and num_sampled_edges is not None:
                num_sampled_nodes = {NODE_TYPE: list(num_sampled_nodes)}
                num_sampled_edges = {EDGE_TYPE: list(num_sampled_edges)}
        dev = next(self.parameters()).device
        h = self.inputs(x, emb, dev)
        trim = num_sampled_nodes is not None and num_sampled_edges is not None
        if trim:
            _check_counts(h, edge_index, num_sampled_nodes, num_sampled_edges)
        L = self.num_layers
        for i, rels in enumerate(self.layer_relations):
            out: dict[str, torch.Tensor] = {}
            for et in rels:
                conv = self.convs[i][relation_key(et)]
                ei = edge_index[et]
                x_src, x_dst = h[et[0]], h[et[2]]
                if trim:
                    ei = ei[:, :sum(num_sampled_edges[et][:L - i])]
                    x_dst = x_dst[:sum(num_sampled_nodes[et[2]][:L - i])]
                y = conv((x_src, x_dst), ei.to(dev))
                out[et[2]] = out[et[2]] + y if et[2] in out else y
            if i < L - 1:
                out = {t: F.dropout(F.relu(v), self.dropout, self.training)
                       for t, v in out.items()}
            h = out
        if isinstance(self.target, str):
            return h[self.target]
        return {t: h[t] for t in self.target}


def _check_counts(h: Mapping, edge_index: Mapping, nodes: Mapping, edges: Mapping) -> None:
    """A :class:`SamplingInputError` unless the per-hop counts describe the rows and edges."""
    bad = [t for t, v in h.items() if t in nodes and sum(nodes[t]) != v.size(0)] + \
        [et for et, ei in edge_index.items() if et in edges and sum(edges[et]) != ei.size(1)]
    if bad:
        raise SamplingInputError(
            f"num_sampled_nodes / num_sampled_edges do not describe the rows and edges of "
            f"{bad[0]!r}", "layers cannot be trimmed hop by hop",
            "pass the minibatch's own batch.num_sampled_nodes and batch.num_sampled_edges, "
            "or neither")


class HeteroGraphSAGE(GraphSAGE):
    """:class:`GraphSAGE` over a typed graph (the built-in layer), with the arguments in the
    order of earlier versions.

    Example::

        model = HeteroGraphSAGE(edge_types, {"paper": 16}, 64, 4, 2, "paper", 64)
        emb = DistEmbedding(part, model.embedded, 64)
        h = emb.fetch({t: batch.n_id[t].numpy() for t in model.embedded})
        out = model(batch.x, batch.edge_index, h)[: batch.batch_size]
    """

    def __init__(self, edge_types: Sequence[EdgeType], in_dims: Mapping[str, int], hidden: int,
                 out_dim: int, layers: int, target: str | Sequence[str], embedding_dim: int,
                 dropout: float = 0.5, aggr: str = "mean",
                 embeddings: str = "featureless") -> None:
        super().__init__(in_dims, hidden, out_dim, layers, dropout, aggr, use_pyg=False,
                         edge_types=edge_types, target=target, embedding_dim=embedding_dim,
                         embeddings=embeddings)


class LinkModel(nn.Module):
    """An encoder (a :class:`GraphSAGE`; on a typed graph with outputs for both endpoint types
    of ``edge_type``) and an edge decoder: ``dot`` (``<h_s, h_d> / sqrt(d)``) or ``mlp`` of
    ``h_s * h_d``; :meth:`score` returns logits."""

    def __init__(self, encoder: nn.Module, hidden: int, decoder: str = "dot",
                 edge_type: EdgeType | None = None) -> None:
        super().__init__()
        if decoder not in ("dot", "mlp"):
            raise ConfigError(f"link.decoder is {decoder!r}", "edges cannot be scored",
                              "use dot or mlp")
        self.encoder = encoder
        self.edge_type = None if edge_type is None else tuple(edge_type)
        self.mlp = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1)) \
            if decoder == "mlp" else None

    def forward(self, x, edge_index, emb=None, num_sampled_nodes=None, num_sampled_edges=None):
        return self.encoder(x, edge_index, emb, num_sampled_nodes, num_sampled_edges)

    def score(self, h, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        """Logits of the edges ``src[i] -> dst[i]`` (local ids into ``h``: the source and
        destination types' rows of a typed ``h``)."""
        et = self.edge_type
        z = h[src] * h[dst] if et is None else h[et[0]][src] * h[et[2]][dst]
        return z.sum(-1) * z.shape[-1] ** -0.5 if self.mlp is None else self.mlp(z).squeeze(-1)


def num_correct(logits: torch.Tensor, y: torch.Tensor) -> int:
    """How many rows' argmax equals the label (sum this over ranks, then divide)."""
    if logits.size(0) != y.size(0):
        raise SamplingInputError(f"{logits.size(0)} rows of logits but {y.size(0)} labels",
                                 "accuracy is undefined", "slice both to [:batch_size]")
    return int((logits.argmax(dim=-1) == y).sum())


def accuracy(logits: torch.Tensor, y: torch.Tensor) -> float:
    """Fraction of rows whose argmax equals the label (0.0 for no rows)."""
    n = int(y.size(0))
    return num_correct(logits, y) / n if n else 0.0
