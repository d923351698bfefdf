"""Heterogeneous GraphSAGE for typed minibatches, in pure torch (PyG's ``to_hetero(GraphSAGE)``
with ``aggr="sum"``, without needing PyG).

Each layer runs one SAGE convolution per relation ``(src, rel, dst)``
(``lin_l(aggr of src messages) + lin_r(x_dst)``, :class:`~.model.SAGELayer`'s math with its own
input width per side) and sums the results per destination type. Node types without features
read learned embedding rows (``model.embeddings``), which the model does not hold: they come in
with the batch (``emb``), fetched from their owners by a
:class:`~mnmg_sampler.distributed.embeddings.DistEmbedding` and updated by its sparse optimizer,
so DDP never sees a table. With ``embeddings="all"`` a featured type's input is
``lin(x) + emb(n_id)`` (PyG users' learned id embedding).

Only what can reach the target type's output is built: the last layer's relations end at the
target type, layer ``i``'s at a type layer ``i + 1`` reads, and only types read by the first
layer take embeddings. So every parameter gets a gradient from every batch (DDP needs no
``find_unused_parameters``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ConfigError, SamplingInputError
from ..system.host_limits import check_allocation
from .model import SAGELayer, _check_aggr, _positive

__all__ = ["EMBEDDINGS", "HeteroGraphSAGE", "embedded_types", "relation_key",
           "relations_per_layer"]

EMBEDDINGS = ("featureless", "all", "none")

EdgeType = tuple[str, str, str]


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


class HeteroGraphSAGE(nn.Module):
    """GraphSAGE over typed minibatches (module docstring).

    Args:
        edge_types: the graph's relations ``(src, rel, dst)``.
        in_dims: feature width per node type with features; the other types read embeddings.
        hidden: width of the hidden layers.
        out_dim: number of classes.
        layers: number of layers (as many as the loader samples hops).
        target: the node type whose logits are returned, or several (link prediction:
            both endpoint types), then ``forward`` returns ``{type: output}``.
        embedding_dim: width of the embedding rows.
        dropout, aggr: as :class:`~.model.GraphSAGE`.
        embeddings: ``featureless``, ``all`` or ``none`` (:func:`embedded_types`); the types
            that read rows are :attr:`embedded`.

    Example::

        model = HeteroGraphSAGE(edge_types, {"paper": 16}, 64, 4, 2, "paper", 64)
        emb = DistEmbedding(part, model.embedded, 64)
        h = emb.fetch({t: batch.n_id[t].numpy() for t in model.embedded})
        out = model(batch.x, batch.edge_index, h)[: batch.batch_size]
        loss = F.cross_entropy(out, batch.y["paper"][: batch.batch_size])
    """

    def __init__(self, edge_types: Sequence[EdgeType], in_dims: Mapping[str, int], hidden: int,
                 out_dim: int, layers: int, target: str | Sequence[str], embedding_dim: int,
                 dropout: float = 0.5, aggr: str = "mean",
                 embeddings: str = "featureless") -> None:
        super().__init__()
        hidden, out_dim = _positive("hidden", hidden), _positive("out_dim", out_dim)
        layers, embedding_dim = _positive("layers", layers), _positive("embedding_dim",
                                                                       embedding_dim)
        if not 0.0 <= float(dropout) < 1.0:
            raise ConfigError(f"model.dropout is {dropout!r}", "the model cannot be built",
                              "set model.dropout in [0, 1)")
        _check_aggr(aggr)
        self.target = target if isinstance(target, str) else tuple(target)
        self.dropout = float(dropout)
        self.edge_types = [tuple(et) for et in edge_types]
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
        # featured types with rows too: lin(x) + emb
        self.id_lin = nn.ModuleDict({t: nn.Linear(int(in_dims[t]), embedding_dim)
                                     for t in self.embedded if t in in_dims})
        dims = {t: int(in_dims[t]) for t in first if t in in_dims}
        dims.update({t: embedding_dim for t in self.embedded})
        shapes = []  # per layer and relation: (src width, dst width, out width)
        for i, rels in enumerate(self.layer_relations):
            out = out_dim if i == layers - 1 else hidden
            shapes.append({et: (dims[et[0]], dims[et[2]], out) for et in rels})
            dims = {et[2]: out for et in rels}
        params = sum((a + 1 + b) * o for layer in shapes for a, b, o in layer.values())
        check_allocation(f"model.hidden: a heterogeneous GraphSAGE of {params:,} parameters",
                         4 * params, "lower model.hidden (or model.layers / the feature widths)")
        self.convs = nn.ModuleList()
        for layer_shapes in shapes:
            layer = nn.ModuleDict()
            for et, (a, b, o) in layer_shapes.items():
                conv = SAGELayer(a, o, aggr)
                conv.lin_r = nn.Linear(b, o, bias=False)  # the destination's own width
                layer[relation_key(et)] = conv
            self.convs.append(layer)

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

    def forward(self, x: Mapping[str, torch.Tensor],
                edge_index: Mapping[EdgeType, torch.Tensor],
                emb: Mapping[str, torch.Tensor] | None = None,
                num_sampled_nodes: Mapping[str, Sequence[int]] | None = None,
                num_sampled_edges: Mapping[EdgeType, Sequence[int]] | None = None
                ) -> torch.Tensor | dict[str, torch.Tensor]:
        """Logits of every ``target`` node of the minibatch (seeds first: slice
        ``[:batch_size]``), or ``{type: output}`` for several targets. ``x`` and ``edge_index``
        are the :class:`~mnmg_sampler.sampling.batch.MiniBatch` dicts, ``emb`` the
        rows of
        its ``n_id`` of the :attr:`embedded` types.

        With the batch's ``num_sampled_nodes`` and ``num_sampled_edges`` (PyG's
        ``trim_to_layer``), layer ``i`` of ``L`` computes only the rows of the nodes within
        ``L - 1 - i`` hops of the seeds (each type's rows are ordered by hop), reading the
        edges of the first ``L - i`` hops: the seeds' outputs are those of the whole batch,
        and the output holds only the seeds' rows (a disjoint batch's leaves, most of its
        nodes, are read once as inputs and never computed)."""
        dev = next(self.parameters()).device
        h = self.inputs(x, emb, dev)
        trim = num_sampled_nodes is not None and num_sampled_edges is not None
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
            if i < self.num_layers - 1:
                out = {t: F.dropout(F.relu(v), self.dropout, self.training)
                       for t, v in out.items()}
            h = out
        if isinstance(self.target, str):
            return h[self.target]
        return {t: h[t] for t in self.target}
