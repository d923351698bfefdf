"""The steps both jobs (node classification in :mod:`.job`, link prediction in :mod:`.link`)
take the same way: starting the rank, loading the dataset, the optimizer, resuming.

Kept apart so the two job modules import this one and never each other.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from ..config import JobConfig
from ..distributed.collective import agree
from ..errors import CheckpointError, PartitionError
from .checkpoint import agree_on_checkpoint, check_model_state, load_latest, load_rows
from .epochs import checkpoint_dir
from .report import RunReport

log = logging.getLogger(__name__)

__all__ = ["start_rank", "load_dataset", "job_edge_weights", "ensure_partitions",
           "feature_placement", "host_memory_bytes", "job_embedding", "make_optimizer",
           "resume_point"]


def start_rank(cfg: JobConfig):
    """Join the job (collective): allocator settings before CUDA starts, the process group,
    thread counts, then the job's memory estimates (:func:`.budget.check_job_memory`) checked on
    every rank, so a job that cannot fit fails on all of them before anything is allocated.
    Returns torchrun's :class:`~mnmg_sampler.system.runtime.DistEnv` and the device."""
    from ..system.runtime import init_distributed, resolve_backend, set_threads
    from .budget import check_job_memory

    rt = cfg.runtime
    _, want = resolve_backend(rt.backend, rt.device)
    if want.type == "cuda":  # before CUDA starts: allocator settings, one pool for all
        from ..system.memory import setup_memory_pool

        log.info("memory pool: %s", setup_memory_pool(rt.expandable_segments))
    env, device = init_distributed(rt.backend, rt.device, rt.collective_timeout_s)
    set_threads(rt.threads_per_rank)
    agree(lambda: check_job_memory(cfg, env.world_size, env.local_world_size),
          step="the job's memory estimate")
    return env, device


def load_dataset(cfg: JobConfig):
    """The job's graph, with synthetic features/labels for a graph without them when asked.

    Synthetic rows are pure functions of ``(dataset.seed, node id)``
    (:func:`mnmg_sampler.graph.permute.node_features` / ``node_labels``), so the distributed
    partitioner generates each rank's rows alone and writes the same files.
    """
    from ..graph.datasets import load_graph
    from ..graph.permute import node_features, node_labels

    d = cfg.dataset
    masks = {k: getattr(d, f"{k}_mask") for k in ("train", "val", "test")}
    g = load_graph(d.name, undirected=d.undirected, drop_self_loops=d.drop_self_loops,
                   drop_duplicates=d.drop_duplicates, seed=d.seed, x=d.features, y=d.labels,
                   masks={k: v for k, v in masks.items() if v is not None},
                   max_node_id=d.max_node_id, renumber=d.renumber)
    ids = np.arange(g.num_nodes, dtype=np.int64)
    if g.x is None and d.feature_dim > 0:
        g.x = node_features(ids, d.feature_dim, d.seed, d.num_classes)
    if g.y is None and d.num_classes > 0:
        g.y = node_labels(ids, d.num_classes, d.seed)
    return g


def job_edge_weights(cfg: JobConfig, graph) -> np.ndarray | None:
    """``sampler.weights`` resolved to one float per CSR entry of ``graph``, or ``None``."""
    if not cfg.sampler.weights:
        return None
    from ..graph.weights import resolve_edge_weights

    return resolve_edge_weights(cfg.sampler.weights, cfg.dataset.name, graph,
                                seed=cfg.dataset.seed)


