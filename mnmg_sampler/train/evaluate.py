"""Evaluation within memory: layer-wise full-neighbor inference and memory estimates.

Sampling every neighbor of every hop reaches most of a large graph from each batch. Layer-wise
inference (the ``inference`` of PyG's and DGL's GraphSAGE examples) computes the same outputs a
layer at a time: each rank computes its own nodes' rows in batches, reading the previous layer's
rows of their neighbors from their owners (all-to-all, every rank every round). Memory per rank:
two layer tables of its nodes plus one batch's block, O(part); it walks a homogeneous part's CSR.
:func:`check_budget` refuses an estimate above ``training.eval_memory_mb`` on every rank first.
"""

from __future__ import annotations

import logging

import numpy as np
import torch
import torch.distributed as dist

from ..distributed.collective import Exchanger, backend_device
from ..errors import MemoryBudgetError
from ..graph.typed import EDGE_TYPE, NODE_TYPE
from ..loaders.seeds import SeedSet
from .model import GraphSAGE, relation_key

__all__ = ["check_budget", "estimate_layerwise_bytes", "estimate_sampled_bytes",
           "layerwise_logits", "evaluate_layerwise"]

log = logging.getLogger(__name__)


def _max_over_ranks(value: float, group=None) -> float:
    t = torch.tensor([float(value)], dtype=torch.float64, device=backend_device(group))
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return float(t.item())


def estimate_layerwise_bytes(n_local: int, local_edges: int, dims: list[int],
                             batch: int) -> int:
    """Bytes of layer-wise inference on one rank: the input and output tables of the widest
    layer over its nodes, plus one batch's block (neighbor rows, messages, aggregates)."""
    widest = max(dims[i] + dims[i + 1] for i in range(len(dims) - 1))
    avg_deg = local_edges / max(n_local, 1)
    block = min(batch, n_local) * (1 + avg_deg) * max(dims) * 4 * 3
    return int(n_local * widest * 4 + block)


def estimate_sampled_bytes(num_nodes: int, fanouts: list[int], batch: int, feature_dim: int,
                           max_degree: int) -> int:
    """Upper estimate of one sampled evaluation minibatch: nodes grow by the fanout per hop
    (the largest degree for ``-1``), capped by the graph; feature rows, ids and edges."""
    nodes = total = batch
    for f in fanouts:
        nodes *= max_degree if f < 0 else f
        total += nodes
        if total >= num_nodes:
            total = num_nodes
            break
    edges = total  # about one sampled edge per node beyond the seeds
    return int(total * (feature_dim * 4 + 8 * 2) + edges * 8 * 3)


def check_budget(estimate: float, budget_mb: float | None, what: str, fix: str,
                 group=None) -> None:
    """Collective: raise :class:`MemoryBudgetError` on every rank if any rank's estimate is
    above ``budget_mb`` (``None`` = no check)."""
    if budget_mb is None:
        return
    worst = _max_over_ranks(estimate, group)
    if worst > budget_mb * 2**20:
        raise MemoryBudgetError(
            f"{what} needs about {worst / 2**20:,.0f} MB on the largest rank, above "
            f"training.eval_memory_mb = {budget_mb:,.0f}",
            "nothing was allocated; evaluation would likely run out of memory", fix)


def _fetch(ex: Exchanger, boundaries: np.ndarray, table: torch.Tensor, lo: int,
           ids: np.ndarray) -> torch.Tensor:
    """Collective: rows of new ids ``ids`` from their owners' ``table`` (rows ``lo..``)."""
    owner = np.searchsorted(boundaries, ids, side="right") - 1
    perm = np.argsort(owner, kind="stable")
    send = torch.from_numpy(np.bincount(owner, minlength=ex.world_size).astype(np.int64))
    recv, recv_counts = ex.exchange(torch.from_numpy(np.ascontiguousarray(ids[perm])), send)
    rows = table[recv - lo]
    back = ex.payload(rows, recv_counts.tolist(), send.tolist())
    out = torch.empty_like(back)
    out[torch.from_numpy(perm)] = back
    return out


