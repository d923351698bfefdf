"""Partition a graph given in any form, in one call: ``partition_graph(edge_index, x=..., ...)``.

The lower-level pieces (``graph.partition.partition_graph`` making a plan, ``write_partitions``)
stay where they are; this is the entry point for a user holding tensors, a PyG ``Data`` or a
path. :func:`split_from_partitions` recovers the train/val/test node ids a graph's masks define.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from ..errors import GraphFormatError
from .build import MAX_NODE_ID
from .datasets import load_graph
from .formats import is_ogb_hetero_dir
from .partition import partition_graph as make_plan
from .partition import write_partitions
from .partition_io import load_partition, read_manifest
from .tables import TABLE_SUFFIXES, table_has_column
from .temporal import read_with_time
from .torch_files import load_torch_object
from .typed import TypedGraph
from .typed_io import _is_typed_object, load_typed_graph, typed_graph_at

__all__ = ["partition_graph", "split_from_partitions", "typed_graph_of", "typed_source"]

log = logging.getLogger(__name__)


def partition_graph(
    data,
    x=None,
    y=None,
    *,
    num_parts: int,
    out: str | os.PathLike,
    method: str = "random",
    seed: int = 0,
    masks: Mapping[str, object] | None = None,
    num_nodes: int | None = None,
    undirected: bool | None = None,
    drop_self_loops: bool = False,
    drop_duplicates: bool = False,
    max_node_id: int | None = MAX_NODE_ID,
    renumber: str | bool = "auto",
    time_attr: str | None = "time",
    overwrite: bool = False,
) -> Path:
    """Split a graph into ``num_parts`` parts (one per rank) and write them to ``out``.

    Args:
        data: the graph: an ``edge_index`` (``2 x E`` tensor or array, row 0 = source), a
            ``(src, dst)`` pair, a PyG ``Data``, a dict of arrays, a ``CSRGraph``, or a spec
            string / path that :func:`~mnmg_sampler.graph.datasets.load_graph` reads. A typed
            graph (a PyG ``HeteroData``, the plain dict form, a ``TypedGraph``, a saved one or
            an OGB hetero directory) writes typed parts (:mod:`.partition`,
            ``docs/hetero.md``); its node data comes with it, so ``x``, ``y``, ``masks`` and the
            clean-up options are refused for it. So is a graph with a time (``time_attr``).
        x, y: node features ``[N, F]`` and labels ``[N]`` (arrays or file paths); they
            replace those the input carries.
        num_parts: number of parts: the world size of the job that loads them.
        out: output directory, written atomically (see ``docs/formats.md``).
        method: ``random``, ``range``, ``hash`` or ``metis``; ``seed`` seeds all but ``range``.
        masks: ``{"train": ..., "val": ..., "test": ...}`` bool masks or node-id arrays (or
            paths). Stored with the parts; a YAML job trains on them instead of a random split.
        num_nodes: for arrays: the node count when the largest id is not ``N - 1``.
        undirected, drop_self_loops, drop_duplicates: clean-up before partitioning.
        max_node_id: refuse larger ids (``None``: no bound).
        renumber: ``auto`` (sparse ids), ``true`` or ``false``: number the nodes ``0..N-1`` and
            keep the input's ids for ``n_id`` and seeds (``docs/formats.md``).
        time_attr: the node or edge attribute that holds time (PyG's ``time_attr``): when the
            input has one (a ``HeteroData`` store's, a ``Data``'s, a dict's ``edge_time`` /
            ``node_time``, a table's column), it travels into the parts, which are then typed
            (a homogeneous graph becomes the one type ``"node"``, ``docs/temporal.md``) and
            sample with ``time_attr=...``. ``None``: read no time.
        overwrite: replace an existing ``out`` once the new one is complete.

    Returns:
        The output directory; open a part with ``load_partition(out, rank, num_parts)``.

    Example::

        edge_index = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
        partition_graph(edge_index, x=torch.randn(3, 8), y=torch.tensor([0, 1, 0]),
                        num_parts=2, out="parts")
    """
    typed = typed_graph_of(data, time_attr)
    if typed is not None:
        given = [k for k, v in (("x", x), ("y", y), ("masks", masks), ("num_nodes", num_nodes),
                                ("undirected", undirected), ("drop_self_loops", drop_self_loops),
                                ("drop_duplicates", drop_duplicates),
                                ("renumber", renumber if str(renumber).lower() == "true" else None))
                 if v is not None and v is not False]
        if given:
            untimed = typed.edge_time is None and typed.node_time is None
            what = "a typed graph" if untimed else \
                f"a graph with time ({typed.time_attr!r}, written as typed parts)"
            raise GraphFormatError(
                f"partition_graph got {what} and {given[0]}=", "it would be ignored",
                "give node data inside the graph (per type: docs/hetero.md) and drop "
                f"{given[0]}=" + ("" if untimed else
                                  ", or pass time_attr=None to partition without time"))
    g = typed if typed is not None else load_graph(
        data, undirected=undirected, drop_self_loops=drop_self_loops,
        drop_duplicates=drop_duplicates, seed=seed, x=x, y=y, masks=masks, num_nodes=num_nodes,
        max_node_id=max_node_id, renumber=renumber)
    return write_partitions(g, make_plan(g, int(num_parts), method, seed=seed), out,
                            overwrite=overwrite)


def typed_graph_of(data, time_attr: str | None = "time",
                   timed_homogeneous: bool = True, name: str | None = None):
    """The :class:`~.typed.TypedGraph` ``data`` is or names, with the time it holds under
    ``time_attr``; ``None`` for a homogeneous graph (the homogeneous readers take it).

    A homogeneous ``Data``, dict, ``.pt`` or edge table with a ``time_attr`` attribute (column)
    is the one-type typed graph with that time (:func:`.temporal.temporal_graph_from_data`),
    since only typed parts hold time; with ``timed_homogeneous=False`` it stays homogeneous
    (its time unread: a job that samples without time). ``name`` names an object in errors
    (a path names itself)."""
    kind, source, where = typed_source(data, time_attr, timed_homogeneous)
    name = where or name
    if kind == "built":
        return source
    if kind == "named":
        return typed_graph_at(source)
    if kind == "typed" and time_attr is None:
        return load_typed_graph(source, name)
    return None if kind is None else read_with_time(source, time_attr, name)


def typed_source(data, time_attr: str | None = "time", timed_homogeneous: bool = True
                 ) -> tuple[str | None, object, str | None]:
    """``(kind, source, name)`` of what :func:`typed_graph_of` reads, without building it (a
    ``.pt`` is loaded, a table's header read). Kinds: ``built`` (a ``TypedGraph``), ``named``
    (an OGB hetero directory, or a generated typed graph's name), ``typed`` (a ``HeteroData``
    or the dict form), ``timed`` (a homogeneous graph or table with time), ``None``
    (homogeneous)."""
    if isinstance(data, TypedGraph):
        return "built", data, None
    timed = time_attr is not None and timed_homogeneous
    name = None
    if isinstance(data, (str, os.PathLike)):
        if isinstance(data, str) and ":" in data and not data.startswith(("/", ".")):
            return (("named", data, None) if data.startswith("typed-")
                    else (None, data, None))  # a spec string: generated typed, or rmat:/cora
        p = Path(data)
        if p.name.lower().endswith(TABLE_SUFFIXES):
            has = timed and p.is_file() and table_has_column(p, time_attr)
            return ("timed" if has else None), p, str(p)
        if p.suffix not in (".pt", ".pth") or not p.is_file():
            return ("named" if is_ogb_hetero_dir(p) else None), p, str(p)
        data, name = load_torch_object(p), str(p)
    if _is_typed_object(data):
        return "typed", data, name
    return ("timed" if timed and _has_time(data, time_attr) else None), data, name


def _has_time(data, time_attr: str) -> bool:
    """True for a homogeneous ``Data`` or dict with edge_index that holds ``time_attr`` (or a
    dict's ``edge_time`` / ``node_time``)."""
    if isinstance(data, Mapping):
        return "edge_index" in data and any(
            data.get(k) is not None for k in (time_attr, "edge_time", "node_time"))
    return type(data).__name__ == "Data" and getattr(data, time_attr, None) is not None


def split_from_partitions(path: str | os.PathLike) -> dict[str, np.ndarray] | None:
    """Original ids of the train/val/test nodes the stored masks define, or ``None`` (the
    input's own ids for a renumbered graph: what loaders take as seeds).

    Reads every part's mask files (small) so every rank gets the same global arrays without a
    collective. ``None`` when the graph was partitioned without a ``train`` mask.
    """
    manifest = read_manifest(path)
    names = manifest.get("masks") or []
    if "train" not in names:
        return None
    ids: dict[str, list[np.ndarray]] = {k: [] for k in names}
    for r in range(int(manifest["num_parts"])):
        part = load_partition(path, r, verify=False)
        for k in names:
            ids[k].append(part.input_ids(
                np.asarray(part.orig_ids)[np.asarray(part.masks[k], dtype=bool)]))
    out = {k: np.sort(np.concatenate(v)).astype(np.int64) for k, v in ids.items()}
    for k in ("val", "test"):
        out.setdefault(k, np.zeros(0, np.int64))
    log.info("split from the graph's masks: %s",
             ", ".join(f"{k} {v.size}" for k, v in out.items()))
    return out
