"""What a job needs before it trains, for every task and graph: dataset -> partitions -> service.

:func:`start_job` joins the job (:func:`start_rank`), partitions the dataset unless
``partition.dir`` holds it (:func:`ensure_partitions`), checks a typed job's config against the
graph's types and relations (from the manifest, on every rank), loads this rank's part and
starts the sampling service: a :class:`Job`. Whether the dataset is typed
(:func:`dataset_is_typed`: a generated typed graph, a saved ``HeteroData``, an OGB
heterogeneous directory, or a homogeneous file with a time the job samples or splits by) is
decided once, by the caller; a homogeneous graph is the one-type case.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from ..config import JobConfig, config_to_dict, parse_dataset_name
from ..distributed.collective import agree
from ..errors import CheckpointError, PartitionError
from .checkpoint import agree_on_checkpoint, check_model_state, load_latest, load_rows
from .checks import TypedMeta, check_job, meta_of_graph, meta_of_manifest
from .epochs import checkpoint_dir
from .report import RunReport

log = logging.getLogger(__name__)

__all__ = ["Job", "dataset_is_typed", "embed", "ensure_partitions", "job_edge_weights",
           "job_time_attr", "load_dataset", "load_typed_dataset", "make_model",
           "make_optimizer", "node_split", "num_neighbors", "split_ids", "start_job",
           "start_rank", "typed_meta", "typed_node_split"]


@dataclass
class Job:
    """One rank's started job: what every task shares."""

    cfg: JobConfig
    rank: int
    world: int
    device: torch.device
    pdir: Path
    part: object
    service: object
    t_start: float
    meta: TypedMeta | None = None
    """A typed graph's types and relations; ``None`` for a homogeneous graph."""
    input_type: str | None = None
    """A typed node job's seed type (a link job's: the relation's source type)."""

    def __enter__(self) -> Job:
        return self

    def __exit__(self, *exc) -> None:
        self.service.shutdown()

    def run(self, train_loader, progress: bool, train) -> dict:
        """``train(report)`` -> ``(final record, console line)`` with the run's
        :class:`RunReport` over ``train_loader``'s steps; then the service stopped and its
        counters and the final record reported. Returns the final record."""
        tr, out = self.cfg.training, self.cfg.output
        try:
            steps = min(len(train_loader), tr.max_steps_per_epoch or len(train_loader))
            report = RunReport(self.rank, tr.epochs, steps, tr.log_every, progress,
                               Path(out.dir) / out.metrics_file)
            try:
                final, line = train(report)
            finally:
                report.close()
        finally:
            self.service.shutdown()
        report.service(self.service.stats())
        report.final(final, line)
        return final

    def start_training(self, net: torch.nn.Module, emb, loader, resume: bool,
                       report: RunReport, line: str, **start):
        """``(DDP model, optimizer, first epoch)`` of ``net`` (and ``emb``), resumed from the
        newest checkpoint on ``--resume`` or a torchrun restart (collective); the run's
        ``start`` record and console ``line`` reported."""
        from torch.nn.parallel import DistributedDataParallel as DDP

        dev = self.device
        model = DDP(net, device_ids=[dev.index] if dev.type == "cuda" else None)
        opt = make_optimizer(model.parameters(), self.cfg.optimizer)
        first_epoch = _resume(self, resume, net, opt, loader, report, emb)
        report.start(mode="train", **start, world_size=self.world, first_epoch=first_epoch,
                     config=config_to_dict(self.cfg))
        report.print(line)
        report.open_bar(first_epoch)
        return model, opt, first_epoch

    def seeds(self, ids):
        """Seed ids as the loaders take them: ``(input_type, ids)`` on a typed graph."""
        return ids if self.meta is None else (self.input_type, ids)

    def node_split(self) -> dict:
        """Train/val/test seeds (:func:`node_split`)."""
        return node_split(self.pdir, self.input_type, self.cfg)