def _out_dim(conv) -> int:
    """Output width of a built-in SAGELayer or a PyG SAGEConv."""
    out = getattr(conv, "out_channels", None)
    return int(out if out is not None else conv.lin_l.out_features)


@torch.no_grad()
def layerwise_logits(model: GraphSAGE, part, device: torch.device, batch_size: int,
                     group=None, x: np.ndarray | None = None) -> torch.Tensor:
    """Collective: the model's output rows (CPU float32) of every node this rank owns, from
    every neighbor (exact; no sampling), one layer at a time over batches of ``batch_size``;
    the inputs are ``part.x`` and/or learned rows ``x`` (one per owned node), as
    :meth:`~.model.GraphSAGE.inputs` combines them."""
    was_training = model.training
    model.eval()
    ex = Exchanger(group, torch.device("cpu"))
    b = np.asarray(part.boundaries, np.int64)
    lo, n_local = part.start, part.num_local_nodes
    indptr = np.asarray(part.indptr)
    rounds = int(_max_over_ranks(-(-n_local // batch_size), group))
    x = {} if x is None else {NODE_TYPE: torch.as_tensor(np.asarray(x, np.float32))}
    feats = {} if part.x is None else {NODE_TYPE: torch.from_numpy(np.array(part.x, np.float32))}
    h = model.inputs(feats, x, device)[NODE_TYPE].float().cpu()  # own rows: features and/or rows
    for i, layer in enumerate(model.convs):
        conv = layer[relation_key(EDGE_TYPE)]
        out = torch.empty((n_local, _out_dim(conv)), dtype=torch.float32)
        for r in range(rounds):
            a = min(r * batch_size, n_local)
            z = min(a + batch_size, n_local)
            nbr = np.asarray(part.indices[indptr[a]:indptr[z]], dtype=np.int64)
            uniq, inv = np.unique(nbr, return_inverse=True)
            x_src = _fetch(ex, b, h, lo, uniq)
            if z == a:
                continue
            dst = np.repeat(np.arange(z - a, dtype=np.int64), np.diff(indptr[a:z + 1]))
            ei = torch.from_numpy(np.stack([inv.reshape(-1), dst])).to(device)
            y = conv((x_src.to(device), h[a:z].to(device)), ei)  # eval mode: no dropout
            out[a:z] = (torch.relu(y) if i < model.num_layers - 1 else y).float().cpu()
        h = out
    model.train(was_training)
    return h


@torch.no_grad()
def evaluate_layerwise(model: GraphSAGE, part, splits: dict[str, np.ndarray | SeedSet],
                       device: torch.device, batch_size: int, group=None,
                       x: np.ndarray | None = None) -> dict[str, tuple[float, float]]:
    """Collective: ``{split: (accuracy, mean loss)}`` over every rank's nodes of each split
    (sorted original ids, or a :class:`~mnmg_sampler.loaders.seeds.SeedSet`), from
    :func:`layerwise_logits` (input rows ``x``, else ``part.x``)."""
    logits = layerwise_logits(model, part, device, batch_size, group, x)
    own = np.asarray(part.orig_ids)  # the ids a seed set speaks (the graph's nodes 0..N-1)
    orig = part.input_ids(own)  # the ids arrays speak (the input's, if renumbered)
    y = torch.from_numpy(np.array(part.y, dtype=np.int64))
    acc = torch.zeros((len(splits), 3), dtype=torch.float64, device=backend_device(group))
    for k, ids in enumerate(splits.values()):
        mask = torch.from_numpy(ids.contains(own) if isinstance(ids, SeedSet)
                                else np.isin(orig, np.asarray(ids)))
        out, lab = logits[mask], y[mask]
        acc[k, 0] = float((out.argmax(-1) == lab).sum())
        acc[k, 1] = float(mask.sum())
        acc[k, 2] = float(torch.nn.functional.cross_entropy(out, lab, reduction="sum")) \
            if lab.numel() else 0.0
    dist.all_reduce(acc, group=group)
    acc = acc.cpu()
    return {name: (float(acc[k, 0] / max(acc[k, 1], 1)), float(acc[k, 2] / max(acc[k, 1], 1)))
            for k, name in enumerate(splits)}
