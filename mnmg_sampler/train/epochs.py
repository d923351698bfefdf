"""The training epoch loop the node and link jobs share; they pass in a batch's loss and what
validation measures.

Per epoch: a dropout seed per epoch and rank, at most ``training.max_steps_per_epoch`` steps,
totals reduced over ranks into one :func:`~.report.epoch_record`, validation every
``training.eval_every`` epochs, a checkpoint every ``output.checkpoint_every`` (embedding rows
first), the early stop at ``training.target_value``. Learned embedding rows get their sparse
update after each dense step; the record has their rows per rank and bytes per step.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
import torch.distributed as dist

from ..config import JobConfig, config_to_dict
from ..distributed.collective import all_gather_1d
from .checkpoint import save_checkpoint, save_rows
from .report import RunReport, epoch_record

__all__ = ["batch_edges", "checkpoint_dir", "embedding_record", "run_epochs", "sample_epochs"]

log = logging.getLogger(__name__)


def checkpoint_dir(cfg: JobConfig) -> Path:
    """Where a job writes and finds its checkpoints."""
    return Path(cfg.output.dir) / "checkpoints"


def batch_edges(b) -> int:
    """Sampled edges of a minibatch: its ``edge_index`` columns, summed over the relations of a
    typed one."""
    ei = b.edge_index
    if isinstance(ei, dict):
        return sum(int(v.shape[1]) for v in ei.values())
    return int(ei.shape[1])


def run_epochs(cfg: JobConfig, model: torch.nn.parallel.DistributedDataParallel,
               opt: torch.optim.Optimizer, loader, rank: int, world: int, report: RunReport,
               first_epoch: int, forward: Callable[[object], tuple[torch.Tensor, float, int]],
               validate: Callable[[dict], str | None], metrics: Sequence[str],
               embedding=None) -> None:
    """Train epochs ``first_epoch .. training.epochs - 1`` (or until the target is reached).

    ``forward(batch)`` gives ``(loss, correct, n)``: the loss to step on, and how many of its
    ``n`` predictions are right. ``validate(record)`` adds the validation metrics to the epoch
    record when validation is due and returns a line to print after it (or ``None``).
    ``metrics`` are the ``training.target_metric`` values the early stop honours.
    ``embedding``: the job's embedding rows (stepped with DDP's mean: ``1 / world``), or None.
    """
    s, tr = cfg.sampler, cfg.training
    for epoch in range(first_epoch, tr.epochs):
        model.train()
        torch.manual_seed(s.seed * 1_000_003 + epoch * 1009 + rank)  # dropout, per epoch/rank
        loader.set_epoch(epoch)
        tot = torch.zeros(6, dtype=torch.float64)  # loss*n, n, correct, batches, edges, CPU s
        report.epoch_start()
        sent0 = embedding.traffic()["embedding_bytes_sent"] if embedding is not None else 0
        t0, c0 = time.perf_counter(), time.process_time()
        for step, b in enumerate(loader):
            if tr.max_steps_per_epoch and step >= tr.max_steps_per_epoch:
                break
            loss, correct, n = forward(b)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if embedding is not None:
                embedding.step(1.0 / world)
            batch_loss = loss.item()
            tot += torch.tensor([batch_loss * n, n, correct, 1.0, float(batch_edges(b)), 0.0],
                                dtype=torch.float64)
            report.step(epoch, step + 1, batch_loss, correct, n)
        tot[5] = time.process_time() - c0  # this process's CPU (trainer and service threads)
        dist.all_reduce(tot)
        rec = epoch_record(epoch, time.perf_counter() - t0, float(tot[3]), float(tot[4]),
                           cpu_s=float(tot[5]), train_loss=float(tot[0] / max(tot[1], 1)),
                           train_acc=float(tot[2] / max(tot[1], 1)))
        if embedding is not None:
            rec.update(embedding_record(embedding, sent0, float(tot[3]) / world))
        line = None
        if tr.eval_every and ((epoch + 1) % tr.eval_every == 0 or epoch + 1 == tr.epochs):
            line = validate(rec)
        report.epoch(rec)
        if line is not None:
            report.print(line)
        if cfg.output.checkpoint_every and (epoch + 1) % cfg.output.checkpoint_every == 0:
            if embedding is not None:  # the rows first: a checkpoint's rows always exist
                save_rows(checkpoint_dir(cfg), epoch, rank, world, embedding.state_dict())
                dist.barrier()
            if rank == 0:
                save_checkpoint(checkpoint_dir(cfg), {
                    "model": model.module.state_dict(), "optimizer": opt.state_dict(),
                    "epoch": epoch, "loader": {**loader.state_dict(), "epoch": epoch + 1,
                                               "next_batch": 0},
                    "world_size": world, "config": config_to_dict(cfg)},
                    epoch, keep=cfg.output.keep_checkpoints)
            dist.barrier()
            _maybe_fault(epoch, rank)
        tv, tm = tr.target_value, tr.target_metric
        if tv is not None and tm in metrics and tm in rec and \
                (rec[tm] <= tv if tm == "val_loss" else rec[tm] >= tv):
            break


def embedding_record(embedding, sent0: int, steps: float) -> dict:
    """Collective: the embedding part of an epoch record (module docstring)."""
    t = embedding.traffic()
    every = all_gather_1d(torch.tensor([t["embedding_rows_local"],
                                        t["embedding_bytes_sent"] - sent0], dtype=torch.float64))
    return {"embedding_rows_local": [int(v[0]) for v in every],
            "embedding_rows_total": t["embedding_rows_total"],
            "embedding_bytes_per_step": float(sum(v[1] for v in every)) / max(steps, 1.0)}


def sample_epochs(cfg: JobConfig, loader, world: int, report: RunReport,
                 t_start: float) -> tuple[dict, str]:
    """training.mode=sample: iterate the train loader without a model; same console/metrics."""
    tr = cfg.training
    report.start(mode="sample", world_size=world, first_epoch=0, config=config_to_dict(cfg))
    report.print(f"sampling on {world} rank(s): {report.steps} batches per epoch and rank; "
                 "epoch rates are totals over all ranks")
    report.open_bar()
    total = torch.zeros(2, dtype=torch.float64)
    t0 = time.perf_counter()
    for epoch in range(tr.epochs):
        loader.set_epoch(epoch)
        report.epoch_start()
        cnt = torch.zeros(2, dtype=torch.float64)  # batches, sampled edges
        te = time.perf_counter()
        for step, b in enumerate(loader):
            if tr.max_steps_per_epoch and step >= tr.max_steps_per_epoch:
                break
            cnt += torch.tensor([1.0, float(batch_edges(b))], dtype=torch.float64)
            report.step(epoch, step + 1)
        dist.all_reduce(cnt)
        total += cnt
        report.epoch(epoch_record(epoch, time.perf_counter() - te, float(cnt[0]), float(cnt[1])))
    dt = time.perf_counter() - t0
    batches, edges = int(total[0]), int(total[1])
    res = {"event": "final", "mode": "sample", "batches": batches, "sampled_edges": edges,
           "seconds": dt, "batches_per_s": batches / max(dt, 1e-9),
           "edges_per_s": edges / max(dt, 1e-9), "world_size": world,
           "wall_s": time.perf_counter() - t_start}
    return res, (f"sampled {batches:,} batches, {edges:,} edges on {world} rank(s) in {dt:.1f}s "
                 f"({res['batches_per_s']:.1f} batches/s, {res['edges_per_s']:,.0f} edges/s)")


def _maybe_fault(epoch: int, rank: int) -> None:
    """Fault injection for the resume tests: ``MNMG_FAULT_AFTER_EPOCH=E`` SIGKILLs rank 0 right
    after the checkpoint of epoch ``E`` (only in a first attempt, not after a torchrun restart)."""
    at = os.environ.get("MNMG_FAULT_AFTER_EPOCH")
    if at is None or rank != 0 or int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) > 0:
        return
    if int(at) == epoch:
        import signal

        log.warning("MNMG_FAULT_AFTER_EPOCH=%s: killing rank 0 now", at)
        os.kill(os.getpid(), signal.SIGKILL)
