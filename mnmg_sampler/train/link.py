"""The link-prediction job (``task: link``): GraphSAGE encoder, dot or MLP decoder
(:class:`~.model.LinkModel`), BCE loss, on a homogeneous graph or on one relation of a typed
graph (``link.edge_type``), with the node job's order of events (:mod:`.job`).

The edges are split into train/val/test alike on every rank (at random, or by time); only the
*training graph* (no held-out edge nor its reverse) is partitioned, so held-out edges are never
messages. Evaluation ranks each held-out edge among ``link.eval_negatives`` negatives (AUC, MRR,
Hits@K); disjoint (temporal) evaluation encodes a batch in chunks of whole trees of at most
:func:`eval_node_budget` nodes, so its memory does not grow with the batch. See
docs/link.md#the-job-task-link and docs/temporal.md#evaluation-memory-and-step-time.
"""

from __future__ import annotations

import logging
import resource
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from ..config import JobConfig
from ..distributed.collective import all_gather_1d
from ..errors import ConfigError, PartitionError
from ..graph.csr import CSRGraph, entry_rows
from ..graph.link_split import cut_pairs
from ..graph.unique import sorted_unique
from .epochs import run_epochs
from .model import LinkModel
from .report import RunReport
from .setup import (
    Job,
    embed,
    load_dataset,
    load_typed_dataset,
    make_model,
    num_neighbors,
    start_job,
)

log = logging.getLogger(__name__)

__all__ = ["auc", "eval_node_budget", "evaluate_link", "peak_rss_mb", "rank_metrics",
           "run_link_job", "split_edges", "training_graph"]

EVAL_MEMORY_MB = 256  # a chunk's share of evaluation memory without training.eval_memory_mb


def split_edges(graph: CSRGraph, fractions, seed: int, undirected: bool) -> dict[str, np.ndarray]:
    """Random train/val/test split of a graph's edges as ``[2, E]`` arrays (original ids).

    On an undirected graph (each edge stored both ways) the node pairs ``u < v`` are split, so an
    edge and its reverse always land in the same split; self-loops stay in training only.
    """
    dst = entry_rows(graph.indptr)
    src = np.asarray(graph.indices, np.int64)
    if undirected:
        keep = src < dst
        loops = src == dst
        pairs = np.unique(np.stack([src[keep], dst[keep]]), axis=1)
        loop_pairs = np.stack([src[loops], dst[loops]])
    else:
        pairs = np.unique(np.stack([src, dst]), axis=1)
        loop_pairs = np.empty((2, 0), np.int64)
    out = cut_pairs(pairs, fractions, seed)
    out["graph"] = np.concatenate([out["train"], loop_pairs], 1)
    return out


def training_graph(full: CSRGraph, split: dict, undirected: bool) -> CSRGraph:
    """The graph messages are sampled from: train edges (and their reverses) only."""
    g = CSRGraph.from_edges(split["graph"][0], split["graph"][1], full.num_nodes,
                            undirected=undirected, drop_duplicates=True, x=full.x, y=full.y,
                            name=f"{full.name}-train-edges")
    return g


def auc(pos: np.ndarray, neg: np.ndarray) -> float:
    """Area under the ROC curve: P(positive score > negative score), ties counted half (the
    Mann-Whitney U over ``P * N``)."""
    if pos.size == 0 or neg.size == 0:
        return float("nan")
    neg = np.sort(np.asarray(neg, np.float64))
    pos = np.asarray(pos, np.float64)
    u = np.searchsorted(neg, pos, "left").sum() + np.searchsorted(neg, pos, "right").sum()
    return float(u / 2.0 / (pos.size * neg.size))


def rank_metrics(pos: torch.Tensor, neg: torch.Tensor, k: int) -> tuple[float, float]:
    """Sums (not means) of reciprocal rank and of hits@k of each positive among its own
    negatives ``neg[i]`` (ties count half, as OGB's MRR)."""
    opt = (neg > pos[:, None]).sum(1).double()
    pes = (neg >= pos[:, None]).sum(1).double()
    rank = 0.5 * (opt + pes) + 1
    return float((1.0 / rank).sum()), float((rank <= k).sum())


