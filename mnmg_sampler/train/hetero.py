"""The jobs of ``mnmg-sampler train`` on a typed (heterogeneous) graph: node classification of
``sampler.input_type`` with the built-in :class:`~.hetero_model.HeteroGraphSAGE` (link
prediction, ``task: link``, is :mod:`.hetero_link`).

The same steps, console lines, metrics, checkpoints and resume as the homogeneous job
(:mod:`.job`): the config is checked against the graph's types and relations on every rank
(:func:`~.typed_setup.check_typed_job`, from the partition manifest) before the service starts;
rank 0 writes typed parts when ``partition.dir`` does not hold this dataset's; loaders take
``input_nodes=(input_type, seeds)`` and fanouts per relation; evaluation iterates sampled
minibatches of the val/test seeds of the input type.

:func:`start_typed_job` (rank, partitions, part, service) and :func:`typed_model` are what a
task needs besides its own loaders and loss, so another task sits beside :func:`_train_node`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from ..config import JobConfig, config_to_dict, parse_dataset_name
from ..distributed.collective import agree
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
from .typed_setup import (
    TypedMeta,
    check_typed_job,
    meta_of_manifest,
    num_neighbors,
    typed_meta,
    typed_node_split,
)

__all__ = ["TypedJob", "embed", "evaluate_typed", "precheck_typed_job", "run_typed_job",
           "start_typed_job", "typed_model"]

log = logging.getLogger(__name__)


@dataclass
class TypedJob:
    """One rank's started typed job: what every task on a typed graph shares."""

    cfg: JobConfig
    rank: int
    world: int
    device: torch.device
    pdir: Path
    part: object
    meta: TypedMeta
    input_type: str
    service: object
    t_start: float


def start_typed_job(cfg: JobConfig, training_graph=None) -> TypedJob:
    """Join the job, partition if needed, check the config against the graph (every rank, from
    the manifest, before the service starts), load this rank's part and start the service.

    ``training_graph``, a callable run on every rank once the job is joined, returns
    ``(build, load)``: the graph to partition instead of the dataset (``build()``, called on
    rank 0 when partitioning) and what its manifest source records besides the dataset."""
    from ..distributed.service import SamplingService
    from ..graph.partition_io import load_partition, read_manifest

    env, device = start_rank(cfg)
    rank, world = env.rank, env.world_size
    t_start = time.perf_counter()
    build, load = agree(training_graph) if training_graph is not None else (None, None)
    pdir = ensure_partitions(cfg, rank, world, typed=True, typed_graph=build, load=load)

    def check() -> tuple[TypedMeta, str]:
        meta = meta_of_manifest(read_manifest(pdir))
        return meta, check_typed_job(cfg, meta)

    meta, input_type = agree(check)
    part = agree(lambda: load_partition(pdir, rank, world, verify=cfg.partition.verify))
    s, rt = cfg.sampler, cfg.runtime
    placement = feature_placement(cfg, device)
    service = SamplingService(part, seed=s.seed, placement=placement, device=device,
                              mode=None if rt.service_mode == "auto" else rt.service_mode,
                              timeout_s=rt.collective_timeout_s, id_maps=s.id_maps,
                              host_memory=host_memory_bytes(cfg))
    return TypedJob(cfg, rank, world, device, pdir, part, meta, input_type, service, t_start)


def typed_model(job: TypedJob, out_dim: int, target=None):
    """``(model, embedding)``: the :class:`~.hetero_model.HeteroGraphSAGE` of the config for
    ``job``'s graph, on its device (seeded with ``sampler.seed``: the same initial weights on
    every rank), with outputs of ``target`` (default the input type); and the
    :class:`~mnmg_sampler.distributed.embeddings.DistEmbedding` rows of the types it reads
    them for (``None`` when none; collective)."""
    from .hetero_model import HeteroGraphSAGE

    m = job.cfg.model
    torch.manual_seed(job.cfg.sampler.seed)
    model = HeteroGraphSAGE(job.meta.edge_types, job.meta.x_dims, m.hidden, out_dim, m.layers,
                            target or job.input_type, int(m.embedding_dim or m.hidden),
                            dropout=m.dropout, aggr=m.aggr, embeddings=m.embeddings)
    return model.to(job.device), job_embedding(job.cfg, job.part, model.embedded, job.service)


def embed(embedding, b, train: bool = True, uneven: bool = False) -> dict | None:
    """Collective when ``embedding`` is set: the rows of a typed batch's ``n_id`` of the
    embedded types (:meth:`~mnmg_sampler.distributed.embeddings.DistEmbedding.fetch`)."""
    if embedding is None:
        return None
    none = np.zeros(0, np.int64)
    return embedding.fetch({t: b.n_id[t].numpy() if t in b.n_id else none
                            for t in embedding.types}, train=train, uneven=uneven)


