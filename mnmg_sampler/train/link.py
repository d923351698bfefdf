"""The link-prediction job (``task: link``): GraphSAGE encoder, dot or MLP decoder, BCE loss.

Order of events on every rank, as in the node job (:mod:`.job`): the edges of the dataset are
split into train/val/test (the same split on every rank, from ``link.split_seed``); the
*training graph* (train edges only, so held-out edges can never be sampled as messages) is
partitioned once; a :class:`~mnmg_sampler.loaders.link.DistLinkNeighborLoader` draws binary or
triplet negatives; evaluation ranks each held-out edge among ``link.eval_negatives`` negative
destinations (negatives that are edges of the training graph are redrawn) and reports AUC over
all pairs, MRR and Hits@K.

A graph without node features (an edge list) trains on learned embedding rows
(``model.embeddings``, :mod:`mnmg_sampler.distributed.embeddings`): each node's row lives with
its owner, is fetched per batch and updated sparsely; with ``all`` a featured graph's input is
``lin(x) + emb(n_id)``.

Reproducibility is the node job's: model init, dropout and sampling are seeded per
(seed, epoch, rank) and checkpoints are taken at epoch ends, so ``--resume`` after a kill
continues to the same metrics as an uninterrupted run.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from ..config import JobConfig, check_paths, config_to_dict
from ..distributed.collective import agree
from ..errors import ConfigError, PartitionError
from ..graph.csr import CSRGraph
from ..graph.unique import sorted_unique
from .epochs import run_epochs
from .report import RunReport
from .setup import (
    host_memory_bytes,
    job_edge_weights,
    job_embedding,
    load_dataset,
    make_optimizer,
    resume_point,
    start_rank,
)

log = logging.getLogger(__name__)

__all__ = ["split_edges", "LinkModel", "auc", "rank_metrics", "run_link_job"]


def split_edges(graph: CSRGraph, fractions, seed: int, undirected: bool) -> dict[str, np.ndarray]:
    """Random train/val/test split of a graph's edges as ``[2, E]`` arrays (original ids).

    On an undirected graph (each edge stored both ways) the node pairs ``u < v`` are split, so an
    edge and its reverse always land in the same split; self-loops stay in training only.
    """
    dst = np.repeat(np.arange(graph.num_nodes, dtype=np.int64), graph.degrees())
    src = np.asarray(graph.indices, np.int64)
    if undirected:
        keep = src < dst
        loops = src == dst
        pairs = np.unique(np.stack([src[keep], dst[keep]]), axis=1)
        loop_pairs = np.stack([src[loops], dst[loops]])
    else:
        pairs = np.unique(np.stack([src, dst]), axis=1)
        loop_pairs = np.empty((2, 0), np.int64)
    perm = np.random.default_rng([seed, 0x11A4]).permutation(pairs.shape[1])
    f = np.asarray(fractions, np.float64)
    n = pairs.shape[1]
    a, b = int(round(f[0] * n)), int(round((f[0] + f[1]) * n))
    c = int(round(min(1.0, float(f.sum())) * n))
    out = {k: pairs[:, np.sort(perm[lo:hi])] for k, lo, hi in
           (("train", 0, a), ("val", a, b), ("test", b, c))}
    out["graph"] = np.concatenate([out["train"], loop_pairs], 1)
    return out


def training_graph(full: CSRGraph, split: dict, undirected: bool) -> CSRGraph:
    """The graph messages are sampled from: train edges (and their reverses) only."""
    g = CSRGraph.from_edges(split["graph"][0], split["graph"][1], full.num_nodes,
                            undirected=undirected, drop_duplicates=True, x=full.x, y=full.y,
                            name=f"{full.name}-train-edges")
    return g


class LinkModel(nn.Module):
    """GraphSAGE encoder and an edge decoder: ``dot`` (``<h_s, h_d> / sqrt(d)``) or ``mlp`` of
    ``h_s * h_d``; :meth:`score` returns logits. With ``embedding_dim``, the encoder reads the
    batch's embedding rows (``emb``): alone when ``in_dim`` is 0 (no features), else
    ``lin(x) + emb``."""

    def __init__(self, in_dim: int, hidden: int, layers: int, dropout: float, aggr: str,
                 use_pyg: bool | None, decoder: str = "dot", embedding_dim: int = 0) -> None:
        from .model import GraphSAGE

        super().__init__()
        self.id_lin = nn.Linear(in_dim, embedding_dim) if in_dim and embedding_dim else None
        self.encoder = GraphSAGE(embedding_dim or in_dim, hidden, hidden, layers,
                                 dropout=dropout, aggr=aggr, use_pyg=use_pyg)
        if decoder not in ("dot", "mlp"):
            raise ConfigError(f"link.decoder is {decoder!r}", "edges cannot be scored",
                              "use dot or mlp")
        self.decoder = decoder
        self.mlp = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1)) \
            if decoder == "mlp" else None

    def forward(self, x: torch.Tensor | None, edge_index: torch.Tensor,
                emb: torch.Tensor | None = None) -> torch.Tensor:
        if emb is not None:
            emb = emb.to(edge_index.device)
            x = emb if self.id_lin is None else self.id_lin(x) + emb
        return self.encoder(x, edge_index)

    def score(self, h: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        """Logits of the edges ``src[i] -> dst[i]`` (local ids into ``h``)."""
        z = h[src] * h[dst]
        return z.sum(-1) * z.shape[-1] ** -0.5 if self.mlp is None else self.mlp(z).squeeze(-1)


def auc(pos: np.ndarray, neg: np.ndarray) -> float:
    """Area under the ROC curve: P(positive score > negative score), ties counted half."""
    if pos.size == 0 or neg.size == 0:
        return float("nan")
    allv = np.concatenate([pos, neg]).astype(np.float64)
    order = np.argsort(allv, kind="stable")
    ranks = np.empty(allv.size, np.float64)
    sv = allv[order]
    # average ranks of ties (1-based)
    starts = np.flatnonzero(np.r_[True, sv[1:] != sv[:-1]])
    ends = np.r_[starts[1:], sv.size]
    avg = (starts + ends + 1) / 2.0
    ranks[order] = np.repeat(avg, ends - starts)
    r = ranks[:pos.size].sum()
    return float((r - pos.size * (pos.size + 1) / 2.0) / (pos.size * neg.size))


def rank_metrics(pos: torch.Tensor, neg: torch.Tensor, k: int) -> tuple[float, float]:
    """Sums (not means) of reciprocal rank and of hits@k of each positive among its own
    negatives ``neg[i]`` (ties count half, as OGB's MRR)."""
    opt = (neg > pos[:, None]).sum(1).double()
    pes = (neg >= pos[:, None]).sum(1).double()
    rank = 0.5 * (opt + pes) + 1
    return float((1.0 / rank).sum()), float((rank <= k).sum())


def _gather_scores(t: torch.Tensor) -> np.ndarray:
    """All ranks' 1-D float tensors concatenated in rank order (default group, collective)."""
    world = dist.get_world_size()
    n = torch.tensor([t.numel()], dtype=torch.int64)
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(sizes, n)
    m = max(int(s) for s in sizes)
    buf = torch.zeros(m, dtype=torch.float64)
    buf[:t.numel()] = t.double()
    got = [torch.zeros(m, dtype=torch.float64) for _ in range(world)]
    dist.all_gather(got, buf)
    return torch.cat([g[:int(s)] for g, s in zip(got, sizes, strict=True)]).numpy()


def batch_loss(h, b, score, device, triplet: bool) -> tuple[torch.Tensor, float, int]:
    """A training batch's BCE loss over its edges' logits (``score(h, src, dst)`` on the node
    embeddings ``h``: positives and negatives of a triplet batch, or its labelled edges), with
    the count of correct signs and of edges (homogeneous and typed models alike)."""
    if triplet:
        src = b.src_index.to(device)
        dn = b.dst_neg_index.to(device).reshape(src.numel(), -1)
        pos = score(h, src, b.dst_pos_index.to(device))
        neg = score(h, src.repeat_interleave(dn.shape[1]), dn.reshape(-1))
        logits = torch.cat([pos, neg])
        target = torch.cat([torch.ones_like(pos), torch.zeros_like(neg)])
    else:
        eli = b.edge_label_index.to(device)
        logits = score(h, eli[0], eli[1])
        target = b.edge_label.to(device).float()
    correct = float(((logits > 0).float() == target).sum())
    return F.binary_cross_entropy_with_logits(logits, target), correct, logits.numel()


def evaluate(model, loader, device, hits_k: int, emb=None) -> dict:
    """AUC, MRR, Hits@K and BCE loss over every rank's batches of a triplet ``loader``
    (``emb``: the job's embedding rows, or ``None``)."""
    sc = model.module.score if hasattr(model, "module") else model.score
    return evaluate_scores(model, loader, device, hits_k,
                           lambda b: _encode(model, b, device, emb, False), sc)


def _encode(model, b, device, emb, train: bool = True) -> torch.Tensor:
    """The encoder's outputs of a batch: features, embedding rows (collective), or both."""
    x = b.x.to(device) if b.x is not None else None
    rows = emb.fetch(b.n_id.numpy(), train=train) if emb is not None else None
    return model(x, b.edge_index.to(device), rows)


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


@torch.no_grad()
def evaluate_scores(model, loader, device, hits_k: int, embed, score) -> dict:
    """AUC, MRR, Hits@K and BCE loss over every rank's batches of a triplet ``loader``
    (collective): ``embed(batch)`` gives the node embeddings ``h``, ``score(h, src, dst)``
    the edges' logits (homogeneous and typed models alike)."""
    model.eval()
    tot = ScoreTotals(hits_k)
    for b in loader:
        h = embed(b)
        s, d = b.src_index.to(device), b.dst_pos_index.to(device)
        dn = b.dst_neg_index.to(device).reshape(s.numel(), -1)
        pos = score(h, s, d)
        neg = score(h, s.repeat_interleave(dn.shape[1]), dn.reshape(-1)).view_as(dn)
        tot.add(pos, neg)
    model.train()
    return tot.result()


def ensure_link_partitions(cfg: JobConfig, graph: CSRGraph, rank: int, world: int) -> Path:
    """Partition the training graph unless ``partition.dir`` holds exactly that (collective).

    The manifest's source records the dataset, its load options, the edge split and the weights,
    so a directory made for another split or for the node task is partitioned again.
    """
    from ..graph.partition import partition
    from ..graph.partition_io import MANIFEST, make_source, read_manifest, source_differences
    out = Path(cfg.partition.dir)

    def build() -> None:
        if rank != 0:
            return
        d, p, lk = cfg.dataset, cfg.partition, cfg.link
        want = make_source(d.name, method=p.method, seed=p.seed, parts=world,
                           undirected=d.undirected, drop_self_loops=d.drop_self_loops,
                           drop_duplicates=d.drop_duplicates, graph_seed=d.seed,
                           feature_dim=d.feature_dim)
        want["load"].update(task="link", link_split=[float(f) for f in lk.split],
                            link_split_seed=int(lk.split_seed),
                            weights=cfg.sampler.weights or None)
        if (out / MANIFEST).exists():
            try:
                stale = source_differences(read_manifest(out), want)
            except PartitionError as e:
                stale = [f"unreadable manifest ({e.what})"]
            if not stale:
                return
            log.warning("partition directory %s is stale (%s); partitioning again", out,
                        "; ".join(stale))
        log.info("partitioning the training graph of %s into %d parts -> %s", d.name, world,
                 out)
        out.parent.mkdir(parents=True, exist_ok=True)
        partition(graph, world, p.method, out, seed=p.seed, overwrite=True, source=want,
                  weights=job_edge_weights(cfg, graph))

    agree(build)
    return out


def run_link_job(cfg: JobConfig, resume: bool = False, progress: bool = True) -> dict:
    """Run the link-prediction job on this rank (inside torchrun); returns the final metrics."""
    from ..distributed.service import SamplingService
    from ..graph.partition_io import load_partition
    from ..loaders.link import DistLinkNeighborLoader

    check_paths(cfg)
    if cfg.training.mode != "train":
        raise ConfigError(f"training.mode is {cfg.training.mode!r} with task link",
                          "the link job only trains", "use training.mode=train, or task=node "
                          "for a sampling run")
    rt = cfg.runtime
    env, device = start_rank(cfg)
    rank, world = env.rank, env.world_size
    t_start = time.perf_counter()
    full = agree(lambda: load_dataset(cfg))
    if full.x is None and cfg.model.embeddings == "none":
        raise ConfigError(f"model.embeddings: none, but dataset {cfg.dataset.name!r} has no "
                          "node features", "the encoder has no input",
                          "set model.embeddings: featureless (a learned row per node), or "
                          "dataset.feature_dim > 0 for random features")
    undirected = _is_undirected(full)
    lk = cfg.link
    split = split_edges(full, lk.split, lk.split_seed, undirected)
    graph = training_graph(full, split, undirected)
    pdir = ensure_link_partitions(cfg, graph, rank, world)
    part = agree(lambda: load_partition(pdir, rank, world))
    if int(part.num_edges) != graph.num_edges:
        raise PartitionError(f"{pdir} holds a graph of {part.num_edges} edges, the training "
                             f"graph of this job has {graph.num_edges}",
                             "it was partitioned for another dataset, split or task",
                             "delete the directory or point partition.dir elsewhere")
    s = cfg.sampler
    placement = cfg.features.placement
    if placement == "auto":
        placement = "pinned" if device.type == "cuda" else "host"
    service = SamplingService(part, seed=s.seed, placement=placement, device=device,
                              mode=None if rt.service_mode == "auto" else rt.service_mode,
                              timeout_s=rt.collective_timeout_s, id_maps=s.id_maps,
                              host_memory=host_memory_bytes(cfg))
    # one membership group for every loader: loaders are used one at a time in this thread
    mgroup = dist.new_group(backend=dist.get_backend())
    train_loader = DistLinkNeighborLoader(
        service, s.fanouts, split["train"], batch_size=s.batch_size, shuffle=s.shuffle,
        drop_last=s.drop_last,
        neg_sampling={"mode": lk.neg_sampling, "amount": lk.neg_amount,
                      "reject_known": lk.reject_known},
        exclude_seed_edges=lk.exclude_seed_edges, exclude_reverse_edges=undirected, part=part,
        membership_group=mgroup, seed=s.seed, prefetch=s.prefetch, replace=s.replace,
        edge_ids=s.edge_ids)
    eval_loaders = {k: DistLinkNeighborLoader(
        service, s.eval_fanouts, split[k], batch_size=s.eval_batch_size,
        neg_sampling={"mode": "triplet", "amount": lk.eval_negatives, "reject_known": True},
        part=part, membership_group=mgroup, seed=s.seed + 1, prefetch=s.prefetch,
        edge_ids=s.edge_ids)
        for k in ("val", "test")}
    tr = cfg.training
    steps = min(len(train_loader), tr.max_steps_per_epoch or len(train_loader))
    report = RunReport(rank, tr.epochs, steps, tr.log_every, progress,
                       Path(cfg.output.dir) / cfg.output.metrics_file)
    try:
        final, line = _train(cfg, train_loader, eval_loaders, part, device, rank, world,
                             resume, report, t_start)
    finally:
        service.shutdown()
        report.close()
    report.service(service.stats())
    report.final(final, line)
    return final


def _is_undirected(g: CSRGraph) -> bool:
    dst = np.repeat(np.arange(g.num_nodes, dtype=np.int64), g.degrees())
    n = np.int64(max(g.num_nodes, 1))
    fwd = sorted_unique(np.asarray(g.indices, np.int64) * n + dst)
    rev = sorted_unique(dst * n + np.asarray(g.indices, np.int64))
    return fwd.size == rev.size and bool(np.array_equal(fwd, rev))


def _train(cfg, train_loader, eval_loaders, part, device, rank, world, resume,
           report: RunReport, t_start) -> tuple[dict, str]:
    from torch.nn.parallel import DistributedDataParallel as DDP

    s, m, o, lk = cfg.sampler, cfg.model, cfg.optimizer, cfg.link
    in_dim = int(part.x.shape[1]) if part.x is not None else 0
    rows = in_dim == 0 or m.embeddings == "all"
    torch.manual_seed(s.seed)
    net = LinkModel(in_dim, m.hidden, m.layers, m.dropout, m.aggr, m.use_pyg, lk.decoder,
                    int(m.embedding_dim or m.hidden) if rows else 0).to(device)
    model = DDP(net, device_ids=[device.index] if device.type == "cuda" else None)
    opt = make_optimizer(model.parameters(), o)
    emb = job_embedding(cfg, part, None, train_loader.service) if rows else None
    first_epoch = resume_point(cfg, resume, rank, world, device, net, opt, train_loader,
                               report, emb)
    report.start(mode="train", task="link", world_size=world, first_epoch=first_epoch,
                 config=config_to_dict(cfg))
    report.print(f"link prediction on {world} rank(s): {report.steps} batches per epoch and "
                 "rank; acc = binary accuracy of the edge scores")
    report.open_bar(first_epoch)
    triplet = lk.neg_sampling == "triplet"

    def forward(b) -> tuple[torch.Tensor, float, int]:
        return batch_loss(_encode(model, b, device, emb), b, net.score, device, triplet)

    def validate(rec: dict) -> str | None:
        v = evaluate(model, eval_loaders["val"], device, lk.hits_k, emb)
        rec.update({f"val_{k}": x for k, x in v.items()})
        if "val_auc" not in rec:
            return None
        return (f"  val AUC {rec['val_auc']:.4f}  MRR {rec['val_mrr']:.4f}  "
                f"Hits@{lk.hits_k} {rec['val_hits']:.4f}")

    run_epochs(cfg, model, opt, train_loader, rank, world, report, first_epoch, forward,
               validate, metrics=("val_acc", "val_loss", "val_auc", "val_mrr"), embedding=emb)
    report.close()
    test = evaluate(model, eval_loaders["test"], device, lk.hits_k, emb)
    val = evaluate(model, eval_loaders["val"], device, lk.hits_k, emb)
    wall = time.perf_counter() - t_start
    k = lk.hits_k
    final = {"event": "final", "task": "link", **{f"test_{n}": x for n, x in test.items()},
             **{f"val_{n}": x for n, x in val.items()}, "hits_k": k, "wall_s": wall,
             "world_size": world}
    return final, (f"val AUC {val['auc']:.4f}  test AUC {test['auc']:.4f}  test MRR "
                   f"{test['mrr']:.4f}  test Hits@{k} {test['hits']:.4f}  ({world} rank(s), "
                   f"{wall:.1f}s)")
