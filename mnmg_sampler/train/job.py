"""The YAML-configured GraphSAGE job run by ``mnmg-sampler train`` under torchrun.

Order of events on every rank: load and check the config (a bad config fails every rank the same
way, before any collective), start the process group, partition the dataset if its partition
directory is missing (rank 0 writes atomically, the others wait), start the sampling service and
loaders, train with DDP, evaluate, checkpoint atomically, print test accuracy on rank 0. A
typed (heterogeneous) dataset runs the same steps in :mod:`.hetero`. A graph without features
trains on learned embedding rows (``model.embeddings``, one per node, with its owner).

Reproducibility: model init, dropout and sampling are seeded per (seed, epoch, rank), and
checkpoints are taken at epoch ends, so a run resumed from a checkpoint continues exactly as an
uninterrupted run would.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from ..config import JobConfig, check_paths, config_to_dict, parse_dataset_name
from ..distributed.collective import agree
from ..errors import ConfigError
from .epochs import run_epochs, sample_epochs
from .report import RunReport
from .setup import (
    ensure_partitions,
    feature_placement,
    host_memory_bytes,
    job_embedding,
    make_optimizer,
    resume_point,
    start_rank,
)

log = logging.getLogger(__name__)


def split_ids(num_nodes: int, fractions, seed: int) -> dict:
    """Random train/val/test split of node ids (original ids), the same on every rank: ranges of
    a keyed permutation (:func:`~mnmg_sampler.loaders.seeds.random_node_split`, a
    :class:`~mnmg_sampler.loaders.seeds.NodeSplit` per name), no array of ``num_nodes`` on any
    rank."""
    from ..loaders.seeds import random_node_split

    return random_node_split(num_nodes, fractions, seed)


def _inputs(b, device, emb, train: bool = True) -> torch.Tensor:
    """A batch's input rows: its features, or its nodes' learned rows (collective)."""
    return b.x.to(device) if emb is None else emb.fetch(b.n_id.numpy(), train=train).to(device)


@torch.no_grad()
def evaluate(model, loader, device, emb=None) -> tuple[float, float]:
    """(accuracy, mean loss) over every rank's batches of ``loader`` (collective)."""
    model.eval()
    acc = torch.zeros(3, dtype=torch.float64)
    for b in loader:
        out = model(_inputs(b, device, emb, False), b.edge_index.to(device))[: b.batch_size]
        y = b.y[: b.batch_size].to(device)
        acc[0] += float((out.argmax(-1) == y).sum())
        acc[1] += b.batch_size
        acc[2] += float(torch.nn.functional.cross_entropy(out, y, reduction="sum"))
    model.train()
    dist.all_reduce(acc)  # default group: the service thread owns its own group
    return float(acc[0] / max(acc[1], 1)), float(acc[2] / max(acc[1], 1))


