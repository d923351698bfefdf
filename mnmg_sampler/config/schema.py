"""The job schema: nested dataclasses whose fields carry a one-line doc and a range check.

Each field's ``metadata`` holds ``doc`` (shown in ``--help`` and docs/configuration.md),
``check`` (a predicate and its phrase for error messages) and ``path`` (expand ``~``/``$VARS``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

# --------------------------------------------------------------------------- field helpers


Check = tuple[Callable[[Any], bool], str]


def _opt(default: Any, doc: str, check: Check | tuple[Check, ...] | None = None,
         path: bool = False) -> Any:
    """A dataclass field with a one-line doc, optional range checks and a path flag.

    ``check`` is a (predicate, phrase) pair or a tuple of them, tried in order; the first that
    fails names what was expected (``a positive integer``, ``at most 1024``).
    """
    meta = {"doc": doc, "check": check, "path": path}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


def _section(cls: type) -> Any:
    """A section field; its doc is the section class's docstring."""
    return field(default_factory=cls, metadata={"doc": cls.__doc__})


#: Hard caps of values that size arrays, threads or timers: far above any real job, low enough
#: that no product of them overflows int64 or a timedelta (memory is checked separately).
INT32_MAX = 2**31 - 1
MAX_THREADS = 1024
MAX_WIDTH = 2**20
MAX_TIMEOUT_S = 30 * 24 * 3600.0

_POS_INT = (lambda v: v > 0, "a positive integer")
_NONNEG_INT = (lambda v: v >= 0, "an integer >= 0")
_SEED = (lambda v: 0 <= v < 2**63, "an integer in [0, 2**63)")
_POS_FLOAT = (lambda v: v > 0 and math.isfinite(v), "a positive number")
_NONNEG_FLOAT = (lambda v: v >= 0 and math.isfinite(v), "a number >= 0")
_UNIT_OPEN = (lambda v: 0 <= v < 1, "a number in [0, 1)")
_FANOUTS = (lambda v: len(v) > 0 and all(f >= -1 for f in v),
            "a non-empty list of integers >= 0 (0 = no neighbors at that hop) or -1 (all "
            "neighbors), e.g. [10, 10]")


def _at_most(hi: float, text: str) -> Check:
    """An upper bound; ``text`` spells it (``2**31 - 1``)."""
    return (lambda v: v <= hi, f"at most {text}")


_FANOUTS_MAX = (lambda v: all(f <= INT32_MAX for f in v), "fanouts of at most 2**31 - 1")
_BATCH = (_POS_INT, _at_most(INT32_MAX, "2**31 - 1"))
_WIDTH = (_POS_INT, _at_most(MAX_WIDTH, "2**20"))
_NONNEG_WIDTH = (_NONNEG_INT, _at_most(MAX_WIDTH, "2**20"))
_TIMEOUT = (_POS_FLOAT, _at_most(MAX_TIMEOUT_S, f"{MAX_TIMEOUT_S:.0f} seconds (30 days)"))
_SPLIT = (lambda v: len(v) == 3 and all(0 <= f <= 1 for f in v) and sum(v) <= 1 + 1e-9
          and v[0] > 0,
          "three fractions [train, val, test] in [0, 1] with train > 0 and sum <= 1")


# --------------------------------------------------------------------------- schema