def start_job(cfg: JobConfig, typed: bool, graph=None, check=None) -> Job:
    """Join the job, partition if needed, check a typed job's config against the graph (every
    rank, from the manifest, before the service starts), load this rank's part and start the
    service; ``check(part)`` checks the part before and returns more of the service's arguments.

    ``graph``, a callable run on every rank once the job is joined, returns ``(build, load)``:
    the graph to partition instead of the dataset (``build()``, called on rank 0 when
    partitioning) and what its manifest source records besides the dataset (a link job's
    training graph and its edge split)."""
    from ..distributed.service import SamplingService
    from ..graph.partition_io import load_partition, read_manifest

    env, device = start_rank(cfg)
    rank, world = env.rank, env.world_size
    t_start = time.perf_counter()
    build, load = agree(graph) if graph is not None else (None, None)
    pdir = ensure_partitions(cfg, rank, world, typed=typed, graph=build, load=load)
    meta = input_type = None
    if typed:
        def check_typed() -> tuple[TypedMeta, str]:
            meta = meta_of_manifest(read_manifest(pdir))
            return meta, check_job(cfg, meta)

        meta, input_type = agree(check_typed)
    part = agree(lambda: load_partition(pdir, rank, world, verify=cfg.partition.verify))
    service_kw = check(part) if check is not None else {}
    s, rt, mb = cfg.sampler, cfg.runtime, cfg.features.host_memory_mb
    placement = cfg.features.placement  # auto: pinned host memory on CUDA, else host
    if placement == "auto":
        placement = "pinned" if device.type == "cuda" else "host"
    service = SamplingService(part, seed=s.seed, placement=placement, device=device,
                              mode=None if rt.service_mode == "auto" else rt.service_mode,
                              timeout_s=rt.collective_timeout_s, id_maps=s.id_maps,
                              host_memory=None if mb is None else int(mb * 2**20), **service_kw)
    return Job(cfg, rank, world, device, pdir, part, service, t_start, meta, input_type)


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


def job_time_attr(cfg: JobConfig) -> tuple[str, bool]:
    """``(name, timed_homogeneous)``: the node or edge attribute (table column) a job reads as
    time from its file, ``sampler.time_attr`` or else ``time`` (the static baseline of a split
    by time reads it too), and whether a homogeneous file with that time runs as the one-type
    typed graph: when the job samples in time or splits by time. A typed file's time is
    always kept."""
    needs = cfg.sampler.time_attr is not None or cfg.link.split_by == "time"
    return cfg.sampler.time_attr or "time", needs


def _file_graph(cfg: JobConfig, path: str):
    """The typed graph of the file at ``path`` with its time (:func:`job_time_attr`), or
    ``None`` for a homogeneous one. A timed table's sparse (hashed) ids are renumbered: a job
    shows no node id."""
    from ..graph.api import typed_graph_of, typed_source
    from ..graph.temporal import temporal_table_graph

    time_attr, needs = job_time_attr(cfg)
    kind, source, name = typed_source(path, time_attr, needs)  # a .pt is loaded once
    if kind == "timed" and isinstance(source, Path):  # a table: its ids never leave the job
        return temporal_table_graph(source, time_attr, renumber=True)
    if kind in ("typed", "timed"):
        return typed_graph_of(source, time_attr, needs, name=name)
    return None if kind is None else typed_graph_of(path, time_attr, needs)


def dataset_is_typed(cfg: JobConfig) -> bool:
    """True for the generated typed graph, an OGB hetero directory, a ``.pt`` holding a
    ``HeteroData`` (its ``to_dict()`` or the plain dict form; the file is read to tell), or a
    homogeneous file (``Data``, edge table) with a time when the job needs one
    (:func:`job_time_attr`)."""
    spec = parse_dataset_name(cfg.dataset.name)
    if spec.kind in ("typed-sbm", "typed-useritem"):
        return True
    if spec.kind != "path":
        return False
    from ..graph.api import typed_source

    return typed_source(spec.path, *job_time_attr(cfg))[0] is not None  # reads, builds nothing


