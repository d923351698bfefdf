"""The steps both jobs (node classification in :mod:`.job`, link prediction in :mod:`.link`)
take the same way: starting the rank, loading the dataset, the optimizer, resuming.

Kept apart so the two job modules import this one and never each other.
"""

from __future__ import annotations

import logging
import os

import numpy as np
import torch

from ..config import JobConfig
from ..distributed.collective import agree
from ..errors import CheckpointError
from .checkpoint import agree_on_checkpoint, check_model_state, load_latest
from .epochs import checkpoint_dir
from .report import RunReport

log = logging.getLogger(__name__)

__all__ = ["start_rank", "load_dataset", "job_edge_weights", "make_optimizer", "resume_point"]


def start_rank(cfg: JobConfig):
    """Join the job (collective): allocator settings before CUDA starts, the process group,
    thread counts, then the job's memory estimates (:func:`.budget.check_job_memory`) checked on
    every rank, so a job that cannot fit fails on all of them before anything is allocated.
    Returns torchrun's :class:`~mnmg_sampler.runtime.DistEnv` and the device."""
    from ..runtime import init_distributed, resolve_backend, set_threads
    from .budget import check_job_memory

    rt = cfg.runtime
    _, want = resolve_backend(rt.backend, rt.device)
    if want.type == "cuda":  # before CUDA starts: allocator settings, one pool for all
        from ..memory import setup_memory_pool

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


def make_optimizer(params, o) -> torch.optim.Optimizer:
    """The optimizer named by ``optimizer.*`` (``o``) over ``params``."""
    opt_cls = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}
    kw = {"momentum": o.momentum} if o.name == "sgd" else {}
    return opt_cls[o.name](params, lr=o.lr, weight_decay=o.weight_decay, **kw)


def resume_point(cfg: JobConfig, resume: bool, rank: int, world: int, device: torch.device,
                 net: torch.nn.Module, opt: torch.optim.Optimizer, loader,
                 report: RunReport) -> int:
    """Collective: the first epoch to run, after loading the newest checkpoint into ``net``,
    ``opt`` and ``loader`` on ``--resume`` or a torchrun restart (0 when there is none)."""
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
    first_epoch = int(state["epoch"]) + 1
    report.print(f"resumed from {ckpt} (epoch {first_epoch})")
    return first_epoch