@dataclass
class DatasetConfig:
    """Which graph to load and how to clean it."""

    name: str = _opt("cora", "Built-in name (`cora`), `rmat:SCALE[:EDGE_FACTOR]`, or the path of a "
                     "graph file, an OGB directory, or a directory or glob of edge shards "
                     "(formats: docs/formats.md).", path=True)
    seed: int = _opt(0, "Seed of generated graphs (rmat) and of random features.", _SEED)
    undirected: bool | None = _opt(
        None, "Add the reverse of every edge; null = dataset default (cora: true, files: false).")
    drop_self_loops: bool = _opt(False, "Remove edges from a node to itself.")
    drop_duplicates: bool = _opt(
        True, "Keep one copy of repeated edges (duplicates bias neighbor sampling).")
    feature_dim: int = _opt(
        0, "Width of random float32 features for a graph without features (R-MAT, edge lists); "
        "0 = none, at most 2**20. Ignored when the dataset has features.",
        _NONNEG_WIDTH)
    num_classes: int = _opt(
        0, "Synthetic labels in [0, num_classes) for a graph without labels, and class centres "
        "added to the random features so they can be learned; 0 = none, at most 2**20.",
        _NONNEG_WIDTH)
    split: list[float] = _opt(
        [0.6, 0.2, 0.2], "Train/val/test fractions of a random node split; not used when the "
        "graph has a train mask (the file's, dataset.train_mask, or a typed graph's of "
        "sampler.input_type): stored masks win.", _SPLIT)
    split_seed: int = _opt(0, "Seed of the random train/val/test split.", _SEED)
    features: str | None = _opt(
        None, "File of node features, one row per node (.npy, .npz, .pt, .csv); replaces those "
        "in the graph file.", path=True)
    labels: str | None = _opt(
        None, "File of node labels, one per node (.npy, .npz, .pt, .csv); replaces those in the "
        "graph file.", path=True)
    train_mask: str | None = _opt(
        None, "File of the train split: bool per node or node ids (.npy, .npz, .pt, .csv); "
        "with it, the split comes from the masks instead of dataset.split.", path=True)
    val_mask: str | None = _opt(None, "File of the validation split (as train_mask).", path=True)
    test_mask: str | None = _opt(None, "File of the test split (as train_mask).", path=True)
    max_node_id: int = _opt(
        2**40, "Largest node id accepted in an input file (the CSR needs 8 bytes per id up to "
        "the largest one).", (_POS_INT, _at_most(2**63 - 1, "2**63 - 1")))
    renumber: Literal[True, False, "auto"] = _opt(
        "auto", "Number the nodes 0..N-1 by ascending input id and keep the input's ids for n_id "
        "and seeds (hashed 64-bit ids); auto = when the largest id + 1 is above both 4 x the "
        "number of distinct ids and 2**20.")


@dataclass
class PartitionConfig:
    """How the graph is cut into one partition per rank."""

    dir: str | None = _opt(
        None, "Directory of the partitions; reused while the dataset and partition settings "
        "are unchanged, partitioned again when they change; null = <output.dir>/partitions.",
        path=True)
    method: Literal["random", "range", "hash", "metis"] = _opt(
        "random", "random (balanced), range (contiguous ids), hash (owner from a keyed hash of "
        "the id) or metis (fewest cut edges; needs pymetis; one process). random, range and "
        "hash run on every rank when the job partitions.")
    parts: int | None = _opt(
        None, "Number of partitions; null = world size. If set it must equal the world size "
        "(at most 65536).", (_POS_INT, _at_most(65536, "65536")))
    seed: int = _opt(0, "Seed of random partitioning.", _SEED)
    verify: Literal["auto", "full", "sampled", "off"] = _opt(
        "auto", "Checksum check of this rank's files at start-up: full (every byte), sampled "
        "(a few blocks per file), off (sizes, dtypes and shapes only); auto = full below 1 GiB "
        "per part, else sampled. A verified stamp skips the check on the next start.")
    metis_max_edges: int | None = _opt(
        None, "METIS (one process) refuses graphs with more edges; null = 2**30.", _POS_INT)


