"""The YAML-configured job run by ``mnmg-sampler train`` under torchrun: node classification
(``task: link`` is :mod:`.link`) on any graph.

On every rank: the config is checked (a bad config fails every rank alike, before any
collective), the job starts (:mod:`.setup`), then loaders, DDP training, evaluation and atomic
checkpoints (:func:`~.epochs.run_epochs`). Seeds with a negative label (unlabelled, as OGB's NaN)
are neither trained on nor counted. Model init, dropout and sampling are seeded per (seed, epoch,
rank) and checkpoints taken at epoch ends, so a resumed run continues as an uninterrupted one.
"""

from __future__ import annotations

import logging
import time

import numpy as np
import torch
import torch.distributed as dist

from ..config import JobConfig, check_paths, parse_dataset_name
from ..errors import ConfigError
from .epochs import run_epochs, sample_epochs
from .report import RunReport
from .setup import (
    Job,
    dataset_is_typed,
    embed,
    make_model,
    num_neighbors,
    start_job,
    typed_meta,
)

__all__ = ["evaluate", "make_evaluator", "run_job"]

log = logging.getLogger(__name__)


def _logits(model, emb, b, target: str | None, device, train: bool = True
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """The seeds' logits and labels (``target``: a typed batch's seed type)."""
    out = model(b.x, b.edge_index, embed(emb, b, train))[: b.batch_size]
    return out, (b.y if target is None else b.y[target])[: b.batch_size].to(device)


@torch.no_grad()
def evaluate(model, emb, loader, target: str | None, device) -> tuple[float, float]:
    """(accuracy, mean loss) over every rank's batches of ``loader`` (collective); seeds with a
    negative label are not counted."""
    model.eval()
    acc = torch.zeros(3, dtype=torch.float64)
    for b in loader:
        out, y = _logits(model, emb, b, target, device, train=False)
        keep = y >= 0
        acc[0] += float((out.argmax(-1)[keep] == y[keep]).sum())
        acc[1] += float(keep.sum())
        if bool(keep.any()):
            acc[2] += float(torch.nn.functional.cross_entropy(out[keep], y[keep],
                                                              reduction="sum"))
    model.train()
    dist.all_reduce(acc)  # default group: the service thread owns its own group
    return float(acc[0] / max(acc[1], 1)), float(acc[2] / max(acc[1], 1))


def make_evaluator(job: Job, ids: dict, num_classes: int, emb=None):
    """``f(model, splits) -> {split: (accuracy, loss)}`` for ``training.eval_mode`` (collective);
    ``emb``: the nodes' learned rows of a graph without features.

    ``layerwise`` (homogeneous graphs) runs exact full-neighbor inference one layer at a time
    (:mod:`mnmg_sampler.train.evaluate`); ``sampled`` iterates minibatches sampled with
    ``sampler.eval_fanouts``. Either way the memory estimate is checked against
    ``training.eval_memory_mb`` before anything is allocated.
    """
    from ..loaders.neighbor import DistNeighborLoader
    from .evaluate import (
        check_budget,
        estimate_layerwise_bytes,
        estimate_sampled_bytes,
        evaluate_layerwise,
    )

    s, m, tr, part = job.cfg.sampler, job.cfg.model, job.cfg.training, job.part
    in_dim = None if job.meta is not None else int(part.x.shape[1]) if emb is None else emb.dim
    if tr.eval_mode == "layerwise":  # a typed job is refused it (checks.check_typed_job)
        dims = [in_dim] + [m.hidden] * (m.layers - 1) + [num_classes]
        est = estimate_layerwise_bytes(part.num_local_nodes, part.num_local_edges, dims,
                                       s.eval_batch_size)
        check_budget(est, tr.eval_memory_mb, "layer-wise evaluation",
                     "raise training.eval_memory_mb, lower sampler.eval_batch_size or "
                     "model.hidden, or run more ranks (each holds a smaller part)")

        def run_layerwise(model, names):
            net = model.module if hasattr(model, "module") else model
            return evaluate_layerwise(net, part, {k: ids[k] for k in names}, job.device,
                                      s.eval_batch_size, x=None if emb is None else emb.weight)

        return run_layerwise
    if tr.eval_memory_mb is not None:  # homogeneous: a typed node job is refused the key
        deg = np.diff(np.asarray(part.indptr))
        maxdeg = torch.tensor([int(deg.max()) if deg.size else 0])
        dist.all_reduce(maxdeg, op=dist.ReduceOp.MAX)
        est = estimate_sampled_bytes(part.num_nodes, s.eval_fanouts, s.eval_batch_size, in_dim,
                                     int(maxdeg))
        check_budget(est, tr.eval_memory_mb, f"sampled evaluation with fanouts "
                     f"{s.eval_fanouts} (batch {s.eval_batch_size})",
                     "give finite sampler.eval_fanouts, lower sampler.eval_batch_size, or use "
                     "training.eval_mode=layerwise (exact, memory O(part))")
    loaders = {k: DistNeighborLoader(job.service, job.seeds(ids[k]),
                                     num_neighbors(s.eval_fanouts), s.eval_batch_size,
                                     seed=s.seed + 1, prefetch=s.prefetch)
               for k in ("val", "test")}
    return lambda model, names: {k: evaluate(model, emb, loaders[k], job.input_type,
                                             job.device) for k in names}


def _check_part(cfg: JobConfig, part) -> dict:
    """A homogeneous node job's part checked (labels, and features or learned rows, to train
    on); the service's arguments for it."""
    if cfg.training.mode == "train" and (part.y is None or (
            part.x is None and cfg.model.embeddings == "none")):
        spec = parse_dataset_name(cfg.dataset.name)
        raise ConfigError("training.mode: train needs labels, and features or learned rows, "
                          f"but dataset {spec.name!r} has " + (
                              "no labels" if part.y is None else
                              "no features and model.embeddings is none"),
                          "GraphSAGE cannot be trained on it",
                          "use training.mode=sample for a sampling run, a labelled dataset, "
                          "or model.embeddings: featureless (a learned row per node)")
    from ..loaders.epoch_cursor import refill

    s = cfg.sampler
    return {"features": cfg.training.mode == "train" or part.x is not None,
            "feature_cache_plan": (s.fanouts, s.batch_size, refill(s.prefetch))
            if isinstance(s.fanouts, list) else None}


def run_job(cfg: JobConfig, resume: bool = False, progress: bool = True) -> dict:
    """Run the configured job on this rank (inside torchrun); returns the final metrics
    (the ``final`` record of metrics.jsonl)."""
    from .checks import check_homogeneous_job, check_typed_job

    check_paths(cfg)
    typed = dataset_is_typed(cfg)  # the same files on every rank, so the same answer
    if not typed:
        check_homogeneous_job(cfg)
    elif parse_dataset_name(cfg.dataset.name).kind in ("typed-sbm", "typed-useritem"):
        check_typed_job(cfg, typed_meta(cfg))  # a generated graph: from its name alone
    if cfg.task == "link":
        from .link import run_link_job

        return run_link_job(cfg, typed, resume=resume, progress=progress)
    from ..loaders.neighbor import DistNeighborLoader

    s, tr = cfg.sampler, cfg.training
    job = start_job(cfg, typed, check=None if typed else lambda part: _check_part(cfg, part))
    with job:
        ids = job.node_split()
        train_loader = DistNeighborLoader(job.service, job.seeds(ids["train"]),
                                          num_neighbors(s.fanouts), s.batch_size,
                                          shuffle=s.shuffle, drop_last=s.drop_last, seed=s.seed,
                                          prefetch=s.prefetch, replace=s.replace, split=s.split,
                                          edge_ids=s.edge_ids)

        def train(report: RunReport) -> tuple[dict, str]:
            if tr.mode == "sample":
                return sample_epochs(cfg, train_loader, job.world, report, job.t_start)
            return _train(job, train_loader, ids, resume, report)

        return job.run(train_loader, progress, train)


def _train(job: Job, train_loader, ids: dict, resume: bool,
           report: RunReport) -> tuple[dict, str]:
    """Node classification: DDP over ranks, validation and the final test (``evaluate``)."""
    cfg, device, target = job.cfg, job.device, job.input_type
    y = job.part.y if target is None else job.part.typed.y[target]
    ymax = torch.tensor([int(np.max(y)) if len(y) else 0])
    dist.all_reduce(ymax, op=dist.ReduceOp.MAX)
    num_classes = int(ymax) + 1
    net, emb = make_model(job, num_classes)
    evaluate_splits = make_evaluator(job, ids, num_classes, emb)
    model, opt, first_epoch = job.start_training(
        net, emb, train_loader, resume, report, f"training on {job.world} rank(s): "
        f"{report.steps} batches per epoch and rank"
        + ("" if target is None else f" ({target} nodes of a typed graph)")
        + "; epoch rates are totals over all ranks")

    def forward(b) -> tuple[torch.Tensor, float, int]:
        out, yb = _logits(model, emb, b, target, device)
        keep = yb >= 0
        correct = float((out.argmax(-1)[keep] == yb[keep]).sum())
        loss = torch.nn.functional.cross_entropy(out, yb, ignore_index=-1)
        return loss, correct, int(keep.sum())

    def validate(rec: dict) -> None:
        rec["val_acc"], rec["val_loss"] = evaluate_splits(model, ["val"])["val"]

    run_epochs(cfg, model, opt, train_loader, job.rank, job.world, report, first_epoch,
               forward, validate, metrics=("val_acc", "val_loss"), embedding=emb)
    report.close()
    res = evaluate_splits(model, ["test", "val"])
    (test_acc, test_loss), (val_acc, _) = res["test"], res["val"]
    wall = time.perf_counter() - job.t_start
    final = {"event": "final", "test_acc": test_acc, "test_loss": test_loss, "val_acc": val_acc,
             "wall_s": wall, "world_size": job.world,
             **({} if target is None else {"input_type": target})}
    return final, (f"val accuracy {val_acc:.4f}  test accuracy {test_acc:.4f}  "
                   f"({job.world} rank(s), {wall:.1f}s)")