def load_typed_dataset(cfg: JobConfig):
    """The job's :class:`~mnmg_sampler.graph.typed.TypedGraph` (generated with
    ``dataset.seed``, or read from the file with its time: :func:`job_time_attr`)."""
    spec = parse_dataset_name(cfg.dataset.name)
    if spec.kind == "typed-sbm":
        from ..graph.typed_generate import typed_sbm_graph

        return typed_sbm_graph(spec.papers, spec.classes, cfg.dataset.seed)
    if spec.kind == "typed-useritem":
        from ..graph.typed_generate import typed_useritem_graph

        return typed_useritem_graph(spec.users, spec.items, cfg.dataset.seed, spec.temporal)
    g = _file_graph(cfg, spec.path)
    if g is None:  # a homogeneous file: the typed reader says why it is not typed
        from ..graph.typed_io import load_typed_graph

        return load_typed_graph(spec.path)
    return g


def typed_meta(cfg: JobConfig) -> TypedMeta | None:
    """The dataset's :class:`TypedMeta`, or ``None`` for a homogeneous dataset. The generated
    graph's comes without building it; a file is read."""
    spec = parse_dataset_name(cfg.dataset.name)
    if spec.kind == "typed-sbm":
        from ..graph.typed_generate import FEATURE_DIM, typed_sbm_metadata

        counts, ets = typed_sbm_metadata(spec.papers, spec.classes)
        return TypedMeta(counts, ets, {"paper": FEATURE_DIM}, ["paper"])
    if spec.kind == "typed-useritem":
        from ..graph.typed_generate import FEATURE_DIM, typed_useritem_metadata

        counts, ets = typed_useritem_metadata(spec.users, spec.items)
        return TypedMeta(counts, ets, {"item": FEATURE_DIM}, [])
    if spec.kind != "path":
        return None
    g = _file_graph(cfg, spec.path)  # None: a homogeneous file
    return None if g is None else meta_of_graph(g)


def ensure_partitions(cfg: JobConfig, rank: int, world: int, typed: bool = False,
                      graph=None, load: dict | None = None) -> Path:
    """Partition the dataset into ``world`` parts unless ``partition.dir`` already holds that
    partitioning (collective): the manifest records its source
    (:func:`~..graph.partition_io.make_source`), and a directory of another source (or none) is
    partitioned again.

    ``random``, ``range`` and ``hash`` run on every rank, each reading 1/W of the input
    (:mod:`~mnmg_sampler.distributed.ingest`; a typed graph when saved as an OGB hetero
    directory or a ``.pt`` without time), unless the job names node-data files or edge weights;
    otherwise rank 0 partitions while the others wait. ``graph`` (a callable, run on rank 0
    only) replaces the dataset's graph, and ``load`` is recorded in the source (a link job's
    training graph and its edge split)."""
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

    if not _rank0_says(rank, needed):
        return out
    distributed = (graph is None and p.method in DISTRIBUTED_METHODS and not cfg.sampler.weights
                   and all(v is None for v in node_files.values()))
    if distributed and typed:  # a saved typed graph: every rank reads 1/W, as the CLI does
        distributed = _rank0_says(rank, lambda: _sliceable_untimed(d.name))
    if distributed:
        from ..distributed import ingest

        if rank == 0:
            log.info("partitioning %s on %d ranks (%s) -> %s", d.name, world, p.method, out)
        if typed:
            ingest.partition_typed_distributed(d.name, out, p.method, p.seed, overwrite=True,
                                               source=want)
        else:
            ingest.partition_distributed(
                d.name, out, p.method, p.seed, undirected=d.undirected,
                drop_self_loops=d.drop_self_loops, drop_duplicates=d.drop_duplicates,
                feature_dim=d.feature_dim, num_classes=d.num_classes, data_seed=d.seed,
                graph_seed=d.seed, overwrite=True, source=want, renumber=d.renumber)
        return out

    def build() -> None:
        if rank != 0:
            return
        log.info("partitioning %s%s into %d parts (%s) -> %s", "" if graph is None else
                 "the training graph of ", d.name, world, p.method, out)
        out.parent.mkdir(parents=True, exist_ok=True)
        g = graph() if graph is not None else load_typed_dataset(cfg) if typed else \
            load_dataset(cfg)
        partition(g, world, p.method, out, seed=p.seed, overwrite=True, source=want,
                  weights=job_edge_weights(cfg, g), metis_max_edges=p.metis_max_edges)

    agree(build)  # every rank waits here, and raises if rank 0 failed
    return out


