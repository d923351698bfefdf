"""What ``dataset.name`` denotes (built-in, R-MAT or a file) and whether its file exists."""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..errors import GraphFormatError
from .formats import (
    GRAPH_SUFFIXES,
    is_ogb_dir,
    is_ogb_hetero_dir,
    is_sharded,
    shard_files,
    supported_formats,
)
from .parse import _err
from .schema import BUILTIN_DATASETS, JobConfig

_RMAT = re.compile(r"^rmat:(?P<scale>[^:]*)(?::(?P<ef>[^:]*))?$")
_TYPED_SBM = re.compile(r"^typed-sbm:(?P<papers>[^:]*)(?::(?P<classes>[^:]*))?$")
TYPED_SBM_MAX_PAPERS = 1 << 24
_TYPED_UI = re.compile(r"^typed-useritem(?P<t>-t)?:(?P<users>[^:]*)(?::(?P<items>[^:]*))?$")

# --------------------------------------------------------------------------- datasets


@dataclass(frozen=True)
class DatasetSpec:
    """What ``dataset.name`` denotes: a built-in graph, an R-MAT graph, the generated typed graph
    (``typed-sbm``: ``papers`` papers in ``classes`` classes; ``typed-useritem``: ``users`` users
    rating ``items`` items; ``typed-useritem-t``, ``temporal``: with rating times) or a file."""

    kind: Literal["builtin", "rmat", "typed-sbm", "typed-useritem", "path"]
    name: str
    scale: int | None = None
    edge_factor: int | None = None
    path: str | None = None
    papers: int | None = None
    classes: int | None = None
    users: int | None = None
    items: int | None = None
    temporal: bool = False


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
    m = _TYPED_SBM.match(name)
    if m:
        try:
            papers = int(m["papers"])
            classes = int(m["classes"]) if m["classes"] is not None else 4
        except ValueError:
            papers = classes = -1
        if not (2 <= classes <= 64 and classes <= papers <= TYPED_SBM_MAX_PAPERS):
            raise _err(key, f"bad typed-sbm spec {name!r}",
                       f"use typed-sbm:PAPERS[:CLASSES] with 2 <= CLASSES <= 64 and CLASSES <= "
                       f"PAPERS <= 2**24, e.g. {key}=typed-sbm:2000:4",
                       "The generated typed graph has PAPERS papers (labelled), PAPERS / 2 "
                       "authors and 4 * CLASSES fields")
        return DatasetSpec("typed-sbm", f"typed-sbm:{papers}:{classes}", papers=papers,
                           classes=classes)
    m = _TYPED_UI.match(name)
    if m:
        try:
            users = int(m["users"])
            items = int(m["items"]) if m["items"] is not None else users
        except ValueError:
            users = items = -1
        if not (2 <= users <= TYPED_SBM_MAX_PAPERS and 8 <= items <= TYPED_SBM_MAX_PAPERS):
            raise _err(key, f"bad typed-useritem spec {name!r}",
                       f"use typed-useritem:USERS[:ITEMS] with 2 <= USERS <= 2**24 and 8 <= "
                       f"ITEMS <= 2**24, e.g. {key}=typed-useritem:2000:1000",
                       "The generated typed graph has USERS users rating ITEMS items (ITEMS "
                       "defaults to USERS)")
        kind = "typed-useritem" + (m["t"] or "")
        return DatasetSpec("typed-useritem", f"{kind}:{users}:{items}", users=users,
                           items=items, temporal=bool(m["t"]))
    return DatasetSpec("path", name, path=name)


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
