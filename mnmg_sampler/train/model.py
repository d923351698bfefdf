"""GraphSAGE for sampled minibatches, with PyG's ``SAGEConv`` or a built-in layer of the same math.

A layer computes, for every node ``i`` of the minibatch,
``lin_l(aggr_{j -> i} x_j) + lin_r(x_i)``, where the messages ``x_j`` flow along
``edge_index[0] -> edge_index[1]`` (row = sampled neighbor, col = the node it was sampled for,
PyG's convention) and nodes without a sampled neighbor aggregate to zero. That is PyG's
``SAGEConv`` with default arguments; the built-in :class:`SAGELayer` has the same parameter
names (``lin_l.weight``, ``lin_l.bias``, ``lin_r.weight``), so a checkpoint loads into either.

Trimming (optional, PyG's ``trim_to_layer``): a minibatch's ``n_id`` and ``edge_index`` are
ordered hop by hop, and layer ``i`` of ``L`` only needs the nodes within ``L - i`` hops of the
seeds. Passing ``num_sampled_nodes`` and ``num_sampled_edges`` lets layer ``i`` drop the last
``i`` hops' nodes and edges; the seeds' outputs are unchanged and less is computed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ConfigError, MissingDependencyError, SamplingInputError
from .budget import check_model_memory, sage_dims

__all__ = ["AGGRS", "SAGELayer", "GraphSAGE", "accuracy", "inference_layer", "num_correct",
           "pyg_available"]

log = logging.getLogger(__name__)

AGGRS = ("mean", "sum", "max")
"""Neighbor aggregations supported by both backends."""


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
    arguments; used when PyG is not installed. Targets are the rows of ``x`` (every node of the
    minibatch); a node with no incoming edge aggregates to zero.
    """

    def __init__(self, in_dim: int, out_dim: int, aggr: str = "mean") -> None:
        super().__init__()
        self.aggr = _check_aggr(aggr)
        self.lin_l = nn.Linear(in_dim, out_dim, bias=True)
        self.lin_r = nn.Linear(in_dim, out_dim, bias=False)

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
        (PyG's convention), as layer-wise inference uses it."""
        if isinstance(x, tuple):
            x_src, x_dst = x
            return self.lin_l(self.aggregate(x_src, edge_index, x_dst.size(0))) + \
                self.lin_r(x_dst)
        return self.lin_l(self.aggregate(x, edge_index)) + self.lin_r(x)

    def reset_parameters(self) -> None:
        self.lin_l.reset_parameters()
        self.lin_r.reset_parameters()

    def extra_repr(self) -> str:
        return f"{self.lin_l.in_features}, {self.lin_l.out_features}, aggr={self.aggr!r}"


def _positive(name: str, value: int) -> int:
    if isinstance(value, bool) or int(value) != value or int(value) < 1:
        raise ConfigError(f"model.{name} is {value!r}", "the model cannot be built",
                          f"set model.{name} to a positive integer")
    return int(value)


class GraphSAGE(nn.Module):
    """A stack of ``layers`` GraphSAGE layers with ReLU and dropout between them.

    Args:
        in_dim: feature size of ``x``.
        hidden: width of the hidden layers.
        out_dim: number of classes (the logits' width).
        layers: number of layers; use as many as the loader samples hops.
        dropout: dropout probability after every hidden layer (training only).
        aggr: neighbor aggregation, one of :data:`AGGRS`.
        use_pyg: ``None`` uses PyG's ``SAGEConv`` when ``torch_geometric`` imports, else the
            built-in :class:`SAGELayer`; ``True`` requires PyG; ``False`` never uses it.

    ``backend`` tells which was chosen (``"pyg"`` or ``"builtin"``).

    Example::

        model = GraphSAGE(batch.x.size(1), 64, num_classes, layers=2)
        out = model(batch.x, batch.edge_index)[: batch.batch_size]
        loss = F.cross_entropy(out, batch.y[: batch.batch_size])
    """

    def __init__(self, in_dim: int, hidden: int, out_dim: int, layers: int,
                 dropout: float = 0.5, aggr: str = "mean", use_pyg: bool | None = None) -> None:
        super().__init__()
        in_dim, hidden = _positive("in_dim", in_dim), _positive("hidden", hidden)
        out_dim, layers = _positive("out_dim", out_dim), _positive("layers", layers)
        if not 0.0 <= float(dropout) < 1.0:
            raise ConfigError(f"model.dropout is {dropout!r}", "the model cannot be built",
                              "set model.dropout in [0, 1)")
        _check_aggr(aggr)
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
        dims = sage_dims(in_dim, hidden, out_dim, layers)
        check_model_memory(dims, bytes_per_param=4)  # float32 weights, before torch allocates
        self.convs = nn.ModuleList(conv(dims[i], dims[i + 1], aggr=aggr) for i in range(layers))
        log.debug("GraphSAGE %s, %d layers, backend %s", dims, layers, self.backend)

    @property
    def num_layers(self) -> int:
        return len(self.convs)

    def reset_parameters(self) -> None:
        for conv in self.convs:
            conv.reset_parameters()

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor,
                num_sampled_nodes: Sequence[int] | None = None,
                num_sampled_edges: Sequence[int] | None = None) -> torch.Tensor:
        """Logits, one row per node, seeds first: the loss uses ``[:batch_size]``.

        Without the ``num_sampled_*`` arguments every node of ``x`` gets a row. With both (from
        the minibatch, at least ``num_layers`` hops), layer ``i`` drops the last ``i`` hops, so
        fewer rows come back (for as many hops as layers: the seeds' and hop 1's); the seeds'
        rows are the same either way. With fewer hops than layers nothing is trimmed.
        """
        trim = (num_sampled_nodes is not None and num_sampled_edges is not None
                and len(num_sampled_edges) >= self.num_layers)
        if trim:
            nodes, edges = list(num_sampled_nodes), list(num_sampled_edges)
            if sum(nodes) != x.size(0) or sum(edges) != edge_index.size(1) or \
                    len(nodes) != len(edges) + 1:
                raise SamplingInputError(
                    f"num_sampled_nodes {nodes} / num_sampled_edges {edges} do not describe "
                    f"x with {x.size(0)} rows and edge_index with {edge_index.size(1)} edges",
                    "layers cannot be trimmed hop by hop",
                    "pass the minibatch's own batch.num_sampled_nodes and "
                    "batch.num_sampled_edges, or neither",
                )
        for i, conv in enumerate(self.convs):
            if trim and i > 0:
                n = sum(nodes[: len(nodes) - i])
                e = sum(edges[: len(edges) - i])
                x, edge_index = x[:n], edge_index[:, :e]
            x = conv(x, edge_index)
            if i < self.num_layers - 1:
                x = F.relu(x)
                x = F.dropout(x, p=self.dropout, training=self.training)
        return x


def inference_layer(model: GraphSAGE, i: int, x_src: torch.Tensor, x_dst: torch.Tensor,
                    edge_index: torch.Tensor) -> torch.Tensor:
    """Layer ``i`` of ``model`` on a bipartite block (targets ``x_dst``, their neighbors
    ``x_src``), with the ReLU of a hidden layer and no dropout: one step of layer-wise inference,
    the same math as ``model.forward`` in eval mode."""
    x = model.convs[i]((x_src, x_dst), edge_index)
    return F.relu(x) if i < model.num_layers - 1 else x


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