def _gather_scores(t: torch.Tensor) -> np.ndarray:
    """All ranks' 1-D float tensors concatenated in rank order (default group, collective)."""
    return torch.cat(all_gather_1d(t.double())).numpy()


def _triplet(h, b, score, device) -> tuple[torch.Tensor, torch.Tensor]:
    """A triplet batch's positive logits ``[P]`` and each positive's negatives' ``[P, k]``."""
    src = b.src_index.to(device)
    dn = b.dst_neg_index.to(device).reshape(src.numel(), -1)
    pos = score(h, src, b.dst_pos_index.to(device))
    return pos, score(h, src.repeat_interleave(dn.shape[1]), dn.reshape(-1)).view_as(dn)


def batch_loss(h, b, score, device, triplet: bool) -> tuple[torch.Tensor, float, int]:
    """A training batch's BCE loss over its edges' logits (``score(h, src, dst)`` on the node
    embeddings ``h``: positives and negatives of a triplet batch, or its labelled edges), with
    the count of correct signs and of edges."""
    if triplet:
        pos, neg = _triplet(h, b, score, device)
        logits = torch.cat([pos, neg.reshape(-1)])
        target = torch.cat([torch.ones_like(pos), torch.zeros_like(logits[pos.numel():])])
    else:
        eli = b.edge_label_index.to(device)
        logits = score(h, eli[0], eli[1])
        target = b.edge_label.to(device).float()
    correct = float(((logits > 0).float() == target).sum())
    return F.binary_cross_entropy_with_logits(logits, target), correct, logits.numel()


class ScoreTotals:
    """Per-rank sums of an evaluation's ranking metrics and every score, batch by batch;
    :meth:`result` reduces them over ranks (collective)."""

    def __init__(self, hits_k: int) -> None:
        self.hits_k = hits_k
        self.pos_all: list[torch.Tensor] = []
        self.neg_all: list[torch.Tensor] = []
        self.acc = torch.zeros(4, dtype=torch.float64)  # rr sum, hits sum, positives, loss sum

    def add(self, pos: torch.Tensor, neg: torch.Tensor) -> None:
        """A batch's positive logits ``[P]`` and each positive's negatives' ``[P, amount]``."""
        rr, hits = rank_metrics(pos, neg, self.hits_k)
        loss = F.binary_cross_entropy_with_logits(pos, torch.ones_like(pos), reduction="sum") + \
            F.binary_cross_entropy_with_logits(neg, torch.zeros_like(neg), reduction="sum")
        self.acc += torch.tensor([rr, hits, pos.numel(), float(loss)], dtype=torch.float64)
        self.pos_all.append(pos.cpu())
        self.neg_all.append(neg.reshape(-1).cpu())

    def result(self) -> dict:
        acc = self.acc
        dist.all_reduce(acc)
        pos_g = _gather_scores(torch.cat(self.pos_all) if self.pos_all else torch.zeros(0))
        neg_g = _gather_scores(torch.cat(self.neg_all) if self.neg_all else torch.zeros(0))
        n = max(float(acc[2]), 1.0)
        return {"auc": auc(pos_g, neg_g), "mrr": float(acc[0]) / n,
                "hits": float(acc[1]) / n,
                "loss": float(acc[3]) / max(pos_g.size + neg_g.size, 1)}


