"""What a dataset name denotes: a built-in graph, an R-MAT graph, a generated typed graph or a
path. Plain data (the standard library and the package's errors): ``config`` checks
``dataset.name`` with it, and the graph readers and partition manifests classify names with it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from ..errors import GraphFormatError

__all__ = ["BUILTIN_DATASETS", "DatasetSpec", "TYPED_SBM_MAX_PAPERS", "parse_dataset_name"]

BUILTIN_DATASETS = ("cora",)
"""Datasets shipped inside the package (``mnmg_sampler/data``)."""

_RMAT = re.compile(r"^rmat:(?P<scale>[^:]*)(?::(?P<ef>[^:]*))?$")
_TYPED_SBM = re.compile(r"^typed-sbm:(?P<papers>[^:]*)(?::(?P<classes>[^:]*))?$")
TYPED_SBM_MAX_PAPERS = 1 << 24
_TYPED_UI = re.compile(r"^typed-useritem(?P<t>-t)?:(?P<users>[^:]*)(?::(?P<items>[^:]*))?$")

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


def parse_dataset_name(name: str, key: str = "graph") -> DatasetSpec:
    """Classify a dataset name; R-MAT defaults to edge factor 16 (Graph500). ``key`` names the
    setting in errors (a :class:`~mnmg_sampler.errors.GraphFormatError`)."""
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
            raise _bad(key, f"bad R-MAT spec {name!r}",
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
            raise _bad(key, f"bad typed-sbm spec {name!r}",
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
            raise _bad(key, f"bad typed-useritem spec {name!r}",
                       f"use typed-useritem:USERS[:ITEMS] with 2 <= USERS <= 2**24 and 8 <= "
                       f"ITEMS <= 2**24, e.g. {key}=typed-useritem:2000:1000",
                       "The generated typed graph has USERS users rating ITEMS items (ITEMS "
                       "defaults to USERS)")
        kind = "typed-useritem" + (m["t"] or "")
        return DatasetSpec("typed-useritem", f"{kind}:{users}:{items}", users=users,
                           items=items, temporal=bool(m["t"]))
    return DatasetSpec("path", name, path=name)


def _bad(key: str, what: str, fix: str, consequence: str) -> GraphFormatError:
    return GraphFormatError(f"{key}: {what}", consequence, fix)
