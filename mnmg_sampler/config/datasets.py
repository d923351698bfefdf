"""Whether ``dataset.name`` (classified by :mod:`mnmg_sampler.graph.names`) is usable: a bad spec,
a missing file or an unreadable file type is a ConfigError naming the key."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

from ..errors import ConfigError, GraphFormatError
from ..graph.formats import (
    GRAPH_SUFFIXES,
    is_ogb_dir,
    is_ogb_hetero_dir,
    is_sharded,
    shard_files,
    supported_formats,
)
from ..graph.names import BUILTIN_DATASETS, DatasetSpec
from ..graph.names import parse_dataset_name as classify_name
from .parse import _err
from .schema import JobConfig


def parse_dataset_name(name: str, key: str = "dataset.name") -> DatasetSpec:
    """Classify ``dataset.name`` (:func:`mnmg_sampler.graph.names.parse_dataset_name`); a bad
    spec is a :class:`~mnmg_sampler.errors.ConfigError` naming ``key``."""
    try:
        return classify_name(name, key)
    except GraphFormatError as e:
        raise ConfigError(e.what, e.consequence, e.fix) from e


def check_paths(cfg: JobConfig, key: str = "dataset.name") -> None:
    """Check that a path dataset exists and has a readable type (typos of built-ins get a hint).

    Also checks that the node data files exist. Touches the file system, so it is called by
    ``validate`` and the jobs, not by :func:`load_config`.
    """
    spec = parse_dataset_name(cfg.dataset.name)
    d = cfg.dataset
    for fkey in ("features", "labels", "train_mask", "val_mask", "test_mask"):
        f = getattr(d, fkey)
        if f is not None and not Path(f).is_file():
            raise _err(f"dataset.{fkey}", f"file {f!r} not found",
                       "fix the path (relative paths start at the working directory)")
    w = cfg.sampler.weights
    if w and w.lower().endswith(".npy") and not Path(w).is_file():
        raise _err("sampler.weights", f"file {w!r} not found",
                   "fix the path, or name an array of the dataset's .npz (e.g. adj_data)")
    if spec.kind != "path":
        return
    if is_sharded(spec.path):  # a directory (not OGB) or glob of edge shards
        try:
            shard_files(spec.path)
            return
        except GraphFormatError as e:
            if not Path(spec.path).is_dir():
                raise _err(key, e.what, e.fix) from e
    p = Path(spec.path)
    if p.exists():  # the suffix (or an OGB layout) here; the content is read by the job
        if not ((is_ogb_dir(p) or is_ogb_hetero_dir(p)) if p.is_dir()
                else p.name.lower().endswith(GRAPH_SUFFIXES)):
            what = "the directory" if p.is_dir() else "the file type of"
            raise _err(key, f"{what} {p.name!r} is not recognised",
                       "give a file in one of these formats:\n" + supported_formats())
        return
    bare = "/" not in spec.path and os.sep not in spec.path and "." not in spec.path
    if bare:
        close = difflib.get_close_matches(spec.path.lower(), BUILTIN_DATASETS, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise _err(key, f"unknown dataset {spec.path!r}{hint}",
                   f"use a built-in name ({', '.join(BUILTIN_DATASETS)}), rmat:SCALE[:EDGE_FACTOR]"
                   ", typed-sbm:PAPERS[:CLASSES], typed-useritem:USERS[:ITEMS] or the path of a "
                   "graph file")
    where = ""
    if not p.is_absolute():
        where += f" (relative to the working directory {os.getcwd()})"
    raise _err(key, f"dataset file {spec.path!r} not found{where}",
               "fix the path or run from the directory the config expects")
