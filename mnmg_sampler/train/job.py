"""The YAML-configured GraphSAGE job run by ``mnmg-sampler train`` under torchrun.

Order of events on every rank: load and check the config (a bad config fails every rank the same
way, before any collective), start the process group, partition the dataset if its partition
directory is missing (rank 0 writes atomically, the others wait), start the sampling service and
loaders, train with DDP, evaluate, checkpoint atomically, print test accuracy on rank 0.

Reproducibility: model init, dropout and sampling are seeded per (seed, epoch, rank), and
checkpoints are taken at epoch ends, so a run resumed from a checkpoint continues exactly as an
uninterrupted run would.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from ..config import JobConfig, check_paths, config_to_dict, parse_dataset_name
from ..distributed.collective import agree
from ..errors import ConfigError, PartitionError

log = logging.getLogger(__name__)
CKPT_PREFIX = "checkpoint-epoch"


def split_ids(num_nodes: int, fractions, seed: int) -> dict[str, np.ndarray]:
    """Random train/val/test split of node ids (original ids), the same on every rank."""
    perm = np.random.default_rng([seed, 0x5B117]).permutation(num_nodes)
    f = np.asarray(fractions, np.float64)
    f = f / f.sum() if f.sum() > 1 else f
    a, b = int(round(f[0] * num_nodes)), int(round((f[0] + f[1]) * num_nodes))
    c = int(round(min(1.0, f.sum()) * num_nodes))
    return {"train": np.sort(perm[:a]), "val": np.sort(perm[a:b]), "test": np.sort(perm[b:c])}


def load_dataset(cfg: JobConfig):
    """The job's graph, with synthetic features/labels for a graph without them when asked.

    Synthetic rows are pure functions of ``(dataset.seed, node id)``
    (:func:`mnmg_sampler.graph.permute.node_features` / ``node_labels``), so the distributed
    partitioner generates each rank's rows alone and writes the same files.
    """
    from ..graph.datasets import load_graph
    from ..graph.permute import node_features, node_labels

    d = cfg.dataset
    g = load_graph(d.name, undirected=d.undirected, drop_self_loops=d.drop_self_loops,
                   drop_duplicates=d.drop_duplicates, seed=d.seed)
    ids = np.arange(g.num_nodes, dtype=np.int64)
    if g.x is None and d.feature_dim > 0:
        g.x = node_features(ids, d.feature_dim, d.seed, d.num_classes)
    if g.y is None and d.num_classes > 0:
        g.y = node_labels(ids, d.num_classes, d.seed)
    return g


def ensure_partitions(cfg: JobConfig, rank: int, world: int) -> Path:
    """Partition the dataset into ``world`` parts unless a valid directory exists (collective).

    ``random``, ``range`` and ``hash`` partition on every rank
    (:func:`mnmg_sampler.distributed.ingest.partition_distributed`: each rank reads 1/W of the
    input and writes its own part); ``metis`` loads the graph on rank 0 while the others wait.
    """
    from ..graph.partition import DISTRIBUTED_METHODS, partition
    from ..graph.partition_io import MANIFEST

    out = Path(cfg.partition.dir)
    missing = torch.tensor([0 if (out / MANIFEST).exists() else 1], dtype=torch.int64)
    dist.all_reduce(missing, op=dist.ReduceOp.MAX)  # one decision for all ranks
    if not int(missing.item()):
        return out
    if cfg.partition.method in DISTRIBUTED_METHODS:
        from ..distributed.ingest import partition_distributed

        d = cfg.dataset
        if rank == 0:
            log.info("partitioning %s on %d ranks (%s) -> %s", d.name, world,
                     cfg.partition.method, out)
        partition_distributed(
            d.name, out, cfg.partition.method, cfg.partition.seed, undirected=d.undirected,
            drop_self_loops=d.drop_self_loops, drop_duplicates=d.drop_duplicates,
            feature_dim=d.feature_dim, num_classes=d.num_classes, data_seed=d.seed,
            graph_seed=d.seed)
        return out

    def build() -> None:
        if rank != 0 or (out / MANIFEST).exists():
            return
        log.info("partitioning %s into %d parts (%s) -> %s", cfg.dataset.name, world,
                 cfg.partition.method, out)
        out.parent.mkdir(parents=True, exist_ok=True)
        partition(load_dataset(cfg), world, cfg.partition.method, out, seed=cfg.partition.seed,
                  metis_max_edges=cfg.partition.metis_max_edges)

    agree(build)  # every rank waits here, and raises if rank 0 failed
    return out


def _ckpt_dir(cfg: JobConfig) -> Path:
    return Path(cfg.output.dir) / "checkpoints"


def latest_checkpoint(cfg: JobConfig) -> Path | None:
    d = _ckpt_dir(cfg)
    if not d.is_dir():
        return None
    found = sorted(d.glob(f"{CKPT_PREFIX}*.pt"))
    return found[-1] if found else None


def save_checkpoint(cfg: JobConfig, state: dict, epoch: int) -> Path:
    """Atomically write a checkpoint (tmp file + fsync + rename); prune old ones."""
    d = _ckpt_dir(cfg)
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{CKPT_PREFIX}{epoch:05d}.pt"
    tmp = d / f".{path.name}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    keep = cfg.output.keep_checkpoints
    if keep:
        for old in sorted(d.glob(f"{CKPT_PREFIX}*.pt"))[:-keep]:
            old.unlink(missing_ok=True)
    return path


class Metrics:
    """JSON-lines metrics written by rank 0 (appends across resumes)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, **rec) -> None:
        if self.path is not None:
            with open(self.path, "a") as f:
                f.write(json.dumps(rec, sort_keys=True) + "\n")


