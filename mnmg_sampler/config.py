"""The YAML job schema: nested dataclasses, dotted overrides, validation with dotted keys.

A job is ``defaults < YAML file < command-line overrides`` (``sampler.batch_size=512``), checked
before any rank starts so a typo fails in one second instead of after the rendezvous::

    cfg = load_config("configs/quickstart.yaml", ["sampler.fanouts=15,10", "training.epochs=5"])
    cfg.sampler.batch_size, cfg.runtime.backend

Every field carries a one-line doc (``metadata["doc"]``); :func:`iter_fields` exposes them to
``--help`` and to the generated ``docs/configuration.md``. Every problem raises
:class:`~mnmg_sampler.errors.ConfigError` whose message starts with the dotted key (or the file
path), e.g. ``sampler.batch_size: expected a positive integer, got -3``. Unknown keys are
rejected with a "did you mean" hint, because a silently ignored typo is the worst config bug.

Relative paths in a config are relative to the working directory (run jobs from the repository
root); ``~`` and ``$VARS`` in path fields are expanded.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
import types
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .errors import ConfigError

__all__ = [
    "BUILTIN_DATASETS",
    "add_config_arguments",
    "apply_overrides",
    "CROSS_FIELD_RULES",
    "DatasetConfig",
    "DatasetSpec",
    "FeaturesConfig",
    "FieldInfo",
    "JobConfig",
    "ModelConfig",
    "OptimizerConfig",
    "OutputConfig",
    "PartitionConfig",
    "RuntimeConfig",
    "SamplerConfig",
    "TrainingConfig",
    "check_paths",
    "config_from_dict",
    "config_to_dict",
    "config_to_yaml",
    "fields_epilog",
    "format_value",
    "iter_fields",
    "load_config",
    "parse_dataset_name",
    "section_docs",
    "validate_config",
]

BUILTIN_DATASETS = ("cora",)
_RMAT = re.compile(r"^rmat:(?P<scale>[^:]*)(?::(?P<ef>[^:]*))?$")


# --------------------------------------------------------------------------- field helpers


def _opt(default: Any, doc: str, check: tuple[Callable[[Any], bool], str] | None = None,
         path: bool = False) -> Any:
    """A dataclass field with a one-line doc, an optional range check and a path flag."""
    meta = {"doc": doc, "check": check, "path": path}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


def _section(cls: type, doc: str) -> Any:
    return field(default_factory=cls, metadata={"doc": doc})


_POS_INT = (lambda v: v > 0, "a positive integer")
_NONNEG_INT = (lambda v: v >= 0, "an integer >= 0")
_SEED = (lambda v: 0 <= v < 2**63, "an integer in [0, 2**63)")
_POS_FLOAT = (lambda v: v > 0 and math.isfinite(v), "a positive number")
_NONNEG_FLOAT = (lambda v: v >= 0 and math.isfinite(v), "a number >= 0")
_UNIT_OPEN = (lambda v: 0 <= v < 1, "a number in [0, 1)")
_FANOUTS = (lambda v: len(v) > 0 and all(f > 0 or f == -1 for f in v),
            "a non-empty list of positive integers or -1 (all neighbors), e.g. [10, 10]")
_SPLIT = (lambda v: len(v) == 3 and all(0 <= f <= 1 for f in v) and sum(v) <= 1 + 1e-9
          and v[0] > 0,
          "three fractions [train, val, test] in [0, 1] with train > 0 and sum <= 1")


# --------------------------------------------------------------------------- schema


@dataclass
class DatasetConfig:
    """Which graph to load and how to clean it."""

    name: str = _opt("cora", "Built-in name (`cora`), `rmat:SCALE[:EDGE_FACTOR]`, or path to an "
                     ".npz file or an edge list (.txt, .tsv, .edges, optionally .gz).", path=True)
    seed: int = _opt(0, "Seed of generated graphs (rmat) and of random features.", _NONNEG_INT)
    undirected: bool | None = _opt(
        None, "Add the reverse of every edge; null = dataset default (cora: true, files: false).")
    drop_self_loops: bool = _opt(False, "Remove edges from a node to itself.")
    drop_duplicates: bool = _opt(
        True, "Keep one copy of repeated edges (duplicates bias neighbor sampling).")
    feature_dim: int = _opt(
        0, "Width of random float32 features for a graph without features (R-MAT, edge lists); "
        "0 = none. Ignored when the dataset has features.", _NONNEG_INT)
    split: list[float] = _opt(
        [0.6, 0.2, 0.2], "Train/val/test fractions of a random node split.", _SPLIT)
    split_seed: int = _opt(0, "Seed of the random train/val/test split.", _SEED)


@dataclass
class PartitionConfig:
    """How the graph is cut into one partition per rank."""

    dir: str | None = _opt(
        None, "Directory of the partitions (written once, reused); null = <output.dir>/partitions.",
        path=True)
    method: Literal["random", "range", "metis"] = _opt(
        "random", "random (balanced), range (contiguous ids) or metis (fewest cut edges; needs "
        "pymetis).")
    parts: int | None = _opt(
        None, "Number of partitions; null = world size. If set it must equal the world size.",
        _POS_INT)
    seed: int = _opt(0, "Seed of random partitioning.", _SEED)


@dataclass
class SamplerConfig:
    """Neighbor sampling and minibatching (PyG NeighborLoader conventions)."""

    fanouts: list[int] = _opt(
        [10, 10], "Neighbors per hop, hop 1 (nearest the seeds) first; -1 = all neighbors.",
        _FANOUTS)
    batch_size: int = _opt(512, "Seed nodes per training minibatch on each rank.", _POS_INT)
    eval_fanouts: list[int] | None = _opt(
        None, "Neighbors per hop when evaluating; null = all neighbors (-1 at every hop), exact "
        "and deterministic.", _FANOUTS)
    eval_batch_size: int | None = _opt(
        None, "Seed nodes per evaluation minibatch; null = sampler.batch_size.", _POS_INT)
    replace: bool = _opt(False, "Sample neighbors with replacement.")
    prefetch: int = _opt(
        2, "Minibatches requested ahead of the training step; 0 = synchronous.", _NONNEG_INT)
    seed: int = _opt(
        0, "RNG seed; the same seed gives bit-identical minibatches for any world size.",
        _SEED)
    shuffle: bool = _opt(True, "Reshuffle the training seeds every epoch.")
    drop_last: bool = _opt(False, "Drop the last incomplete training minibatch of each rank.")


@dataclass
class FeaturesConfig:
    """Where node features live."""

    placement: Literal["auto", "host", "pinned", "device"] = _opt(
        "auto", "host memory, pinned host memory, or GPU memory; auto = pinned on CUDA, host on "
        "CPU.")


@dataclass
class ModelConfig:
    """The GraphSAGE model of `mnmg-sampler train`."""

    hidden: int = _opt(256, "Hidden channels of every GraphSAGE layer.", _POS_INT)
    layers: int | None = _opt(
        None, "Number of GraphSAGE layers; must equal len(sampler.fanouts); null = that.",
        _POS_INT)
    dropout: float = _opt(0.5, "Dropout probability after each hidden layer.", _UNIT_OPEN)
    aggr: Literal["mean", "max", "sum"] = _opt("mean", "Neighbor aggregation of SAGEConv.")
    use_pyg: bool = _opt(
        False, "Use PyG's SAGEConv (needs the pyg extra); false = the built-in layer (same "
        "math), so results do not depend on whether PyG is installed.")


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
    epochs: int = _opt(10, "Passes over the training seeds.", _POS_INT)
    eval_every: int = _opt(
        1, "Evaluate on the validation split every N epochs; 0 = after the last epoch only.",
        _NONNEG_INT)
    target_metric: Literal["val_acc", "val_loss"] = _opt(
        "val_acc", "Metric that selects the best epoch (reported with its test accuracy).")
    target_value: float | None = _opt(
        None, "Stop early once target_metric reaches this value; null = run every epoch.")
    max_steps_per_epoch: int | None = _opt(
        None, "Cap on minibatches per epoch and rank (quick runs); null = no cap.", _POS_INT)
    log_every: int = _opt(
        10, "Log the training loss every N steps on rank 0; 0 = once per epoch.", _NONNEG_INT)


@dataclass
class RuntimeConfig:
    """Process group, device and threads of every rank."""

    backend: Literal["auto", "nccl", "gloo"] = _opt(
        "auto", "torch.distributed backend; auto = nccl with CUDA, else gloo.")
    device: Literal["auto", "cpu", "cuda"] = _opt(
        "auto", "Device of the model and minibatches; auto = cuda:LOCAL_RANK when available.")
    threads_per_rank: int | None = _opt(
        None, "CPU threads of each rank (torch, numba); null = cores / local ranks.", _POS_INT)
    collective_timeout_s: float = _opt(
        600.0, "Seconds before a stuck collective fails the job instead of hanging.", _POS_FLOAT)
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
    dataset: DatasetConfig = _section(DatasetConfig, "Which graph to load and how to clean it.")
    partition: PartitionConfig = _section(PartitionConfig, "How the graph is cut into one "
                                          "partition per rank.")
    sampler: SamplerConfig = _section(SamplerConfig, "Neighbor sampling and minibatching.")
    features: FeaturesConfig = _section(FeaturesConfig, "Where node features live.")
    model: ModelConfig = _section(ModelConfig, "The GraphSAGE model.")
    optimizer: OptimizerConfig = _section(OptimizerConfig, "The optimizer.")
    training: TrainingConfig = _section(TrainingConfig, "The training loop.")
    runtime: RuntimeConfig = _section(RuntimeConfig, "Process group, device and threads.")
    output: OutputConfig = _section(OutputConfig, "Where results go.")


#: Cross-field rules checked by :func:`validate_config` (listed in docs/configuration.md).
CROSS_FIELD_RULES = (
    "`model.layers` must equal `len(sampler.fanouts)` (one GraphSAGE layer per hop).",
    "`sampler.eval_fanouts`, when set, has as many hops as `sampler.fanouts`.",
    "`runtime.backend: nccl` needs `runtime.device` `cuda` or `auto`.",
    "`features.placement` `pinned` or `device` needs `runtime.device` `cuda` or `auto`.",
    "`partition.parts`, when set, must equal the world size (`validate --world-size W`).",
    "`training.target_value` must lie in (0, 1] for `val_acc` and be > 0 for `val_loss`.",
    "`dataset.name` `rmat:SCALE[:EDGE_FACTOR]` needs 1 <= SCALE <= 40 and EDGE_FACTOR >= 1.",
)


# --------------------------------------------------------------------------- introspection


@dataclass(frozen=True)
class FieldInfo:
    """One leaf of the schema: dotted key, type as text, default, one-line doc."""

    key: str
    type: str
    default: Any
    doc: str


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _is_section(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return args[0], True
    return tp, False


def _type_text(tp: Any) -> str:
    inner, optional = _unwrap_optional(tp)
    if typing.get_origin(inner) is Literal:
        text = " \\| ".join(str(c) for c in typing.get_args(inner))
    elif typing.get_origin(inner) is list:
        text = f"list[{typing.get_args(inner)[0].__name__}]"
    else:
        text = inner.__name__
    return f"{text} or null" if optional else text


def iter_fields(cls: type = JobConfig, prefix: str = "") -> Iterator[FieldInfo]:
    """Every leaf field of the schema in declaration order, with its dotted key and doc."""
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        key = prefix + f.name
        tp = hints[f.name]
        if _is_section(tp):
            yield from iter_fields(tp, key + ".")
            continue
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        yield FieldInfo(key, _type_text(tp), default, f.metadata.get("doc", ""))


def section_docs() -> dict[str, str]:
    """Top-level section name -> its one-line doc."""
    hints = _hints(JobConfig)
    return {f.name: f.metadata["doc"] for f in dataclasses.fields(JobConfig)
            if _is_section(hints[f.name])}


def _all_keys() -> list[str]:
    return [fi.key for fi in iter_fields()]


def format_value(v: Any) -> str:
    """A value as it would be written in YAML (``null``, ``true``, ``[10, 10]``)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return "[" + ", ".join(format_value(x) for x in v) + "]"
    return str(v)


