"""The link-prediction job on a typed graph (``task: link``, ``link.edge_type: [src, rel, dst]``).

The homogeneous link job's steps (:mod:`.link`) on one relation of a typed graph: its edges are
split into train/val/test on every rank alike (``link.split``, ``link.split_seed``,
:func:`~mnmg_sampler.graph.typed_link_split.split_relation`); the *training graph*, partitioned
once, holds only the train edges of the relation and no reverse of a held-out edge in its
reverse relation (PyG's ``rev_`` naming), so held-out edges are never read as messages; a
typed :class:`~mnmg_sampler.loaders.link.DistLinkNeighborLoader` draws the training negatives
(binary or triplet, of the relation's types) and removes the seed edges and their reverses from
their own subgraphs; evaluation ranks each held-out edge among ``link.eval_negatives`` negative
destinations and reports AUC, MRR and Hits@K as the homogeneous job does. The encoder is the
:class:`~.hetero_model.HeteroGraphSAGE` with outputs for both endpoint types (featureless types
read learned embeddings), the decoder ``link.decoder``.

``link.split_by: time`` splits the relation by time instead
(:func:`~mnmg_sampler.graph.typed_link_split.split_relation_by_time`): the training graph holds
only edges before the validation start. With ``sampler.time_attr`` every training and
evaluation edge bounds its subgraph by its own time minus one (``sampler.temporal_strategy``),
so no edge sees itself, nor anything at or after its time; ``sampler.time_attr: null`` samples
the same split without time (the static baseline). Validation and test edges are both
evaluated on the training graph.

Disjoint (temporal) evaluation grows one tree per endpoint and negative: ``2 +
link.eval_negatives`` trees per edge, so ``sampler.eval_fanouts: null`` means the training
fanouts there (a full tree per negative reaches thousands of nodes: hundreds of millions per
batch on a 100k-rating graph; an explicit ``-1`` is still all neighbors). Each batch is
sampled and encoded in chunks of whole trees of at most :func:`eval_node_budget` nodes
(:meth:`~mnmg_sampler.loaders.link.DistLinkNeighborLoader.tree_chunks`), keeping only the
trees' root embeddings, so evaluation memory does not grow with the batch. The final record
holds every rank's peak resident memory (``peak_rss_mb``).
"""

from __future__ import annotations

import logging
import resource
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from ..config import JobConfig, config_to_dict
from ..errors import ConfigError
from .epochs import run_epochs
from .hetero import TypedJob, embed, precheck_typed_job, start_typed_job, typed_model
from .link import ScoreTotals, batch_loss, evaluate_scores
from .report import RunReport
from .setup import make_optimizer, resume_point
from .typed_setup import link_edge_type, load_typed_dataset, meta_of_graph, num_neighbors

__all__ = ["HeteroLinkModel", "eval_node_budget", "peak_rss_mb", "run_typed_link_job"]

log = logging.getLogger(__name__)

EVAL_MEMORY_MB = 256  # a chunk's share of evaluation memory without training.eval_memory_mb


class HeteroLinkModel(nn.Module):
    """A :class:`~.hetero_model.HeteroGraphSAGE` encoding both endpoint types of ``edge_type``
    and an edge decoder: ``dot`` (``<h_s, h_d> / sqrt(d)``) or ``mlp`` of ``h_s * h_d``;
    :meth:`score` returns logits."""

    def __init__(self, encoder: nn.Module, edge_type, hidden: int, decoder: str = "dot") -> None:
        super().__init__()
        if decoder not in ("dot", "mlp"):
            raise ConfigError(f"link.decoder is {decoder!r}", "edges cannot be scored",
                              "use dot or mlp")
        self.encoder, self.edge_type = encoder, tuple(edge_type)
        self.mlp = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1)) \
            if decoder == "mlp" else None

    def forward(self, x, edge_index, emb=None, num_sampled_nodes=None,
                num_sampled_edges=None) -> dict[str, torch.Tensor]:
        return self.encoder(x, edge_index, emb, num_sampled_nodes, num_sampled_edges)

    def score(self, h: dict[str, torch.Tensor], src: torch.Tensor,
              dst: torch.Tensor) -> torch.Tensor:
        """Logits of the edges ``src[i] -> dst[i]`` (local ids into the source and destination
        types' rows of ``h``)."""
        z = h[self.edge_type[0]][src] * h[self.edge_type[2]][dst]
        return z.sum(-1) * z.shape[-1] ** -0.5 if self.mlp is None else self.mlp(z).squeeze(-1)