def ensure_partitions(cfg: JobConfig, rank: int, world: int, typed: bool = False,
                      typed_graph=None, load: dict | None = None) -> Path:
    """Partition the dataset into ``world`` parts unless ``partition.dir`` already holds that
    partitioning (collective).

    The manifest records what it was made from (:func:`~..graph.partition_io.make_source`); a
    directory made from another dataset, other load options or other partitioning settings, or
    by an mnmg-sampler that recorded no source, is partitioned again. A non-empty directory that
    is not a partition directory is refused. ``random``, ``range`` and ``hash`` partition on every
    rank (:func:`mnmg_sampler.distributed.ingest.partition_distributed`: each rank reads 1/W of
    the input and writes its own part) unless the job names separate node-data files or edge
    weights; so does a ``typed`` graph saved as an OGB hetero directory or a ``.pt`` without
    time (:func:`~mnmg_sampler.distributed.ingest.partition_typed_distributed`); otherwise (for
    ``metis``, and for other ``typed`` graphs: :func:`~.typed_setup.load_typed_dataset`, typed
    parts) rank 0 partitions while the others wait. ``typed_graph`` (a callable, run on rank 0
    only when partitioning) replaces the dataset's typed graph, and ``load`` is recorded in the
    source beside the load options (a link job's training graph and its edge split).
    """
    from ..graph.partition import DISTRIBUTED_METHODS, partition
    from ..graph.partition_io import MANIFEST, make_source, read_manifest, source_differences

    out = Path(cfg.partition.dir)
    d, p = cfg.dataset, cfg.partition
    node_files = {k: getattr(d, k) for k in ("features", "labels", "train_mask", "val_mask",
                                             "test_mask")}
    want = make_source(d.name, method=p.method, seed=p.seed, parts=world,
                       undirected=d.undirected, drop_self_loops=d.drop_self_loops,
                       drop_duplicates=d.drop_duplicates, graph_seed=d.seed,
                       feature_dim=d.feature_dim, node_data=node_files, renumber=d.renumber)
    if cfg.sampler.weights:
        want["load"]["weights"] = cfg.sampler.weights
    if d.num_classes:
        want["load"]["num_classes"] = int(d.num_classes)
    want["load"].update(load or {})

    def needed() -> bool:
        if rank != 0:
            return False
        if not (out / MANIFEST).exists():
            return True
        try:
            stale = source_differences(read_manifest(out), want)
        except PartitionError as e:
            stale = [f"unreadable manifest ({e.what})"]
        if stale:
            log.warning("partition directory %s is stale (%s); partitioning again", out,
                        "; ".join(stale))
        return bool(stale)

    flag = torch.tensor([1 if agree(needed) else 0], dtype=torch.int64)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # rank 0 decides for every rank
    if not int(flag.item()):
        return out
    distributed = (p.method in DISTRIBUTED_METHODS and not cfg.sampler.weights
                   and all(v is None for v in node_files.values()))
    if distributed and typed:
        sliced = torch.tensor([int(typed_graph is None and agree(
            lambda: rank == 0 and _sliceable_untimed(d.name)))], dtype=torch.int64)
        dist.all_reduce(sliced, op=dist.ReduceOp.MAX)  # rank 0 decides for every rank
        if int(sliced.item()):  # a saved typed graph: every rank reads 1/W, as the CLI does
            from ..distributed.ingest import partition_typed_distributed

            if rank == 0:
                log.info("partitioning %s on %d ranks (%s) -> %s", d.name, world, p.method,
                         out)
            partition_typed_distributed(d.name, out, p.method, p.seed, overwrite=True,
                                        source=want)
            return out
    elif distributed:
        from ..distributed.ingest import partition_distributed

        if rank == 0:
            log.info("partitioning %s on %d ranks (%s) -> %s", d.name, world, p.method, out)
        partition_distributed(
            d.name, out, p.method, p.seed, undirected=d.undirected,
            drop_self_loops=d.drop_self_loops, drop_duplicates=d.drop_duplicates,
            feature_dim=d.feature_dim, num_classes=d.num_classes, data_seed=d.seed,
            graph_seed=d.seed, overwrite=True, source=want, renumber=d.renumber)
        return out

    def build() -> None:
        if rank != 0:
            return
        log.info("partitioning %s into %d parts (%s) -> %s", d.name, world, p.method, out)
        out.parent.mkdir(parents=True, exist_ok=True)
        if typed:
            from ..graph.partition import partition as partition_typed
            from .typed_setup import load_typed_dataset

            g = typed_graph() if typed_graph is not None else load_typed_dataset(cfg)
            partition_typed(g, world, p.method, out, seed=p.seed,
                            overwrite=True, source=want, metis_max_edges=p.metis_max_edges)
            return
        g = load_dataset(cfg)
        partition(g, world, p.method, out, seed=p.seed, overwrite=True, source=want,
                  weights=job_edge_weights(cfg, g), metis_max_edges=p.metis_max_edges)

    agree(build)  # every rank waits here, and raises if rank 0 failed
    return out


