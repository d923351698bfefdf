"""Loading a job: YAML file < overrides, resolution of nulls, cross-field checks, output."""

from __future__ import annotations

import copy
import dataclasses
import functools
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..errors import ConfigError
from .datasets import parse_dataset_name
from .fields import format_value, num_hops
from .parse import _build, _err, apply_overrides
from .schema import JobConfig

# --------------------------------------------------------------------------- loading


@functools.cache
def _unique_key_loader():
    """A SafeLoader that rejects duplicate keys (PyYAML keeps the last silently)."""
    import yaml

    class Loader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            seen = set()
            for key_node, _ in node.value:
                k = self.construct_object(key_node, deep=deep)
                try:
                    hash(k)
                except TypeError:  # `? [a, b]` or `{x: 1}: 2`: not a setting's name
                    kind = {list: "list", dict: "mapping"}.get(type(k), type(k).__name__)
                    raise yaml.constructor.ConstructorError(
                        None, None, f"a {kind} cannot be a key (keys are setting names)",
                        key_node.start_mark) from None
                if k in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {k!r}", key_node.start_mark)
                seen.add(k)
            return super().construct_mapping(node, deep)

    return Loader


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
        data = yaml.load(text, Loader=_unique_key_loader())  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        fix = ("write each setting as `name: value` (a list or mapping is a value, never a key)"
               if "cannot be a key" in problem else
               "fix the YAML syntax (indent with spaces, `key: value`)")
        raise ConfigError(f"{path}: invalid YAML{where}: {problem}", "", fix) from None
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
    if cfg.sampler.eval_fanouts is None:  # disjoint trees: one per endpoint and negative
        trees = cfg.task == "link" and (cfg.sampler.time_attr is not None or cfg.sampler.disjoint)
        cfg.sampler.eval_fanouts = (copy.deepcopy(cfg.sampler.fanouts) if trees
                                    else [-1] * num_hops(cfg.sampler.fanouts))
    if cfg.sampler.eval_batch_size is None:
        cfg.sampler.eval_batch_size = cfg.sampler.batch_size
    if cfg.model.layers is None:
        cfg.model.layers = num_hops(cfg.sampler.fanouts)
    if cfg.training.target_metric is None:
        cfg.training.target_metric = "val_auc" if cfg.task == "link" else "val_acc"


# --------------------------------------------------------------------------- cross-field checks


def validate_config(cfg: JobConfig, world_size: int | None = None) -> None:
    """Checks that span several fields (see :data:`CROSS_FIELD_RULES`); ConfigError if broken."""
    parse_dataset_name(cfg.dataset.name)  # rmat:SCALE[:EDGE_FACTOR] syntax and range
    _check_name(cfg.name)
    n_hops = num_hops(cfg.sampler.fanouts)
    if cfg.model.layers is not None and cfg.model.layers != n_hops:
        raise _err("model.layers", f"{cfg.model.layers} layers but sampler.fanouts has {n_hops} "
                   f"hops {format_value(cfg.sampler.fanouts)}",
                   f"set model.layers={n_hops} (or null), or give sampler.fanouts "
                   f"{cfg.model.layers} entries",
                   "Each GraphSAGE layer consumes one sampled hop")
    ef = cfg.sampler.eval_fanouts
    if ef is not None and num_hops(ef) != n_hops:
        raise _err("sampler.eval_fanouts", f"{num_hops(ef)} hops but sampler.fanouts has "
                   f"{n_hops}",
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
    if cfg.task == "link" and cfg.training.mode != "train":
        raise _err("training.mode", f"{cfg.training.mode} with task link",
                   "use training.mode=train (the link job only trains), or task=node for a "
                   "sampling run")
    if cfg.task == "link" and cfg.sampler.split != "global":
        raise _err("sampler.split", f"{cfg.sampler.split} with task link",
                   "use sampler.split=global for task link (owner is for task node)",
                   "The link loader splits seed edges across ranks in one global order; an "
                   "owner split would not keep hop 1 local anyway, since negatives and "
                   "destinations fall in any partition")
    tm = cfg.training.target_metric
    if (tm in ("val_auc", "val_mrr")) != (cfg.task == "link") and tm != "val_loss":
        raise _err("training.target_metric", f"{tm} is not a metric of task {cfg.task}",
                   "use val_acc or val_loss for task node, val_auc, val_mrr or val_loss for "
                   "task link (or null)")
    tv = cfg.training.target_value
    if tv is not None:
        if tm in ("val_acc", "val_auc", "val_mrr") and not 0 < tv <= 1:
            what = "an accuracy" if tm == "val_acc" else f"a {tm[4:].upper()}"
            raise _err("training.target_value", f"expected {what} in (0, 1], got {tv}",
                       "e.g. training.target_value=0.85")
        if cfg.training.target_metric == "val_loss" and not tv > 0:
            raise _err("training.target_value", f"expected a loss > 0, got {tv}",
                       "e.g. training.target_value=0.5")


def _check_name(name: str) -> None:
    """``name`` is one plain path component, so ``runs/<name>`` stays inside ``runs/``."""
    bad = ("/" in name or "\\" in name or os.sep in name or (os.altsep or "/") in name
           or name in ("", ".", "..") or "\0" in name or name != name.strip())
    if bad:
        raise _err("name", f"{name!r} is not a plain file name",
                   "use letters, digits, '-', '_' or '.' without a path separator or '..' "
                   "(e.g. name=cora-sage); to write elsewhere set output.dir",
                   "The job's output goes to runs/<name>, which must stay inside runs/")


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