def eval_node_budget(width: int, memory_mb: float | None) -> int:
    """Nodes per disjoint evaluation chunk: ``memory_mb`` (default :data:`EVAL_MEMORY_MB`) over
    the bytes a node costs in the encoder, about four float32 rows of the widest layer
    (measured: 2.6 KB a node at width 256 on a 2-hop heterogeneous GraphSAGE) plus its ids."""
    per_node = 4 * 4 * max(int(width), 1) + 64
    return max(1, int((memory_mb or EVAL_MEMORY_MB) * 2**20) // per_node)


@torch.no_grad()
def evaluate_link(model, net: LinkModel, emb, loader, device, hits_k: int,
                  max_nodes: int | None = None) -> dict:
    """AUC, MRR, Hits@K and BCE loss over every rank's batches of a triplet ``loader``
    (collective); ``emb``: the job's embedding rows, or ``None``. A disjoint ``loader`` is read
    in chunks of whole trees of at most ``max_nodes`` nodes (``None``: one chunk per batch):
    each chunk is encoded alone and only its roots' embeddings are kept until the batch's
    edges are scored; a root's embedding depends on its tree only, so the metrics are those of
    whole batches."""
    if loader._time.get("disjoint"):
        return _evaluate_trees(model, net, emb, loader, device, hits_k, max_nodes or 2**62)
    model.eval()
    tot = ScoreTotals(hits_k)
    for b in loader:
        tot.add(*_triplet(_encode(model, emb, b, device, False), b, net.score, device))
    model.train()
    return tot.result()


@torch.no_grad()
def _evaluate_trees(model, net: LinkModel, emb, loader, device, hits_k: int,
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


def _encode(model, emb, b, device, train: bool = True):
    """The encoder's outputs of a batch, reading its features and/or learned rows
    (collective); a disjoint typed batch's trimmed per layer to the rows that reach the seeds
    (every seed a tree root, the only rows the loss reads)."""
    rows = embed(emb, b, train)
    if b.batch:  # disjoint (a typed batch): every seed is a tree root
        return model(b.x, b.edge_index, rows, b.num_sampled_nodes, b.num_sampled_edges)
    return model(b.x, b.edge_index, rows)


def peak_rss_mb() -> list[float]:
    """Every rank's peak resident memory so far in MiB (``ru_maxrss``), in rank order
    (collective on the default group)."""
    mine = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0],
                        dtype=torch.float64)  # KiB on Linux
    return [round(float(g), 1) for g in all_gather_1d(mine)]


def _is_undirected(g: CSRGraph) -> bool:
    dst = entry_rows(g.indptr)
    n = np.int64(max(g.num_nodes, 1))
    fwd = sorted_unique(np.asarray(g.indices, np.int64) * n + dst)
    rev = sorted_unique(dst * n + np.asarray(g.indices, np.int64))
    return fwd.size == rev.size and bool(np.array_equal(fwd, rev))




def _training_graph(cfg: JobConfig, split: dict):
    """Every rank: the dataset's edges split (into ``split``, the same on every rank) and
    ``(build, load)`` of :func:`~.setup.start_job`: the training graph and what its manifest
    records."""
    lk = cfg.link
    full = load_dataset(cfg)
    if full.x is None and cfg.model.embeddings == "none":
        raise ConfigError(f"model.embeddings: none, but dataset {cfg.dataset.name!r} has no "
                          "node features", "the encoder has no input",
                          "set model.embeddings: featureless (a learned row per node), or "
                          "dataset.feature_dim > 0 for random features")
    undirected = _is_undirected(full)
    split.update(split_edges(full, lk.split, lk.split_seed, undirected), undirected=undirected)
    graph = training_graph(full, split, undirected)
    split["num_edges"] = graph.num_edges
    return (lambda: graph), {"task": "link", "link_split": [float(f) for f in lk.split],
                             "link_split_seed": int(lk.split_seed),
                             "weights": cfg.sampler.weights or None}


def _typed_training_graph(cfg: JobConfig, split: dict):
    """:func:`_training_graph` of one relation of a typed graph (``split["edge_type"]``)."""
    from ..graph.link_split import (
        split_relation,
        split_relation_by_time,
        typed_training_graph,
    )
    from ..sampling.link import reverse_relation
    from .checks import link_edge_type, meta_of_graph

    lk = cfg.link
    g = load_typed_dataset(cfg)
    et = link_edge_type(cfg, meta_of_graph(g))
    by_time = lk.split_by == "time"
    split.update(split_relation_by_time(g, et, lk.split) if by_time else
                 split_relation(g, et, lk.split, lk.split_seed), edge_type=et)
    rev = reverse_relation(et, list(g.edge_types))
    load = {"task": "link", "link_edge_type": list(et),
            "link_split": [float(f) for f in lk.split], "link_split_seed": int(lk.split_seed)}
    if by_time:
        load["link_split_by"] = "time"
    return (lambda: typed_training_graph(g, et, split, rev)), load