@torch.no_grad()
def evaluate(model, loader, device) -> tuple[float, float]:
    """(accuracy, mean loss) over every rank's batches of ``loader`` (collective)."""
    model.eval()
    acc = torch.zeros(3, dtype=torch.float64)
    for b in loader:
        out = model(b.x.to(device), b.edge_index.to(device))[: b.batch_size]
        y = b.y[: b.batch_size].to(device)
        acc[0] += float((out.argmax(-1) == y).sum())
        acc[1] += b.batch_size
        acc[2] += float(torch.nn.functional.cross_entropy(out, y, reduction="sum"))
    model.train()
    dist.all_reduce(acc)  # default group: the service thread owns its own group
    return float(acc[0] / max(acc[1], 1)), float(acc[2] / max(acc[1], 1))


def make_evaluator(cfg: JobConfig, service, ids: dict, part, device, num_classes: int):
    """``f(model, splits) -> {split: (accuracy, loss)}`` for ``training.eval_mode`` (collective).

    ``layerwise`` runs exact full-neighbor inference one layer at a time over this rank's nodes
    (:mod:`mnmg_sampler.train.evaluate`); ``sampled`` iterates minibatches sampled with
    ``sampler.eval_fanouts``. Either way, the memory estimate is checked against
    ``training.eval_memory_mb`` here, before anything is allocated for evaluation.
    """
    from ..loader import DistNeighborLoader
    from .evaluate import (
        check_budget,
        estimate_layerwise_bytes,
        estimate_sampled_bytes,
        evaluate_layerwise,
    )

    s, m, tr = cfg.sampler, cfg.model, cfg.training
    in_dim = int(part.x.shape[1])
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
                                      s.eval_batch_size)

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
    return lambda model, names: {k: evaluate(model, loaders[k], device) for k in names}