@dataclass
class SamplerConfig:
    """Neighbor sampling and minibatching (PyG NeighborLoader conventions)."""

    fanouts: list[int] | dict[str, list[int]] = _opt(
        [10, 10], "Neighbors per hop, hop 1 (nearest the seeds) first; -1 = all neighbors; "
        "at most 2**31 - 1. On a typed graph a list applies to every relation, or a mapping "
        "gives each relation its own list (keys src__rel__dst, every relation, equally many "
        "hops; override one with sampler.fanouts.src__rel__dst=5,3).", (_FANOUTS, _FANOUTS_MAX))
    batch_size: int = _opt(512, "Seed nodes per training minibatch on each rank.", _BATCH)
    eval_fanouts: list[int] | dict[str, list[int]] | None = _opt(
        None, "Neighbors per hop when evaluating (a list, or a mapping per relation as "
        "sampler.fanouts); null = all neighbors (-1 at every hop), exact and deterministic, "
        "except in a link job with disjoint trees (sampler.time_attr or sampler.disjoint), "
        "where null = sampler.fanouts: every endpoint and negative grows its own tree, and "
        "full trees are too large to evaluate.",
        (_FANOUTS, _FANOUTS_MAX))
    input_type: str | None = _opt(
        None, "Typed graphs: the node type whose nodes are classified (the seeds' type); "
        "null = the only node type with labels.")
    eval_batch_size: int | None = _opt(
        None, "Seed nodes per evaluation minibatch; null = sampler.batch_size.", _BATCH)
    replace: bool = _opt(False, "Sample neighbors with replacement.")
    prefetch: int = _opt(
        8, "Minibatches requested ahead of the training step, topped up in bursts of half of "
        "them (one sampling round each); 0 = synchronous.", _NONNEG_INT)
    seed: int = _opt(
        0, "RNG seed; the same seed gives bit-identical minibatches for any world size.",
        _SEED)
    shuffle: bool = _opt(True, "Reshuffle the training seeds every epoch.")
    drop_last: bool = _opt(False, "Drop the last incomplete training minibatch of each rank.")
    split: Literal["global", "owner"] = _opt(
        "global", "Training seeds of each rank: global = a share of one global order (the same "
        "batches for any world size); owner = the seeds its partition owns (hop 1 is local; "
        "batches depend on the partitioning). task link: global only.")
    id_maps: Literal["auto", "sharded", "replicated"] = _opt(
        "auto", "Original <-> new id maps: sharded = each rank holds 1/W of them and asks "
        "the others (no num_nodes-sized array; without features a loader's round does one more "
        "exchange); replicated = both maps on every rank (16 bytes per node), no lookups; "
        "auto = replicated for graphs of at most 2,097,152 nodes whose map files every rank "
        "can open, else sharded.")
    edge_ids: bool = _opt(False, "Fetch the edge id of every sampled edge (e_id); off = e_id "
                          "empty and no edge id crosses the wire.")
    weights: str | None = _opt(
        None, "Edge weights for weighted neighbor sampling: the name of an array of the "
        "dataset's .npz (one value per input edge) or a path to a .npy file of them; "
        "null = uniform. The CLI's partition and sample take the same as --weights.",
        path=True)
    time_attr: str | None = _opt(
        None, "Typed graphs with time: temporal sampling, PyG's time_attr (the graph's edge "
        "or node time, e.g. time); a link job's training and evaluation edges bound their "
        "subgraphs by their own time (docs/temporal.md). null = no temporal sampling.")
    temporal_strategy: Literal["uniform", "last"] = _opt(
        "uniform", "With sampler.time_attr: uniform = draw among the admissible neighbors, "
        "last = the most recent ones.")
    disjoint: bool = _opt(
        False, "Typed graphs: one subgraph per seed (PyG's disjoint); temporal sampling is "
        "always disjoint.")