def _logits_and_labels(model, emb, b, target: str, device, train: bool = True
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    out = model(b.x, b.edge_index, embed(emb, b, train))[: b.batch_size]
    return out, b.y[target][: b.batch_size].to(device)


@torch.no_grad()
def evaluate_typed(model, emb, loader, target: str, device) -> tuple[float, float]:
    """(accuracy, mean loss) over every rank's batches of ``loader`` (collective); seeds with a
    negative label (unlabelled, as OGB's NaN) are not counted."""
    model.eval()
    acc = torch.zeros(3, dtype=torch.float64)
    for b in loader:
        out, y = _logits_and_labels(model, emb, b, target, device, train=False)
        keep = y >= 0
        acc[0] += float((out.argmax(-1)[keep] == y[keep]).sum())
        acc[1] += float(keep.sum())
        if bool(keep.any()):
            acc[2] += float(torch.nn.functional.cross_entropy(out[keep], y[keep],
                                                              reduction="sum"))
    model.train()
    dist.all_reduce(acc)
    return float(acc[0] / max(acc[1], 1)), float(acc[2] / max(acc[1], 1))


def precheck_typed_job(cfg: JobConfig) -> None:
    """A generated graph's job checked from its name alone: before any collective."""
    if parse_dataset_name(cfg.dataset.name).kind in ("typed-sbm", "typed-useritem"):
        check_typed_job(cfg, typed_meta(cfg))


def run_typed_job(cfg: JobConfig, resume: bool = False, progress: bool = True) -> dict:
    """The typed counterpart of :func:`.job.run_job` (inside torchrun); returns the final
    metrics."""
    from ..loaders.neighbor import DistNeighborLoader

    precheck_typed_job(cfg)
    job = start_typed_job(cfg)
    s, tr = cfg.sampler, cfg.training
    try:
        ids = typed_node_split(job.pdir, job.input_type, cfg)
        train_loader = DistNeighborLoader(job.service, (job.input_type, ids["train"]),
                                          num_neighbors(s.fanouts), s.batch_size,
                                          shuffle=s.shuffle, drop_last=s.drop_last, seed=s.seed,
                                          prefetch=s.prefetch, replace=s.replace,
                                          edge_ids=s.edge_ids)
        steps = min(len(train_loader), tr.max_steps_per_epoch or len(train_loader))
        report = RunReport(job.rank, tr.epochs, steps, tr.log_every, progress,
                           Path(cfg.output.dir) / cfg.output.metrics_file)
        try:
            if tr.mode == "sample":
                final, line = sample_epochs(cfg, train_loader, job.world, report, job.t_start)
            else:
                final, line = _train_node(job, train_loader, ids, resume, report)
        finally:
            report.close()
    finally:
        job.service.shutdown()
    report.service(job.service.stats())
    report.final(final, line)
    return final


def _train_node(job: TypedJob, train_loader, ids: dict, resume: bool,
                report: RunReport) -> tuple[dict, str]:
    """Node classification of ``job.input_type``: DDP over ranks, validation and the final
    test on sampled minibatches of the type's val/test seeds."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from ..loaders.neighbor import DistNeighborLoader

    cfg, device, target = job.cfg, job.device, job.input_type
    s, o = cfg.sampler, cfg.optimizer
    y = job.part.typed.y[target]
    ymax = torch.tensor([int(np.max(y)) if len(y) else 0])
    dist.all_reduce(ymax, op=dist.ReduceOp.MAX)
    num_classes = int(ymax) + 1
    net, emb = typed_model(job, num_classes)
    model = DDP(net, device_ids=[device.index] if device.type == "cuda" else None)
    opt = make_optimizer(model.parameters(), o)
    first_epoch = resume_point(cfg, resume, job.rank, job.world, device, model.module, opt,
                               train_loader, report, emb)
    evals = {k: DistNeighborLoader(job.service, (target, ids[k]), num_neighbors(s.eval_fanouts),
                                   s.eval_batch_size, seed=s.seed + 1, prefetch=s.prefetch)
             for k in ("val", "test")}
    report.start(mode="train", world_size=job.world, first_epoch=first_epoch,
                 config=config_to_dict(cfg))
    report.print(f"training on {job.world} rank(s): {report.steps} batches per epoch and rank "
                 f"({target} nodes of a typed graph); epoch rates are totals over all ranks")
    report.open_bar(first_epoch)

    def forward(b) -> tuple[torch.Tensor, float, int]:
        out, yb = _logits_and_labels(model, emb, b, target, device)
        keep = yb >= 0
        correct = float((out.argmax(-1)[keep] == yb[keep]).sum())
        loss = torch.nn.functional.cross_entropy(out, yb, ignore_index=-1)
        return loss, correct, int(keep.sum())

    def validate(rec: dict) -> None:
        rec["val_acc"], rec["val_loss"] = evaluate_typed(model, emb, evals["val"], target,
                                                         device)

    run_epochs(cfg, model, opt, train_loader, job.rank, job.world, report, first_epoch,
               forward, validate, metrics=("val_acc", "val_loss"), embedding=emb)
    report.close()
    test_acc, test_loss = evaluate_typed(model, emb, evals["test"], target, device)
    val_acc, _ = evaluate_typed(model, emb, evals["val"], target, device)
    wall = time.perf_counter() - job.t_start
    final = {"event": "final", "test_acc": test_acc, "test_loss": test_loss, "val_acc": val_acc,
             "wall_s": wall, "world_size": job.world, "input_type": target}
    return final, (f"val accuracy {val_acc:.4f}  test accuracy {test_acc:.4f}  "
                   f"({job.world} rank(s), {wall:.1f}s)")