def run_job(cfg: JobConfig, resume: bool = False, progress: bool = True) -> dict:
    """Run the configured job on this rank (inside torchrun); returns the final metrics."""
    from ..distributed.service import SamplingService
    from ..graph.partition_io import load_partition
    from ..loader import DistNeighborLoader
    from ..runtime import init_distributed, resolve_backend, set_threads

    check_paths(cfg)
    rt = cfg.runtime
    _, want = resolve_backend(rt.backend, rt.device)
    if want.type == "cuda":  # before CUDA starts: allocator settings, one pool for all
        from ..memory import setup_memory_pool

        log.info("memory pool: %s", setup_memory_pool(rt.expandable_segments))
    env, device = init_distributed(rt.backend, rt.device, rt.collective_timeout_s)
    set_threads(rt.threads_per_rank)
    rank, world = env.rank, env.world_size
    t_start = time.perf_counter()
    pdir = ensure_partitions(cfg, rank, world)
    part = agree(lambda: load_partition(pdir, rank, world, verify=cfg.partition.verify))
    mode = cfg.training.mode
    if mode == "train" and (part.x is None or part.y is None):
        spec = parse_dataset_name(cfg.dataset.name)
        raise ConfigError("training.mode: train needs node features and labels, but "
                          f"dataset {spec.name!r} has " + ("no labels" if part.x is not None
                                                           else "no features"),
                          "GraphSAGE cannot be trained on it",
                          "use training.mode=sample for a sampling run, or a labelled dataset")
    placement = cfg.features.placement
    if placement == "auto":
        placement = "pinned" if device.type == "cuda" else "host"
    s = cfg.sampler
    service = SamplingService(part, seed=s.seed, placement=placement, device=device,
                              features=mode == "train" or part.x is not None,
                              mode=None if rt.service_mode == "auto" else rt.service_mode,
                              timeout_s=rt.collective_timeout_s)
    ids = split_ids(int(part.num_nodes), cfg.dataset.split, cfg.dataset.split_seed)
    train_loader = DistNeighborLoader(service, ids["train"], s.fanouts, s.batch_size,
                                      shuffle=s.shuffle, drop_last=s.drop_last, seed=s.seed,
                                      prefetch=s.prefetch, replace=s.replace)
    try:
        if mode == "sample":
            return _sample_only(cfg, train_loader, rank)
        return _train(cfg, service, train_loader, ids, part, device, rank, world, resume,
                      progress, t_start)
    finally:
        service.shutdown()
        if rank == 0:
            log.info("sampling service stats: %s", json.dumps(service.stats(), default=float))


def _sample_only(cfg: JobConfig, loader, rank: int) -> dict:
    t0 = time.perf_counter()
    edges = batches = 0
    for epoch in range(cfg.training.epochs):
        loader.set_epoch(epoch)
        for b in loader:
            edges += int(b.edge_index.shape[1])
            batches += 1
    dt = time.perf_counter() - t0
    res = {"batches": batches, "sampled_edges": edges, "seconds": dt,
           "edges_per_s": edges / dt if dt else 0.0}
    if rank == 0:
        print(f"sampled {batches} batches, {edges} edges on rank 0 in {dt:.2f}s "
              f"({res['edges_per_s']:.3g} edges/s)", flush=True)
    return res