@dataclass
class LinkConfig:
    """Link prediction (`task: link`): edge split, negatives, decoder and ranking metrics."""

    split: list[float] = _opt(
        [0.85, 0.05, 0.1], "Train/val/test fractions of a random split of the graph's edges "
        "(undirected graphs: of the node pairs); val/test edges leave the sampling graph.",
        _SPLIT)
    split_seed: int = _opt(0, "Seed of the random edge split.", _SEED)
    split_by: Literal["random", "time"] = _opt(
        "random", "Typed graphs: random = a random split of link.edge_type's edges; time = "
        "train on the earliest, validate on the next, test on the latest (the graph needs "
        "edge times), the sampling graph holding only edges before the validation start.")
    edge_type: list[str] | None = _opt(
        None, "Typed graphs: the relation to predict, [src, rel, dst]; its edges are split, and "
        "held-out ones leave it and its reverse (PyG's rev_ relation). null = the only "
        "relation of a graph with one (or with one and its reverse).",
        (lambda v: len(v) == 3, "a list of 3 names [src, rel, dst]"))
    neg_sampling: Literal["binary", "triplet"] = _opt(
        "binary", "Training negatives: binary (extra label-0 edges) or triplet (a negative "
        "destination beside each positive).")
    neg_amount: int = _opt(1, "Training negatives per positive edge (at most 2**20).", _WIDTH)
    reject_known: bool = _opt(
        True, "Redraw a negative that is an edge of the sampling graph (asked of its owner "
        "rank).")
    exclude_seed_edges: bool = _opt(
        True, "Remove the batch's positive edges (and reverses on undirected graphs) from its "
        "sampled subgraph, so the model cannot read the label from the input.")
    decoder: Literal["dot", "mlp"] = _opt(
        "dot", "Edge score from the two endpoint embeddings: dot product over sqrt(width) (logits "
        "of order one at any model.hidden), or an MLP of their "
        "elementwise product.")
    eval_negatives: int = _opt(
        50, "Negatives per positive edge when evaluating (AUC over all, MRR and Hits@K by "
        "ranking each positive among its own; at most 2**20).", _WIDTH)
    hits_k: int = _opt(10, "K of Hits@K (at most 2**20).", _WIDTH)


@dataclass
class FeaturesConfig:
    """Where node features live."""

    placement: Literal["auto", "host", "pinned", "device"] = _opt(
        "auto", "host memory, pinned host memory, or GPU memory; auto = pinned on CUDA, host on "
        "CPU.")
    host_memory_mb: float | None = _opt(
        None, "Memory in MB each host gives to other hosts' data: their topology first (every "
        "part's CSR mapped, so every hop is sampled on the host), then their feature rows, all "
        "of them mapped when they fit, else the rows whose cache saves most fetches in rounds "
        "of sampler.fanouts and sampler.batch_size, as many requests as a refill of "
        "sampler.prefetch (inclusion probability p, ranked by "
        "p (1 - p): a round reads the last round's rows again) copied into a cache shared by "
        "the host's ranks (typed graphs of several relations: by degree); what does not fit "
        "crosses hosts. 0 = nothing of other hosts; null = half of the memory the host can "
        "see at start. Results do not depend on it.", _NONNEG_FLOAT)


@dataclass
class ModelConfig:
    """The GraphSAGE model of `mnmg-sampler train`."""

    hidden: int = _opt(
        256, "Hidden channels of every GraphSAGE layer (at most 2**20; the parameters, their "
        "gradients and optimizer state are also checked against the memory at hand).", _WIDTH)
    layers: int | None = _opt(
        None, "Number of GraphSAGE layers; must equal len(sampler.fanouts); null = that.",
        _POS_INT)
    dropout: float = _opt(0.5, "Dropout probability after each hidden layer.", _UNIT_OPEN)
    aggr: Literal["mean", "max", "sum"] = _opt("mean", "Neighbor aggregation of SAGEConv.")
    use_pyg: bool = _opt(
        False, "Use PyG's SAGEConv (needs the pyg extra); false = the built-in layer (same "
        "math), so results do not depend on whether PyG is installed.")
    embeddings: Literal["featureless", "all", "none"] = _opt(
        "featureless", "Learned node embeddings (rows partitioned like feature rows, fetched "
        "per batch from their owners, updated by a sparse Adam at optimizer.lr): featureless = "
        "for node types without features (a featureless homogeneous graph: every node); all = "
        "also added to the features of the other types (lin(x) + emb(n_id)); none = no "
        "embeddings (a model that reads a featureless type is refused).")
    embedding_dim: int | None = _opt(
        None, "Width of the learned embeddings (model.embeddings); null = model.hidden; at "
        "most 2**20.", _WIDTH)
    embedding_memory_mb: float | None = _opt(
        None, "Budget in MB of the embedding rows a rank holds (its own nodes' rows, with "
        "Adam's two moments: 12 bytes per value); above it the job refuses to start "
        "(MemoryBudgetError); null = only the check against the memory at hand.", _POS_FLOAT)