def eval_node_budget(width: int, memory_mb: float | None) -> int:
    """Nodes per disjoint evaluation chunk: ``memory_mb`` (default :data:`EVAL_MEMORY_MB`) over
    the bytes a node costs in the encoder, about four float32 rows of the widest layer
    (measured: 2.6 KB a node at width 256 on a 2-hop heterogeneous GraphSAGE) plus its ids."""
    per_node = 4 * 4 * max(int(width), 1) + 64
    return max(1, int((memory_mb or EVAL_MEMORY_MB) * 2**20) // per_node)


def evaluate_link(model, net: HeteroLinkModel, emb, loader, device, hits_k: int,
                  max_nodes: int | None = None) -> dict:
    """AUC, MRR, Hits@K and BCE loss over every rank's batches of a triplet ``loader``
    (collective), as :func:`.link.evaluate`. A disjoint ``loader`` is read in chunks of whole
    trees of at most ``max_nodes`` nodes (``None``: one chunk per batch): each chunk is encoded
    alone and only its roots' embeddings are kept until the batch's edges are scored; a tree's
    root embedding depends on its tree only, so the metrics are those of whole batches.
    ``emb``: the job's embedding rows (fetched per batch or chunk), or ``None``."""
    if not loader._time.get("disjoint"):
        return evaluate_scores(model, loader, device, hits_k,
                               lambda b: model(b.x, b.edge_index, embed(emb, b, False)),
                               net.score)
    return _evaluate_trees(model, net, emb, loader, device, hits_k, max_nodes or 2**62)


@torch.no_grad()
def _evaluate_trees(model, net: HeteroLinkModel, emb, loader, device, hits_k: int,
                    max_nodes: int) -> dict:
    s_type, _, d_type = net.edge_type
    model.eval()
    tot = ScoreTotals(hits_k)
    roots = None
    for c in loader.tree_chunks(max_nodes):
        b = c.subgraph
        # ranks encode different numbers of chunks: the row fetches are uneven (drained below)
        rows = embed(emb, b, False, uneven=True)
        h = model(b.x, b.edge_index, rows, b.num_sampled_nodes, b.num_sampled_edges)
        if roots is None:
            roots = torch.empty((c.num_trees, h[s_type].shape[1]), dtype=h[s_type].dtype,
                                device=h[s_type].device)
        for t, first, k in c.roots:
            roots[first:first + k] = h[t][:k]
        del h, b
        if c.last:
            one = {s_type: roots, d_type: roots}  # rows are tree numbers of either type
            src = c.src_tree.to(device)
            dn = c.dst_neg_tree.to(device)
            pos = net.score(one, src, c.dst_pos_tree.to(device))
            neg = net.score(one, src.repeat_interleave(dn.shape[1]),
                            dn.reshape(-1)).view_as(dn)
            tot.add(pos, neg)
            roots = None
    if emb is not None:
        emb.drain()
    model.train()
    return tot.result()


def _encode(model, emb, b) -> dict[str, torch.Tensor]:
    """The encoder's outputs of a training batch: trimmed per layer to the rows that reach the
    seeds when the batch is disjoint (every seed a tree root, the only rows the loss reads),
    else whole."""
    if b.batch:  # disjoint: every seed is a tree root, the only rows the loss reads
        return model(b.x, b.edge_index, embed(emb, b), b.num_sampled_nodes,
                     b.num_sampled_edges)
    return model(b.x, b.edge_index, embed(emb, b))


def peak_rss_mb() -> list[float]:
    """Every rank's peak resident memory so far in MiB (``ru_maxrss``), in rank order
    (collective on the default group)."""
    mine = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0],
                        dtype=torch.float64)  # KiB on Linux
    got = [torch.zeros(1, dtype=torch.float64) for _ in range(dist.get_world_size())]
    dist.all_gather(got, mine)
    return [round(float(g), 1) for g in got]