def _train(cfg, service, train_loader, ids, part, device, rank, world, resume, progress,
           t_start) -> dict:
    from torch.nn.parallel import DistributedDataParallel as DDP

    from .model import GraphSAGE

    s, m, o, tr = cfg.sampler, cfg.model, cfg.optimizer, cfg.training
    ymax = torch.tensor([int(np.max(part.y)) if len(part.y) else 0])
    dist.all_reduce(ymax, op=dist.ReduceOp.MAX)
    evaluate_splits = make_evaluator(cfg, service, ids, part, device, int(ymax) + 1)
    torch.manual_seed(s.seed)
    model = GraphSAGE(int(part.x.shape[1]), m.hidden, int(ymax) + 1, m.layers,
                      dropout=m.dropout, aggr=m.aggr, use_pyg=m.use_pyg).to(device)
    model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    opt_cls = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}
    kw = {"momentum": o.momentum} if o.name == "sgd" else {}
    opt = opt_cls[o.name](model.parameters(), lr=o.lr, weight_decay=o.weight_decay, **kw)
    metrics = Metrics(Path(cfg.output.dir) / cfg.output.metrics_file if rank == 0 else None)
    first_epoch = 0
    restarted = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) > 0
    ckpt = latest_checkpoint(cfg) if (resume or restarted) else None
    if resume and ckpt is None and rank == 0:
        log.warning("--resume: no checkpoint under %s; starting from scratch", _ckpt_dir(cfg))
    if ckpt is not None:
        state = torch.load(ckpt, map_location=device, weights_only=False)
        if state.get("world_size") != world:
            raise PartitionError(f"checkpoint {ckpt} was written by {state.get('world_size')} "
                                 f"ranks, this job has {world}",
                                 "the loader order would differ", "resume with the same world "
                                 "size, or start a fresh output.dir")
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        train_loader.load_state_dict(state["loader"])
        first_epoch = int(state["epoch"]) + 1
        if rank == 0:
            print(f"resumed from {ckpt} (epoch {first_epoch})", flush=True)
    if rank == 0:
        metrics.write(event="start", world_size=world, first_epoch=first_epoch,
                      config=config_to_dict(cfg))
    bar = _bar(progress and rank == 0, tr.epochs - first_epoch, len(train_loader))
    val_acc = float("nan")
    for epoch in range(first_epoch, tr.epochs):
        model.train()
        torch.manual_seed(s.seed * 1_000_003 + epoch * 1009 + rank)  # dropout, per epoch/rank
        train_loader.set_epoch(epoch)
        tot = torch.zeros(3, dtype=torch.float64)
        t0 = time.perf_counter()
        for step, b in enumerate(train_loader):
            if tr.max_steps_per_epoch and step >= tr.max_steps_per_epoch:
                break
            out = model(b.x.to(device), b.edge_index.to(device))[: b.batch_size]
            y = b.y[: b.batch_size].to(device)
            loss = torch.nn.functional.cross_entropy(out, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            tot += torch.tensor([loss.item() * b.batch_size, b.batch_size,
                                 float((out.argmax(-1) == y).sum())], dtype=torch.float64)
            if bar is not None:
                bar.update(1)
        dist.all_reduce(tot)
        rec = {"event": "epoch", "epoch": epoch, "train_loss": float(tot[0] / max(tot[1], 1)),
               "train_acc": float(tot[2] / max(tot[1], 1)), "seconds": time.perf_counter() - t0}
        if tr.eval_every and ((epoch + 1) % tr.eval_every == 0 or epoch + 1 == tr.epochs):
            val_acc, val_loss = evaluate_splits(model, ["val"])["val"]
            rec.update(val_acc=val_acc, val_loss=val_loss)
        if rank == 0:
            metrics.write(**rec)
            if bar is not None:
                bar.set_postfix(loss=f"{rec['train_loss']:.3f}",
                                val_acc=f"{rec.get('val_acc', val_acc):.3f}")
        if cfg.output.checkpoint_every and (epoch + 1) % cfg.output.checkpoint_every == 0:
            if rank == 0:
                save_checkpoint(cfg, {"model": model.module.state_dict(),
                                      "optimizer": opt.state_dict(), "epoch": epoch,
                                      "loader": {**train_loader.state_dict(), "epoch": epoch + 1,
                                                 "next_batch": 0},
                                      "world_size": world, "config": config_to_dict(cfg)},
                                epoch)
            dist.barrier()
            _maybe_fault(epoch, rank)
        tv = tr.target_value
        if tv is not None and "val_acc" in rec and tr.target_metric == "val_acc" and \
                rec["val_acc"] >= tv:
            break
    if bar is not None:
        bar.close()
    res = evaluate_splits(model, ["test", "val"])
    (test_acc, test_loss), (val_acc, _) = res["test"], res["val"]
    wall = time.perf_counter() - t_start
    final = {"event": "final", "test_acc": test_acc, "test_loss": test_loss, "val_acc": val_acc,
             "wall_s": wall, "world_size": world}
    if rank == 0:
        metrics.write(**final)
        print(f"val accuracy {val_acc:.4f}  test accuracy {test_acc:.4f}  "
              f"({world} rank(s), {wall:.1f}s)", flush=True)
    return final


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


def _bar(enabled: bool, epochs: int, per_epoch: int):
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=max(0, epochs) * per_epoch, unit="batch", dynamic_ncols=True,
                mininterval=1.0)