@dataclass
class OptimizerConfig:
    """The optimizer of the model parameters."""

    name: Literal["adam", "adamw", "sgd"] = _opt("adam", "Optimizer.")
    lr: float = _opt(0.01, "Learning rate.", _POS_FLOAT)
    weight_decay: float = _opt(0.0, "L2 penalty (decoupled for adamw).", _NONNEG_FLOAT)
    momentum: float = _opt(0.9, "Momentum of sgd (ignored otherwise).", _UNIT_OPEN)


@dataclass
class TrainingConfig:
    """The training loop."""

    mode: Literal["train", "sample"] = _opt(
        "train", "train = GraphSAGE node classification; sample = iterate the loaders without "
        "a model (sampling benchmark).")
    epochs: int = _opt(10, "Passes over the training seeds (at most 2**31 - 1).", _BATCH)
    eval_every: int = _opt(
        1, "Evaluate on the validation split every N epochs; 0 = after the last epoch only.",
        _NONNEG_INT)
    target_metric: Literal["val_acc", "val_loss", "val_auc", "val_mrr"] | None = _opt(
        None, "Metric that selects the best epoch (reported with its test metrics); null = "
        "val_acc for task node, val_auc for task link.")
    target_value: float | None = _opt(
        None, "Stop early once target_metric reaches this value; null = run every epoch.")
    max_steps_per_epoch: int | None = _opt(
        None, "Cap on minibatches per epoch and rank (quick runs); null = no cap.", _POS_INT)
    log_every: int = _opt(
        10, "Log the training loss every N steps on rank 0; 0 = once per epoch.", _NONNEG_INT)
    eval_mode: Literal["layerwise", "sampled"] = _opt(
        "layerwise", "layerwise = exact full-neighbor inference one layer at a time over every "
        "node, in batches of sampler.eval_batch_size (memory O(part)); sampled = minibatches "
        "sampled with sampler.eval_fanouts.")
    eval_memory_mb: float | None = _opt(
        None, "Evaluation memory budget per rank in MB: an estimate above it raises "
        "MemoryBudgetError before allocating; null = no check. A typed link job with disjoint "
        "trees instead evaluates in chunks of whole trees sized to it (null = 256 MB).",
        _POS_FLOAT)


@dataclass
class RuntimeConfig:
    """Process group, device and threads of every rank."""

    backend: Literal["auto", "nccl", "gloo"] = _opt(
        "auto", "torch.distributed backend; auto = nccl with CUDA, else gloo.")
    device: Literal["auto", "cpu", "cuda"] = _opt(
        "auto", "Device of the model and minibatches; auto = cuda:LOCAL_RANK when available.")
    threads_per_rank: int | None = _opt(
        None, "CPU threads of each rank (torch, numba); null = the cores the rank may run on "
        "(its CPU affinity, e.g. taskset) / local ranks. At most "
        f"{MAX_THREADS} (a hard cap, whatever the machine; numba uses at most its "
        "NUMBA_NUM_THREADS).", (_POS_INT, _at_most(MAX_THREADS, str(MAX_THREADS))))
    collective_timeout_s: float = _opt(
        600.0, "Seconds before a stuck collective fails the job instead of hanging (at most "
        "30 days).", _TIMEOUT)
    expandable_segments: bool = _opt(
        True, "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True before CUDA starts "
        "(irregular minibatches fragment memory); ignored on CPU.")
    service_mode: Literal["auto", "thread", "inline"] = _opt(
        "auto", "Sampling service: thread = rounds on a service thread, overlapping training "
        "(default with gloo); inline = rounds only between training steps, in the training "
        "thread (default with nccl, the safe mode); auto = by backend.")


@dataclass
class OutputConfig:
    """Where results go."""

    dir: str | None = _opt(None, "Directory of checkpoints, metrics and logs; null = runs/<name>.",
                           path=True)
    checkpoint_every: int = _opt(1, "Save a checkpoint every N epochs; 0 = never.", _NONNEG_INT)
    keep_checkpoints: int = _opt(2, "Checkpoints kept, newest first; 0 = keep all.", _NONNEG_INT)
    metrics_file: str = _opt(
        "metrics.jsonl", "JSON-lines metrics, relative to output.dir unless absolute.", path=True)