def _rank0_says(rank: int, question) -> bool:
    """Collective: ``question()`` asked on rank 0 (its errors raised on every rank), the answer
    on every rank."""
    flag = torch.tensor([int(agree(lambda: rank == 0 and bool(question())))], dtype=torch.int64)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def _sliceable_untimed(name: str) -> bool:
    """True for a dataset file the typed every-rank readers take whole: an OGB hetero directory
    or a saved typed graph with no ``time`` (they read no time; rank 0 keeps it)."""
    from ..graph.names import parse_dataset_name
    from ..graph.temporal import saved_time
    from ..graph.typed_io import sliceable_typed_input

    spec = parse_dataset_name(name)
    return (spec.kind == "path" and sliceable_typed_input(spec.path)
            and not saved_time(spec.path))


def make_optimizer(params, o) -> torch.optim.Optimizer:
    """The optimizer named by ``optimizer.*`` (``o``) over ``params``."""
    opt_cls = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}
    kw = {"momentum": o.momentum} if o.name == "sgd" else {}
    return opt_cls[o.name](params, lr=o.lr, weight_decay=o.weight_decay, **kw)


def make_model(job: Job, out_dim: int, target=None):
    """``(model, embedding)``: the config's :class:`~.model.GraphSAGE` for ``job``'s graph on
    its device (seeded with ``sampler.seed``: the same initial weights on every rank), with
    outputs of ``target`` on a typed graph (default the input type); and the learned rows of
    the types it reads rows of (``None`` when none; collective): a
    :class:`~mnmg_sampler.distributed.embeddings.DistEmbedding` of ``model.embedding_dim``
    (null: ``model.hidden``) updated at ``optimizer.lr``, of every node of a homogeneous
    part."""
    from ..distributed.embeddings import DistEmbedding
    from .model import GraphSAGE

    cfg, part, meta = job.cfg, job.part, job.meta
    m = cfg.model
    torch.manual_seed(cfg.sampler.seed)
    in_dim = meta.x_dims if meta is not None else \
        None if part.x is None else int(part.x.shape[1])
    model = GraphSAGE(in_dim, m.hidden, out_dim, m.layers, m.dropout, m.aggr, m.use_pyg,
                      edge_types=None if meta is None else meta.edge_types,
                      target=target or job.input_type, embedding_dim=m.embedding_dim,
                      embeddings=m.embeddings)
    emb = None
    if model.embedded:
        emb = DistEmbedding(part, None if meta is None else model.embedded,
                            int(m.embedding_dim or m.hidden), seed=cfg.sampler.seed,
                            lr=cfg.optimizer.lr, memory_mb=m.embedding_memory_mb,
                            maps=job.service.sampler.ids)
    return model.to(job.device), emb


def embed(embedding, b, train: bool = True, uneven: bool = False):
    """Collective when ``embedding`` is set: the learned rows of a batch's ``n_id`` (of the
    embedded types of a typed batch: a dict), or ``None``
    (:meth:`~mnmg_sampler.distributed.embeddings.DistEmbedding.fetch`)."""
    if embedding is None:
        return None
    if not isinstance(b.n_id, dict):
        return embedding.fetch(b.n_id.numpy(), train=train, uneven=uneven)
    none = np.zeros(0, np.int64)
    return embedding.fetch({t: b.n_id[t].numpy() if t in b.n_id else none
                            for t in embedding.types}, train=train, uneven=uneven)