def run_typed_link_job(cfg: JobConfig, resume: bool = False, progress: bool = True) -> dict:
    """The typed link job on this rank (inside torchrun); returns the final metrics."""
    from ..graph.typed_link_split import (
        split_relation,
        split_relation_by_time,
        typed_training_graph,
    )
    from ..loaders.link import DistLinkNeighborLoader
    from ..sampling.link import reverse_relation

    precheck_typed_job(cfg)
    lk, s = cfg.link, cfg.sampler
    by_time = lk.split_by == "time"
    split: dict[str, np.ndarray] = {}

    def training_graph():
        g = load_typed_dataset(cfg)
        et = link_edge_type(cfg, meta_of_graph(g))
        split.update(split_relation_by_time(g, et, lk.split) if by_time else
                     split_relation(g, et, lk.split, lk.split_seed), edge_type=et)
        rev = reverse_relation(et, list(g.edge_types))
        load = {"task": "link", "link_edge_type": list(et),
                "link_split": [float(f) for f in lk.split], "link_split_seed": int(lk.split_seed)}
        if by_time:
            load["link_split_by"] = "time"
        return (lambda: typed_training_graph(g, et, split, rev)), load

    job = start_typed_job(cfg, training_graph)
    et = split["edge_type"]
    try:
        mgroup = dist.new_group(backend=dist.get_backend())  # one for every loader
        fan, eval_fan = num_neighbors(s.fanouts), num_neighbors(s.eval_fanouts)

        def temporal(k: str) -> dict:  # each edge bounded by its time minus one
            if s.time_attr is None:
                return {"disjoint": s.disjoint}
            return {"edge_label_time": torch.from_numpy(split[f"{k}_time"] - 1),
                    "time_attr": s.time_attr, "temporal_strategy": s.temporal_strategy,
                    "disjoint": s.disjoint}

        train_loader = DistLinkNeighborLoader(
            job.service, fan, (et, split["train"]), batch_size=s.batch_size, shuffle=s.shuffle,
            drop_last=s.drop_last,
            neg_sampling={"mode": lk.neg_sampling, "amount": lk.neg_amount,
                          "reject_known": lk.reject_known},
            exclude_seed_edges=lk.exclude_seed_edges, part=job.part, membership_group=mgroup,
            seed=s.seed, prefetch=s.prefetch, replace=s.replace, edge_ids=s.edge_ids,
            **temporal("train"))
        evals = {k: DistLinkNeighborLoader(
            job.service, eval_fan, (et, split[k]), batch_size=s.eval_batch_size,
            neg_sampling={"mode": "triplet", "amount": lk.eval_negatives, "reject_known": True},
            part=job.part, membership_group=mgroup, seed=s.seed + 1, prefetch=s.prefetch,
            edge_ids=s.edge_ids, **temporal(k)) for k in ("val", "test")}
        tr = cfg.training
        steps = min(len(train_loader), tr.max_steps_per_epoch or len(train_loader))
        report = RunReport(job.rank, tr.epochs, steps, tr.log_every, progress,
                           Path(cfg.output.dir) / cfg.output.metrics_file)
        try:
            final, line = _train(job, et, train_loader, evals, resume, report)
        finally:
            report.close()
    finally:
        job.service.shutdown()
    report.service(job.service.stats())
    report.final(final, line)
    return final


def _train(job: TypedJob, et, train_loader, evals: dict, resume: bool,
           report: RunReport) -> tuple[dict, str]:
    from torch.nn.parallel import DistributedDataParallel as DDP

    cfg, device = job.cfg, job.device
    lk, m = cfg.link, cfg.model
    encoder, emb = typed_model(job, m.hidden, target=(et[0], et[2]))
    net = HeteroLinkModel(encoder, et, m.hidden,
                          lk.decoder).to(device)
    model = DDP(net, device_ids=[device.index] if device.type == "cuda" else None)
    opt = make_optimizer(model.parameters(), cfg.optimizer)
    first_epoch = resume_point(cfg, resume, job.rank, job.world, device, net, opt, train_loader,
                               report, emb)
    report.start(mode="train", task="link", world_size=job.world, first_epoch=first_epoch,
                 config=config_to_dict(cfg))
    report.print(f"link prediction of {list(et)} on {job.world} rank(s): {report.steps} batches "
                 "per epoch and rank; acc = binary accuracy of the edge scores")
    report.open_bar(first_epoch)
    triplet = lk.neg_sampling == "triplet"
    widths = [m.hidden, m.embedding_dim or m.hidden, *job.meta.x_dims.values()]
    budget = eval_node_budget(max(widths), cfg.training.eval_memory_mb)

    def forward(b) -> tuple[torch.Tensor, float, int]:
        return batch_loss(_encode(model, emb, b), b, net.score, device, triplet)

    def validate(rec: dict) -> str:
        v = evaluate_link(model, net, emb, evals["val"], device, lk.hits_k, budget)
        rec.update({f"val_{k}": x for k, x in v.items()})
        return (f"  val AUC {rec['val_auc']:.4f}  MRR {rec['val_mrr']:.4f}  "
                f"Hits@{lk.hits_k} {rec['val_hits']:.4f}")

    run_epochs(cfg, model, opt, train_loader, job.rank, job.world, report, first_epoch, forward,
               validate, metrics=("val_acc", "val_loss", "val_auc", "val_mrr"), embedding=emb)
    report.close()
    test = evaluate_link(model, net, emb, evals["test"], device, lk.hits_k, budget)
    val = evaluate_link(model, net, emb, evals["val"], device, lk.hits_k, budget)
    wall = time.perf_counter() - job.t_start
    k = lk.hits_k
    peak = peak_rss_mb()
    final = {"event": "final", "task": "link", "edge_type": list(et),
             **{f"test_{n}": x for n, x in test.items()},
             **{f"val_{n}": x for n, x in val.items()}, "hits_k": k, "wall_s": wall,
             "world_size": job.world, "peak_rss_mb": peak}
    return final, (f"val AUC {val['auc']:.4f}  test AUC {test['auc']:.4f}  test MRR "
                   f"{test['mrr']:.4f}  test Hits@{k} {test['hits']:.4f}  ({job.world} "
                   f"rank(s), {wall:.1f}s, peak memory {max(peak):,.0f} MiB on a rank)")