@dataclass
class JobConfig:
    """One `mnmg-sampler` job."""

    name: str = _opt("job", "Job name, used in the default output.dir (runs/<name>).")
    task: Literal["node", "link"] = _opt(
        "node", "node = node classification; link = link prediction (section link).")
    dataset: DatasetConfig = _section(DatasetConfig)
    partition: PartitionConfig = _section(PartitionConfig)
    sampler: SamplerConfig = _section(SamplerConfig)
    link: LinkConfig = _section(LinkConfig)
    features: FeaturesConfig = _section(FeaturesConfig)
    model: ModelConfig = _section(ModelConfig)
    optimizer: OptimizerConfig = _section(OptimizerConfig)
    training: TrainingConfig = _section(TrainingConfig)
    runtime: RuntimeConfig = _section(RuntimeConfig)
    output: OutputConfig = _section(OutputConfig)


#: Keys earlier versions had: a config that still sets one gets a ConfigError saying it was
#: removed, why, and what to do (not "unknown key"); listed in docs/configuration.md.
REMOVED_KEYS = {
    "features.cache_rows": (
        "the row cache of other hosts' feature rows is sized by the host's memory budget, "
        "which also holds their topology (one placement: docs/multinode.md)",
        "delete the key; set features.host_memory_mb (null = half of the host's memory)"),
    "sampler.topology_cache": (
        "the per-rank cache of other ranks' adjacency rows sent fewer id bytes but made "
        "sampling slower (0.79x-0.93x the edges/s between hosts; docs/performance.md)",
        "delete the key: ranks on one host share every part's rows (the shared topology), "
        "other hosts' nodes go over the wire"),
    "sampler.shared_topology": (
        "ranks on one host always share its parts when they can (the wire path, forced with "
        "false, cost 1.7x the CPU per sampled edge and 9 collectives per round instead of 1; "
        "docs/performance.md)",
        "delete the key; to rehearse the cross-host path on one machine, give the ranks "
        "different MNMG_HOST_ID values (docs/multinode.md)"),
}

#: Cross-field rules checked by :func:`validate_config` (listed in docs/configuration.md).
CROSS_FIELD_RULES = (
    "`model.layers` must equal `len(sampler.fanouts)` (one GraphSAGE layer per hop).",
    "`sampler.eval_fanouts`, when set, has as many hops as `sampler.fanouts`.",
    "`runtime.backend: nccl` needs `runtime.device` `cuda` or `auto`.",
    "`features.placement` `pinned` or `device` needs `runtime.device` `cuda` or `auto`.",
    "`partition.parts`, when set, must equal the world size (`validate --world-size W`).",
    "`training.target_value` must lie in (0, 1] for `val_acc`, `val_auc`, `val_mrr` and be > 0 "
    "for `val_loss`.",
    "`training.target_metric` `val_auc` / `val_mrr` need `task: link`; `val_acc` needs `task: "
    "node`.",
    "`dataset.name` `rmat:SCALE[:EDGE_FACTOR]` needs 1 <= SCALE <= 40 and EDGE_FACTOR >= 1.",
    "`sampler.split: owner` needs `task: node`: the link loader splits seed edges in one global "
    "order only; `task: link` needs `training.mode: train`.",
    "`dataset.name` `typed-sbm:PAPERS[:CLASSES]` needs 2 <= CLASSES <= 64 and CLASSES <= PAPERS "
    "<= 2**24; `typed-useritem:USERS[:ITEMS]` (and `typed-useritem-t:`, with rating times) "
    "needs 2 <= USERS <= 2**24 and 8 <= ITEMS <= 2**24.",
    "`link.edge_type` is for typed graphs, where it names a relation of the graph; `task: link` "
    "on a typed graph needs no `sampler.input_type`.",
    "A mapping of `sampler.fanouts` / `sampler.eval_fanouts` gives every relation equally many "
    "hops; on a typed graph (checked by `validate` and at job start) it names every relation "
    "of the graph and no other, and `sampler.input_type` names a node type with labels.",
)