def _resume(job: Job, resume: bool, net: torch.nn.Module, opt: torch.optim.Optimizer, loader,
            report: RunReport, embedding=None) -> int:
    """Collective: the first epoch to run, after loading the newest checkpoint into ``net``,
    ``opt``, ``loader`` and ``embedding`` (its rows from every rank's file) on ``--resume`` or
    a torchrun restart (0 when there is none)."""
    cfg = job.cfg
    restarted = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) > 0
    if not (resume or restarted):
        return 0
    found = agree(lambda: load_latest(checkpoint_dir(cfg), job.device))
    agree_on_checkpoint(found)
    if found is None:
        if resume and job.rank == 0:
            log.warning("--resume: no checkpoint under %s; starting from scratch",
                        checkpoint_dir(cfg))
        return 0
    ckpt, state = found
    agree(lambda: check_model_state(state["model"], net, ckpt))
    if state.get("world_size") != job.world:
        raise CheckpointError(f"checkpoint {ckpt} was written by {state.get('world_size')} "
                              f"ranks, this job has {job.world}",
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


def num_neighbors(fanouts):
    """``sampler.fanouts`` as the loader takes it: a list, or ``{(src, rel, dst): list}``."""
    if isinstance(fanouts, dict):
        return {tuple(k.split("__")): list(v) for k, v in fanouts.items()}
    return list(fanouts)


def node_split(pdir: str | Path, input_type: str | None, cfg: JobConfig) -> dict:
    """Train/val/test seeds (of ``input_type`` on a typed graph, per-type ids; else the input's
    ids): the graph's own masks when it has a train mask (read from every part, small), else a
    random split of the (type's) nodes (``dataset.split``, ``dataset.split_seed``; seed sets
    over the nodes 0..N-1, taken by the loaders as is), the same on every rank without an
    exchange."""
    from ..graph.partition_io import load_partition, read_manifest
    from ..loaders.seeds import random_node_split

    manifest = read_manifest(pdir)
    typed = manifest.get("typed")
    names = (typed.get("masks", {}).get(input_type) if typed else manifest.get("masks")) or []
    if "train" not in names:
        n = meta_of_manifest(manifest).num_nodes[input_type] if typed else manifest["num_nodes"]
        return random_node_split(int(n), cfg.dataset.split, cfg.dataset.split_seed)
    ids: dict[str, list[np.ndarray]] = {k: [] for k in names}
    for r in range(int(manifest["num_parts"])):
        part = load_partition(pdir, r, verify=False)
        rows, masks = np.asarray(part.orig_ids), part.masks
        if typed:  # the input type's rows, as per-type ids
            tp = part.typed
            t = tp.node_types.index(input_type)
            rows = rows[tp.type_offset[t]:tp.type_offset[t + 1]] - tp.node_type_offset[t]
            masks = tp.masks[input_type]
        for k in names:
            got = rows[np.asarray(masks[k], bool)]
            ids[k].append(got if typed else part.input_ids(got))
    out = {k: np.sort(np.concatenate(v)).astype(np.int64) for k, v in ids.items()}
    for k in ("val", "test"):
        out.setdefault(k, np.zeros(0, np.int64))
    log.info("split%s from the graph's masks: %s", f" of {input_type}" if typed else "",
             ", ".join(f"{k} {v.size}" for k, v in out.items()))
    return out


typed_node_split = node_split


def split_ids(num_nodes: int, fractions, seed: int) -> dict:
    """Random train/val/test split of node ids (original ids), the same on every rank: ranges of
    a keyed permutation (:func:`~mnmg_sampler.loaders.seeds.random_node_split`, a
    :class:`~mnmg_sampler.loaders.seeds.NodeSplit` per name), no array of ``num_nodes`` on any
    rank."""
    from ..loaders.seeds import random_node_split

    return random_node_split(num_nodes, fractions, seed)