def make_evaluator(cfg: JobConfig, service, ids: dict, part, device, num_classes: int,
                   emb=None):
    """``f(model, splits) -> {split: (accuracy, loss)}`` for ``training.eval_mode`` (collective);
    ``emb``: the nodes' learned rows of a graph without features.

    ``layerwise`` runs exact full-neighbor inference one layer at a time over this rank's nodes
    (:mod:`mnmg_sampler.train.evaluate`); ``sampled`` iterates minibatches sampled with
    ``sampler.eval_fanouts``. Either way, the memory estimate is checked against
    ``training.eval_memory_mb`` here, before anything is allocated for evaluation.
    """
    from ..loaders.neighbor import DistNeighborLoader
    from .evaluate import (
        check_budget,
        estimate_layerwise_bytes,
        estimate_sampled_bytes,
        evaluate_layerwise,
    )

    s, m, tr = cfg.sampler, cfg.model, cfg.training
    in_dim = int(part.x.shape[1]) if emb is None else emb.dim
    if tr.eval_mode == "layerwise":
        dims = [in_dim] + [m.hidden] * (m.layers - 1) + [num_classes]
        est = estimate_layerwise_bytes(part.num_local_nodes, part.num_local_edges, dims,
                                       s.eval_batch_size)
        check_budget(est, tr.eval_memory_mb, "layer-wise evaluation",
                     "raise training.eval_memory_mb, lower sampler.eval_batch_size or "
                     "model.hidden, or run more ranks (each holds a smaller part)")

        def run_layerwise(model, names):
            net = model.module if hasattr(model, "module") else model
            return evaluate_layerwise(net, part, {k: ids[k] for k in names}, device,
                                      s.eval_batch_size, x=None if emb is None else emb.weight)

        return run_layerwise
    deg = np.diff(np.asarray(part.indptr))
    maxdeg = torch.tensor([int(deg.max()) if deg.size else 0])
    dist.all_reduce(maxdeg, op=dist.ReduceOp.MAX)
    est = estimate_sampled_bytes(part.num_nodes, s.eval_fanouts, s.eval_batch_size, in_dim,
                                 int(maxdeg))
    check_budget(est, tr.eval_memory_mb,
                 f"sampled evaluation with fanouts {s.eval_fanouts} (batch {s.eval_batch_size})",
                 "give finite sampler.eval_fanouts, lower sampler.eval_batch_size, or use "
                 "training.eval_mode=layerwise (exact, memory O(part))")
    loaders = {k: DistNeighborLoader(service, ids[k], s.eval_fanouts, s.eval_batch_size,
                                     seed=s.seed + 1, prefetch=s.prefetch)
               for k in ("val", "test")}
    return lambda model, names: {k: evaluate(model, loaders[k], device, emb) for k in names}


def run_job(cfg: JobConfig, resume: bool = False, progress: bool = True) -> dict:
    """Run the configured job on this rank (inside torchrun); returns the final metrics
    (the ``final`` record of metrics.jsonl)."""
    from .typed_setup import check_homogeneous_job, dataset_is_typed

    if dataset_is_typed(cfg):  # the same files on every rank, so the same answer
        if cfg.task == "link":
            from .hetero_link import run_typed_link_job

            return run_typed_link_job(cfg, resume=resume, progress=progress)
        from .hetero import run_typed_job

        return run_typed_job(cfg, resume=resume, progress=progress)
    check_homogeneous_job(cfg)
    if cfg.task == "link":
        from .link import run_link_job

        return run_link_job(cfg, resume=resume, progress=progress)
    from ..distributed.service import SamplingService
    from ..graph.partition_io import load_partition
    from ..loaders.neighbor import DistNeighborLoader

    check_paths(cfg)
    rt = cfg.runtime
    env, device = start_rank(cfg)
    rank, world = env.rank, env.world_size
    t_start = time.perf_counter()
    pdir = ensure_partitions(cfg, rank, world)
    part = agree(lambda: load_partition(pdir, rank, world, verify=cfg.partition.verify))
    mode = cfg.training.mode
    if mode == "train" and (part.y is None or (part.x is None
                                                and cfg.model.embeddings == "none")):
        spec = parse_dataset_name(cfg.dataset.name)
        raise ConfigError("training.mode: train needs labels, and features or learned rows, "
                          f"but dataset {spec.name!r} has " + (
                              "no labels" if part.y is None else
                              "no features and model.embeddings is none"),
                          "GraphSAGE cannot be trained on it",
                          "use training.mode=sample for a sampling run, a labelled dataset, "
                          "or model.embeddings: featureless (a learned row per node)")
    if mode == "train" and cfg.model.embeddings == "all" and part.x is not None:
        raise ConfigError("model.embeddings: all on the node job of a homogeneous graph",
                          "it would be ignored: the homogeneous node job reads features only",
                          "use model.embeddings: featureless, task: link, or a typed graph")
    placement = feature_placement(cfg, device)
    s = cfg.sampler
    service = SamplingService(part, seed=s.seed, placement=placement, device=device,
                              features=mode == "train" or part.x is not None,
                              mode=None if rt.service_mode == "auto" else rt.service_mode,
                              timeout_s=rt.collective_timeout_s,
                              host_memory=host_memory_bytes(cfg), id_maps=s.id_maps,
                              feature_cache_plan=(s.fanouts, s.batch_size)
                              if isinstance(s.fanouts, list) else None)
    from ..graph.api import split_from_partitions

    # masks stored with the graph (file or dataset.*_mask) win over the random split
    # (a random split is a seed set over the graph's nodes 0..N-1, taken by the loaders as is,
    # renumbered or not; stored masks are the input's ids, translated by the loaders)
    ids = split_from_partitions(pdir) or split_ids(int(part.num_nodes), cfg.dataset.split,
                                                   cfg.dataset.split_seed)
    train_loader = DistNeighborLoader(service, ids["train"], s.fanouts, s.batch_size,
                                      shuffle=s.shuffle, drop_last=s.drop_last, seed=s.seed,
                                      prefetch=s.prefetch, replace=s.replace, split=s.split,
                                      edge_ids=s.edge_ids)
    tr = cfg.training
    steps = min(len(train_loader), tr.max_steps_per_epoch or len(train_loader))
    report = RunReport(rank, tr.epochs, steps, tr.log_every, progress,
                       Path(cfg.output.dir) / cfg.output.metrics_file)
    try:
        if mode == "sample":
            final, line = sample_epochs(cfg, train_loader, world, report, t_start)
        else:
            final, line = _train(cfg, service, train_loader, ids, part, device, rank, world,
                                 resume, report, t_start)
    finally:
        service.shutdown()
        report.close()
    report.service(service.stats())
    report.final(final, line)  # the last line on the console
    return final