def fields_epilog() -> str:
    """Every dotted key with its doc, for the ``--help`` text of config-taking commands."""
    lines = ["config keys (override with KEY=VALUE; docs/configuration.md has the details):"]
    for fi in iter_fields():
        lines.append(f"  {fi.key} = {format_value(fi.default)}")
        lines.append(f"      {fi.doc}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- errors


def _err(key: str, what: str, fix: str = "", consequence: str = "") -> ConfigError:
    return ConfigError(f"{key}: {what}", consequence, fix)


def _show(v: Any) -> str:
    return repr(v) if isinstance(v, str) else format_value(v)


def _unknown_key(key: str, siblings: Sequence[str], parent: str) -> ConfigError:
    leaf = key.rsplit(".", 1)[-1]
    close = difflib.get_close_matches(leaf, siblings, n=1, cutoff=0.6)
    if close:
        hint = f"did you mean {parent}{close[0]}?"
    else:  # maybe the right name in the wrong section, e.g. a top-level `batch_size`
        keys = _all_keys()
        by_leaf = {k.rsplit(".", 1)[-1]: k for k in keys}
        close = difflib.get_close_matches(leaf, list(by_leaf), n=1, cutoff=0.75)
        hint = f"did you mean {by_leaf[close[0]]}?" if close else ""
    where = f"valid keys of {parent[:-1]}" if parent else "valid top-level keys"
    return ConfigError(
        f"{key}: unknown key" + (f" ({hint})" if hint else ""),
        "It would be silently ignored",
        f"rename or remove it; {where}: {', '.join(siblings)}",
    )


# --------------------------------------------------------------------------- values


def _coerce(key: str, tp: Any, v: Any, check: tuple | None, example: Any) -> Any:
    """Check one value against its annotated type and range; return it normalised."""
    inner, optional = _unwrap_optional(tp)
    fix = f"e.g. {key}={format_value(example)}" if example is not None else ""
    if v is None:
        if optional:
            return None
        if typing.get_origin(inner) is Literal:
            want = "one of " + ", ".join(map(str, typing.get_args(inner)))
        elif typing.get_origin(inner) is list:
            want = f"a list of {_PHRASE[typing.get_args(inner)[0]][1]}"
        else:
            want = _PHRASE[inner][0]
        raise _err(key, f"expected {want}, got null", fix)
    origin = typing.get_origin(inner)
    if origin is Literal:
        choices = typing.get_args(inner)
        if v in choices:
            return v
        close = difflib.get_close_matches(str(v).lower(), [str(c) for c in choices], n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise _err(key, f"expected one of {', '.join(map(str, choices))}, got {_show(v)}{hint}",
                   fix)
    if origin is list:
        item_tp = typing.get_args(inner)[0]
        if isinstance(v, str) and "," in v:  # `sampler.fanouts=10,10`
            import yaml

            v = [yaml.safe_load(s) for s in v.split(",")]
        if not isinstance(v, (list, tuple)):
            v = [v]
        try:
            out = [_scalar(item_tp, x) for x in v]
        except (TypeError, ValueError):
            raise _err(key, f"expected a list of {_PHRASE[item_tp][1]}, got {_show(v)}",
                       fix) from None
    else:
        try:
            out = _scalar(inner, v)
        except (TypeError, ValueError):
            raise _err(key, f"expected {_PHRASE[inner][0]}{' or null' if optional else ''}, "
                       f"got {_show(v)}" + (" (quote it)" if inner is str else ""), fix) from None
    if check is not None and not check[0](out):
        raise _err(key, f"expected {check[1]}, got {_show(out)}", fix)
    return out


_PHRASE = {int: ("an integer", "integers"), float: ("a number", "numbers"),
           bool: ("true or false", "booleans"), str: ("a string", "strings")}


def _scalar(tp: type, v: Any) -> Any:
    if tp is bool:
        if isinstance(v, bool):
            return v
        raise TypeError
    if tp is int:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TypeError
        if isinstance(v, float) and not v.is_integer():
            raise ValueError
        return int(v)
    if tp is float:
        if isinstance(v, bool):
            raise TypeError
        if isinstance(v, str):  # YAML 1.1 reads `1e-3` as a string
            return float(v)
        if not isinstance(v, (int, float)):
            raise TypeError
        return float(v)
    if tp is str:
        if not isinstance(v, str):
            raise TypeError
        return v
    raise TypeError(f"unsupported schema type {tp!r}")  # pragma: no cover


def _build(cls: type, data: Any, prefix: str) -> Any:
    """Build section ``cls`` from a mapping, rejecting unknown keys and bad values."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        name = prefix[:-1] or "config"
        raise _err(name, f"expected a mapping of settings, got {_show(data)}",
                   f"write it as `{prefix[:-1]}:` followed by indented `key: value` lines"
                   if prefix else "the file must be a YAML mapping of sections")
    hints = _hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    for k in data:
        if not isinstance(k, str) or k not in names:
            raise _unknown_key(prefix + str(k), names, prefix)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        tp, key, v = hints[f.name], prefix + f.name, data[f.name]
        if _is_section(tp):
            kwargs[f.name] = _build(tp, v, key + ".")
        else:
            default = (f.default_factory() if f.default_factory is not dataclasses.MISSING
                       else f.default)
            out = _coerce(key, tp, v, f.metadata.get("check"), default)
            if f.metadata.get("path") and isinstance(out, str):
                out = os.path.expandvars(os.path.expanduser(out))
            kwargs[f.name] = out
    return cls(**kwargs)


# --------------------------------------------------------------------------- overrides


def _field_at(key: str) -> tuple[Any, bool]:
    """(annotated type, is_section) of a dotted key; ConfigError with a hint when unknown."""
    cls, parts = JobConfig, key.split(".")
    for i, part in enumerate(parts):
        hints = _hints(cls)
        names = [f.name for f in dataclasses.fields(cls)]
        if part not in names:
            raise _unknown_key(key, names, ".".join(parts[:i]) + ("." if i else ""))
        tp = hints[part]
        if i < len(parts) - 1:
            if not _is_section(tp):
                raise _err(key, f"{'.'.join(parts[:i + 1])} is a value, not a section",
                           f"use {'.'.join(parts[:i + 1])}=VALUE")
            cls = tp
    return tp, _is_section(tp)


def _parse_override(text: str) -> tuple[str, Any]:
    import yaml

    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or " " in key:
        raise ConfigError(f"override {text!r} is not KEY=VALUE", "It cannot be applied",
                          "write e.g. sampler.batch_size=512 (no spaces around '=')")
    tp, _ = _field_at(key)
    inner, optional = _unwrap_optional(tp)
    if inner is str:  # keep text as typed (`name=2024`), except null for optional fields
        stripped = raw.strip()
        if optional and stripped in ("", "null", "~", "Null", "NULL"):
            return key, None
        return key, stripped
    try:
        return key, yaml.safe_load(raw)
    except yaml.YAMLError:
        raise _err(key, f"cannot parse the override value {raw!r}",
                   "quote lists in the shell, e.g. 'sampler.fanouts=[10,10]'") from None


def _set_dotted(data: dict, key: str, value: Any) -> None:
    parts = key.split(".")
    node = data
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):  # missing, null or (invalid) scalar: replace
            child = {}
            node[part] = child
        node = child
    last = parts[-1]
    if isinstance(value, Mapping) and isinstance(node.get(last), dict):
        merged = dict(node[last])
        for k, v in value.items():
            merged[k] = v
        node[last] = merged
    else:
        node[last] = value


def apply_overrides(data: Mapping, overrides: Sequence[str]) -> dict:
    """A deep copy of ``data`` with each ``dotted.key=value`` applied in order (last wins)."""
    import copy

    out = copy.deepcopy(dict(data))
    for text in overrides:
        key, value = _parse_override(text)
        _set_dotted(out, key, value)
    return out


# --------------------------------------------------------------------------- loading


class _UniqueKeyLoader:
    """Factory of a SafeLoader that rejects duplicate keys (PyYAML keeps the last silently)."""

    _cls = None

    @classmethod
    def get(cls):
        if cls._cls is None:
            import yaml

            class Loader(yaml.SafeLoader):
                pass

            def construct_mapping(loader, node, deep=False):
                seen = {}
                for key_node, _ in node.value:
                    k = loader.construct_object(key_node, deep=deep)
                    if k in seen:
                        raise yaml.constructor.ConstructorError(
                            None, None, f"duplicate key {k!r}", key_node.start_mark)
                    seen[k] = True
                return yaml.SafeLoader.construct_mapping(loader, node, deep)

            Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
                                   construct_mapping)
            cls._cls = Loader
        return cls._cls


def _read_yaml(path: str | os.PathLike) -> dict:
    import yaml

    p = Path(path)
    if not p.is_file():
        raise ConfigError(
            f"{path}: config file not found" if not p.exists() else f"{path}: not a file",
            "", "pass an existing YAML file, e.g. configs/quickstart.yaml")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read the config file ({e})", "",
                          "check the file's permissions and that it is UTF-8 text") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader.get())  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{path}: invalid YAML{where}: {problem}", "",
                          "fix the YAML syntax (indent with spaces, `key: value`)") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections, got "
                          f"{type(data).__name__}", "",
                          "start the file with e.g. `sampler:` and indented `batch_size: 512`")
    return data


def config_from_dict(data: Mapping, world_size: int | None = None) -> JobConfig:
    """Build, resolve and validate a :class:`JobConfig` from a (YAML-shaped) nested mapping."""
    cfg = _build(JobConfig, data, "")
    _resolve(cfg)
    validate_config(cfg, world_size=world_size)
    return cfg


def load_config(path: str | os.PathLike | None, overrides: Sequence[str] = (),
                world_size: int | None = None) -> JobConfig:
    """Defaults < the YAML file ``path`` (if any) < ``overrides`` (``"dotted.key=value"``).

    Raises :class:`ConfigError` naming the dotted key (or the path) for any problem. Does not
    touch the dataset; :func:`check_paths` does.
    """
    data = _read_yaml(path) if path is not None else {}
    return config_from_dict(apply_overrides(data, overrides), world_size=world_size)


def _resolve(cfg: JobConfig) -> None:
    """Replace the nulls that depend only on other fields by concrete values."""
    if cfg.output.dir is None:
        cfg.output.dir = f"runs/{cfg.name}"
    if cfg.partition.dir is None:
        cfg.partition.dir = os.path.join(cfg.output.dir, "partitions")
    if cfg.sampler.eval_fanouts is None:
        cfg.sampler.eval_fanouts = [-1] * len(cfg.sampler.fanouts)
    if cfg.sampler.eval_batch_size is None:
        cfg.sampler.eval_batch_size = cfg.sampler.batch_size
    if cfg.model.layers is None:
        cfg.model.layers = len(cfg.sampler.fanouts)


# --------------------------------------------------------------------------- datasets


@dataclass(frozen=True)
class DatasetSpec:
    """What ``dataset.name`` denotes: a built-in graph, an R-MAT graph or a file."""

    kind: Literal["builtin", "rmat", "path"]
    name: str
    scale: int | None = None
    edge_factor: int | None = None
    path: str | None = None


def parse_dataset_name(name: str, key: str = "dataset.name") -> DatasetSpec:
    """Classify ``dataset.name``; R-MAT defaults to edge factor 16 (Graph500)."""
    if name.lower() in BUILTIN_DATASETS:
        return DatasetSpec("builtin", name.lower())
    m = _RMAT.match(name)
    if m:
        try:
            scale = int(m["scale"])
            ef = int(m["ef"]) if m["ef"] is not None else 16
        except ValueError:
            scale = ef = -1
        if not (1 <= scale <= 40 and ef >= 1):
            raise _err(key, f"bad R-MAT spec {name!r}",
                       f"use rmat:SCALE[:EDGE_FACTOR] with 1 <= SCALE <= 40, e.g. {key}=rmat:16:16",
                       "The graph has 2**SCALE nodes and EDGE_FACTOR * 2**SCALE edges")
        return DatasetSpec("rmat", f"rmat:{scale}:{ef}", scale=scale, edge_factor=ef)
    return DatasetSpec("path", name, path=name)


def check_paths(cfg: JobConfig, key: str = "dataset.name") -> None:
    """Check that a path dataset exists and has a readable type (typos of built-ins get a hint).

    Imports the graph readers' suffix list, so it is called by ``validate`` and the jobs, not
    by :func:`load_config`.
    """
    from .graph.datasets import EDGE_LIST_SUFFIXES

    spec = parse_dataset_name(cfg.dataset.name)
    if spec.kind != "path":
        return
    p = Path(spec.path)
    suffixes = (".npz", *EDGE_LIST_SUFFIXES)
    if p.is_file():
        if not p.name.lower().endswith(suffixes):
            raise _err(key, f"the file type of {p.name!r} is not recognised",
                       f"use a file ending in {', '.join(suffixes)}")
        return
    bare = "/" not in spec.path and os.sep not in spec.path and "." not in spec.path
    if bare:
        close = difflib.get_close_matches(spec.path.lower(), BUILTIN_DATASETS, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise _err(key, f"unknown dataset {spec.path!r}{hint}",
                   f"use a built-in name ({', '.join(BUILTIN_DATASETS)}), rmat:SCALE[:EDGE_FACTOR]"
                   " or the path of a graph file")
    where = " (it is a directory)" if p.is_dir() else ""
    if not p.is_absolute():
        where += f" (relative to the working directory {os.getcwd()})"
    raise _err(key, f"dataset file {spec.path!r} not found{where}",
               "fix the path or run from the directory the config expects")


# --------------------------------------------------------------------------- cross-field checks


def validate_config(cfg: JobConfig, world_size: int | None = None) -> None:
    """Checks that span several fields (see :data:`CROSS_FIELD_RULES`); ConfigError if broken."""
    parse_dataset_name(cfg.dataset.name)  # rmat:SCALE[:EDGE_FACTOR] syntax and range
    n_hops = len(cfg.sampler.fanouts)
    if cfg.model.layers is not None and cfg.model.layers != n_hops:
        raise _err("model.layers", f"{cfg.model.layers} layers but sampler.fanouts has {n_hops} "
                   f"hops {format_value(cfg.sampler.fanouts)}",
                   f"set model.layers={n_hops} (or null), or give sampler.fanouts "
                   f"{cfg.model.layers} entries",
                   "Each GraphSAGE layer consumes one sampled hop")
    ef = cfg.sampler.eval_fanouts
    if ef is not None and len(ef) != n_hops:
        raise _err("sampler.eval_fanouts", f"{len(ef)} hops but sampler.fanouts has {n_hops}",
                   f"give sampler.eval_fanouts {n_hops} entries, or null (all neighbors)",
                   "The model has one layer per hop in training and evaluation alike")
    rt = cfg.runtime
    if rt.backend == "nccl" and rt.device == "cpu":
        raise _err("runtime.backend", "nccl needs GPUs but runtime.device is cpu",
                   "use runtime.backend=gloo for CPU ranks, or runtime.device=cuda")
    if cfg.features.placement in ("pinned", "device") and rt.device == "cpu":
        raise _err("features.placement", f"{cfg.features.placement!r} needs CUDA but "
                   "runtime.device is cpu", "use features.placement=host (or auto) on CPU")
    if world_size is not None:
        if world_size < 1:
            raise _err("--world-size", f"expected a positive integer, got {world_size}",
                       "pass --world-size W with W >= 1")
        if cfg.partition.parts is not None and cfg.partition.parts != world_size:
            raise _err("partition.parts", f"{cfg.partition.parts} partitions but the world size "
                       f"is {world_size}", "set partition.parts=null (= world size) or launch "
                       f"{cfg.partition.parts} ranks", "Each rank serves exactly one partition")
    tv = cfg.training.target_value
    if tv is not None:
        if cfg.training.target_metric == "val_acc" and not 0 < tv <= 1:
            raise _err("training.target_value", f"expected an accuracy in (0, 1], got {tv}",
                       "e.g. training.target_value=0.85")
        if cfg.training.target_metric == "val_loss" and not tv > 0:
            raise _err("training.target_value", f"expected a loss > 0, got {tv}",
                       "e.g. training.target_value=0.5")


# --------------------------------------------------------------------------- output


def config_to_dict(cfg: JobConfig) -> dict:
    """The config as plain nested dicts (YAML/JSON-ready; reloads to an equal config)."""
    return dataclasses.asdict(cfg)


def config_to_yaml(cfg: JobConfig) -> str:
    """The config as YAML, sections in schema order, lists inline."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    Dumper.add_representer(
        list, lambda d, v: d.represent_sequence("tag:yaml.org,2002:seq", v, flow_style=True))
    return yaml.dump(config_to_dict(cfg), Dumper=Dumper, sort_keys=False,
                     default_flow_style=False)


# --------------------------------------------------------------------------- CLI glue


def add_config_arguments(parser: Any, config_flag: bool = True) -> None:
    """Add the config arguments every config-taking subcommand shares.

    ``config_flag=True`` gives ``--config PATH`` (train); ``False`` a positional ``CONFIG``
    (validate). Both take trailing ``KEY=VALUE`` overrides and list every key in ``--help``.
    """
    import argparse

    if config_flag:
        parser.add_argument("--config", metavar="PATH", default=None,
                            help="YAML job file (default: built-in defaults only)")
    else:
        parser.add_argument("config", metavar="CONFIG", help="YAML job file")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                        help="dotted overrides, applied after the file (sampler.batch_size=512)")
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = fields_epilog()