def _sliceable_untimed(name: str) -> bool:
    """True for a dataset file the typed every-rank readers take whole: an OGB hetero directory
    or a saved typed graph with no ``time`` (they read no time; rank 0 keeps it)."""
    from ..graph.names import parse_dataset_name
    from ..graph.temporal import saved_time
    from ..graph.typed_io import sliceable_typed_input

    spec = parse_dataset_name(name)
    return (spec.kind == "path" and sliceable_typed_input(spec.path)
            and not saved_time(spec.path))


def feature_placement(cfg: JobConfig, device: torch.device) -> str:
    """``features.placement`` with ``auto`` resolved: pinned host memory on CUDA, else host."""
    placement = cfg.features.placement
    if placement == "auto":
        placement = "pinned" if device.type == "cuda" else "host"
    return placement


def host_memory_bytes(cfg: JobConfig) -> int | None:
    """``features.host_memory_mb`` in bytes (``None``: the default share, see
    :mod:`~mnmg_sampler.distributed.fit`)."""
    mb = cfg.features.host_memory_mb
    return None if mb is None else int(mb * 2**20)


def make_optimizer(params, o) -> torch.optim.Optimizer:
    """The optimizer named by ``optimizer.*`` (``o``) over ``params``."""
    opt_cls = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}
    kw = {"momentum": o.momentum} if o.name == "sgd" else {}
    return opt_cls[o.name](params, lr=o.lr, weight_decay=o.weight_decay, **kw)


def job_embedding(cfg: JobConfig, part, types: list[str] | None, service):
    """Collective: the job's learned embedding rows
    (:class:`~mnmg_sampler.distributed.embeddings.DistEmbedding` of ``model.embedding_dim``,
    or ``model.hidden``; updated at ``optimizer.lr``; translating ids with the ``service``'s
    id maps) of ``types`` of a typed part, every node of a homogeneous one (``None``); ``None``
    when no type has rows."""
    if types is not None and not types:
        return None
    from ..distributed.embeddings import DistEmbedding

    m = cfg.model
    return DistEmbedding(part, types, int(m.embedding_dim or m.hidden), seed=cfg.sampler.seed,
                         lr=cfg.optimizer.lr, memory_mb=m.embedding_memory_mb,
                         maps=service.sampler.ids)


def resume_point(cfg: JobConfig, resume: bool, rank: int, world: int, device: torch.device,
                 net: torch.nn.Module, opt: torch.optim.Optimizer, loader,
                 report: RunReport, embedding=None) -> int:
    """Collective: the first epoch to run, after loading the newest checkpoint into ``net``,
    ``opt``, ``loader`` and ``embedding`` (its rows from every rank's file) on ``--resume`` or
    a torchrun restart (0 when there is none)."""
    restarted = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) > 0
    if not (resume or restarted):
        return 0
    found = agree(lambda: load_latest(checkpoint_dir(cfg), device))
    agree_on_checkpoint(found)
    if found is None:
        if resume and rank == 0:
            log.warning("--resume: no checkpoint under %s; starting from scratch",
                        checkpoint_dir(cfg))
        return 0
    ckpt, state = found
    agree(lambda: check_model_state(state["model"], net, ckpt))
    if state.get("world_size") != world:
        raise CheckpointError(f"checkpoint {ckpt} was written by {state.get('world_size')} "
                              f"ranks, this job has {world}",
                              "the loader order would differ", "resume with the same world "
                              "size, or start a fresh output.dir")
    net.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    loader.load_state_dict(state["loader"])
    if embedding is not None:
        agree(lambda: embedding.load_state_dicts(load_rows(checkpoint_dir(cfg), state["epoch"])))
    first_epoch = int(state["epoch"]) + 1
    report.print(f"resumed from {ckpt} (epoch {first_epoch})")
    return first_epoch