def run_link_job(cfg: JobConfig, typed: bool, resume: bool = False,
                 progress: bool = True) -> dict:
    """Run the link-prediction job on this rank (inside torchrun), on a typed graph or not;
    returns the final metrics."""
    from ..loaders.link import DistLinkNeighborLoader

    split: dict = {}

    def check(part) -> dict:
        if int(part.num_edges) != split["num_edges"]:
            raise PartitionError(f"{cfg.partition.dir} holds a graph of {part.num_edges} "
                                 f"edges, the training graph of this job has "
                                 f"{split['num_edges']}",
                                 "it was partitioned for another dataset, split or task",
                                 "delete the directory or point partition.dir elsewhere")
        return {}

    job = start_job(cfg, typed, lambda: (_typed_training_graph if typed else _training_graph)(
        cfg, split), check=None if typed else check)
    et, lk, s = split.get("edge_type"), cfg.link, cfg.sampler
    with job:
        # one membership group for every loader: loaders are used one at a time in this thread
        mgroup = dist.new_group(backend=dist.get_backend())
        fan, eval_fan = num_neighbors(s.fanouts), num_neighbors(s.eval_fanouts)

        def edges(k: str) -> dict:  # the seed edges; each bounded by its time minus one
            out = {"edge_label_index": split[k] if et is None else (et, split[k]),
                   "disjoint": s.disjoint}
            if s.time_attr is not None:
                out.update(edge_label_time=torch.from_numpy(split[f"{k}_time"] - 1),
                           time_attr=s.time_attr, temporal_strategy=s.temporal_strategy)
            return out

        train_loader = DistLinkNeighborLoader(
            job.service, fan, batch_size=s.batch_size, shuffle=s.shuffle,
            drop_last=s.drop_last,
            neg_sampling={"mode": lk.neg_sampling, "amount": lk.neg_amount,
                          "reject_known": lk.reject_known},
            exclude_seed_edges=lk.exclude_seed_edges,
            exclude_reverse_edges=split.get("undirected", False), part=job.part,
            membership_group=mgroup, seed=s.seed, prefetch=s.prefetch, replace=s.replace,
            edge_ids=s.edge_ids, **edges("train"))
        evals = {k: DistLinkNeighborLoader(
            job.service, eval_fan, batch_size=s.eval_batch_size,
            neg_sampling={"mode": "triplet", "amount": lk.eval_negatives, "reject_known": True},
            part=job.part, membership_group=mgroup, seed=s.seed + 1, prefetch=s.prefetch,
            edge_ids=s.edge_ids, **edges(k)) for k in ("val", "test")}
        return job.run(train_loader, progress,
                       lambda report: _train(job, et, train_loader, evals, resume, report))


def _train(job: Job, et, train_loader, evals: dict, resume: bool,
           report: RunReport) -> tuple[dict, str]:
    cfg, device = job.cfg, job.device
    lk, m = cfg.link, cfg.model
    encoder, emb = make_model(job, m.hidden, target=None if et is None else (et[0], et[2]))
    net = LinkModel(encoder, m.hidden, lk.decoder, edge_type=et).to(device)
    model, opt, first_epoch = job.start_training(
        net, emb, train_loader, resume, report, "link prediction" + (
            "" if et is None else f" of {list(et)}") + f" on {job.world} rank(s): "
        f"{report.steps} batches per epoch and rank; acc = binary accuracy of the edge scores",
        task="link")
    triplet = lk.neg_sampling == "triplet"
    widths = [m.hidden, m.embedding_dim or m.hidden, *(job.meta.x_dims.values() if et else [])]
    budget = eval_node_budget(max(widths), cfg.training.eval_memory_mb)

    def forward(b) -> tuple[torch.Tensor, float, int]:
        return batch_loss(_encode(model, emb, b, device), b, net.score, device, triplet)

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
    final = {"event": "final", "task": "link", **{f"test_{n}": x for n, x in test.items()},
             **{f"val_{n}": x for n, x in val.items()}, "hits_k": k, "wall_s": wall,
             "world_size": job.world}
    peak = ""
    if et is not None:  # a typed job's record holds the edge type and every rank's peak memory
        final.update(edge_type=list(et), peak_rss_mb=peak_rss_mb())
        peak = f", peak memory {max(final['peak_rss_mb']):,.0f} MiB on a rank"
    return final, (f"val AUC {val['auc']:.4f}  test AUC {test['auc']:.4f}  test MRR "
                   f"{test['mrr']:.4f}  test Hits@{k} {test['hits']:.4f}  ({job.world} "
                   f"rank(s), {wall:.1f}s{peak})")