def _train(cfg, service, train_loader, ids, part, device, rank, world, resume,
           report: RunReport, t_start) -> tuple[dict, str]:
    from torch.nn.parallel import DistributedDataParallel as DDP

    from .model import GraphSAGE

    s, m, o = cfg.sampler, cfg.model, cfg.optimizer
    ymax = torch.tensor([int(np.max(part.y)) if len(part.y) else 0])
    dist.all_reduce(ymax, op=dist.ReduceOp.MAX)
    emb = job_embedding(cfg, part, None, service) if part.x is None else None  # row per node
    evaluate_splits = make_evaluator(cfg, service, ids, part, device, int(ymax) + 1, emb)
    torch.manual_seed(s.seed)
    model = GraphSAGE(int(part.x.shape[1]) if emb is None else emb.dim, m.hidden,
                      int(ymax) + 1, m.layers, dropout=m.dropout, aggr=m.aggr,
                      use_pyg=m.use_pyg).to(device)
    model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = make_optimizer(model.parameters(), o)
    first_epoch = resume_point(cfg, resume, rank, world, device, model.module, opt,
                               train_loader, report, emb)
    report.start(mode="train", world_size=world, first_epoch=first_epoch,
                 config=config_to_dict(cfg))
    report.print(f"training on {world} rank(s): {report.steps} batches per epoch and rank; "
                 "epoch rates are totals over all ranks")
    report.open_bar(first_epoch)

    def forward(b) -> tuple[torch.Tensor, float, int]:
        out = model(_inputs(b, device, emb), b.edge_index.to(device))[: b.batch_size]
        y = b.y[: b.batch_size].to(device)
        correct = float((out.argmax(-1) == y).sum())
        return torch.nn.functional.cross_entropy(out, y), correct, b.batch_size

    def validate(rec: dict) -> None:
        val_acc, val_loss = evaluate_splits(model, ["val"])["val"]
        rec.update(val_acc=val_acc, val_loss=val_loss)

    run_epochs(cfg, model, opt, train_loader, rank, world, report, first_epoch, forward,
               validate, metrics=("val_acc", "val_loss"), embedding=emb)
    report.close()
    res = evaluate_splits(model, ["test", "val"])
    (test_acc, test_loss), (val_acc, _) = res["test"], res["val"]
    wall = time.perf_counter() - t_start
    final = {"event": "final", "test_acc": test_acc, "test_loss": test_loss, "val_acc": val_acc,
             "wall_s": wall, "world_size": world}
    return final, (f"val accuracy {val_acc:.4f}  test accuracy {test_acc:.4f}  "
                   f"({world} rank(s), {wall:.1f}s)")
