"""Time read from a user's data into a typed graph: a PyG ``HeteroData``'s or ``Data``'s
``time_attr`` attributes, the plain dict form's ``edge_time`` / ``node_time``, a saved one, or an
edge table's time column. How a graph holds and orders its times (time-sorted segments, int64
checks) is :func:`~mnmg_sampler.graph.typed.attach_time`'s.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from os import PathLike
from pathlib import Path

import numpy as np

from ..errors import GraphFormatError
from .build import check_id_bound, should_renumber
from .readers import MASK_KEYS, as_numpy
from .tables import TABLE_SUFFIXES, read_table_times
from .torch_files import load_torch_object
from .typed import EDGE_TYPE, NODE_TYPE, TypedGraph, attach_time, edge_type_of, typed_graph
from .typed_io import load_typed_graph
from .unique import sorted_unique

log = logging.getLogger(__name__)

__all__ = ["load_temporal_graph", "read_with_time", "saved_time", "temporal_graph_from_data",
           "temporal_table_graph"]


def temporal_graph_from_data(data, time_attr: str = "time", name: str = "Data") -> TypedGraph:
    """A one-type :class:`TypedGraph` (node type ``"node"``, relation ``("node", "to",
    "node")``) from a homogeneous PyG ``Data`` or a dict ``{"edge_index", "num_nodes", "x",
    "y", time_attr}`` (split masks such as ``train_mask`` and ``edge_weight`` come along);
    ``data[time_attr]`` is node time or edge time as PyG decides (``Data.is_edge_attr``; for a
    dict, its length: ``num_edges`` means edge time, and a graph with as many nodes as edges is
    refused as ambiguous)."""
    fields = dict(data) if isinstance(data, Mapping) else data.to_dict()
    get = fields.get
    ei = get("edge_index")
    if ei is None:
        raise GraphFormatError(f"{name} has no edge_index", "no graph can be built",
                               "give edge_index as a (2, E) array")
    ei = as_numpy(ei)
    n = get("num_nodes", None if isinstance(data, Mapping) else data.num_nodes)
    x = get("x")
    spec: dict = {"edge_index": {EDGE_TYPE: ei}}
    if n is None and x is None:
        n = int(ei.max()) + 1 if ei.size else 0
    spec["num_nodes"] = {NODE_TYPE: int(n if n is not None else as_numpy(x).shape[0])}
    if x is not None:
        spec["x"] = {NODE_TYPE: as_numpy(x)}
    if get("y") is not None:
        spec["y"] = {NODE_TYPE: as_numpy(get("y"))}
    names = {k for s, ks in MASK_KEYS.items() for k in (s, *ks)}
    masks = {k: v for k, v in fields.items() if k in names and v is not None}
    if masks:
        spec["masks"] = {NODE_TYPE: masks}
    if get("edge_weight") is not None:
        spec["edge_weight"] = {EDGE_TYPE: get("edge_weight")}
    t = get(time_attr)
    if t is not None:
        num_edges = ei.shape[1] if ei.ndim == 2 else -1
        if isinstance(data, Mapping):
            if spec["num_nodes"][NODE_TYPE] == num_edges:
                raise GraphFormatError(f"{name}: {time_attr!r} is ambiguous (as many nodes as "
                                       "edges)", "it could be node or edge time",
                                       "give the dict keys 'node_time' or 'edge_time' instead")
            is_edge = as_numpy(t).shape[0] == num_edges
        else:
            is_edge = bool(data.is_edge_attr(time_attr))
        spec["edge_time" if is_edge else "node_time"] = (
            {EDGE_TYPE: t} if is_edge else {NODE_TYPE: t})
    for k in ("edge_time", "node_time"):
        if isinstance(data, Mapping) and k in data:
            spec[k] = {EDGE_TYPE if k == "edge_time" else NODE_TYPE: data[k]}
    spec["time_attr"] = time_attr
    return typed_graph(spec, name)


def temporal_table_graph(path, time_column: str, name: str | None = None,
                         renumber: bool = False) -> TypedGraph:
    """The one-type temporal graph of a CSV / TSV / parquet edge table whose header names the
    edge time ``time_column`` (:func:`~.tables.read_table_times`; ids as in the file, nodes
    ``0 .. max id``); ``time_attr`` is the column's name.

    ``renumber``: sparse ids (hashed, as the ``auto`` rule of :mod:`.build` finds them) become
    their rank among the distinct ids, for a caller that never shows ids (a YAML job); typed
    parts keep no map back to the file's ids, so the API refuses such ids instead."""
    name = name or str(path)
    src, dst, t = read_table_times(path, time_column)
    top = int(max(src.max(), dst.max())) if src.size else -1
    ids = sorted_unique(np.concatenate([src, dst])) if renumber and src.size else None
    if ids is not None and should_renumber(top, ids.size):
        src, dst = np.searchsorted(ids, src), np.searchsorted(ids, dst)
        log.info("%s: %s sparse node ids renumbered 0..%s", name, f"{ids.size:,}", ids.size - 1)
        top = ids.size - 1
    check_id_bound(name, src, dst, renumber_fix="read it without time (time_attr=None; a "
                   "graph with time is renumbered in YAML jobs only)")
    return typed_graph({"num_nodes": {NODE_TYPE: top + 1},
                        "edge_index": {EDGE_TYPE: np.stack([src, dst])},
                        "edge_time": {EDGE_TYPE: t}, "time_attr": time_column}, name)


def load_temporal_graph(source, time_attr: str = "time", name: str | None = None) -> TypedGraph:
    """A :class:`TypedGraph` with time from a PyG ``HeteroData`` (``data[node_type][time_attr]``
    and/or ``data[edge_type][time_attr]``, as PyG's ``time_attr``), its ``to_dict()``, a
    homogeneous ``Data`` or its ``to_dict()`` (:func:`temporal_graph_from_data`), the plain dict
    form (keys ``edge_time`` / ``node_time``, see :func:`~mnmg_sampler.graph.typed.typed_graph`),
    the ``.pt`` file of any of these, or the path of a CSV / TSV / parquet edge table whose
    column ``time_attr`` holds edge times (:func:`temporal_table_graph`).

    A source without a time is a :class:`~mnmg_sampler.errors.GraphFormatError` naming
    ``time_attr``, never a graph without time (e.g. an OGB directory, which holds none)."""
    graph = read_with_time(source, time_attr, name)
    if graph.edge_time is None and graph.node_time is None:
        raise GraphFormatError(f"{graph.name} has no attribute {time_attr!r} on any node or "
                               "edge type", "no temporal sampling is possible",
                               f"set data[type].{time_attr} (or the dict keys edge_time / "
                               "node_time), or pass the right time_attr")
    return graph


def read_with_time(source, time_attr: str = "time", name: str | None = None) -> TypedGraph:
    """:func:`load_temporal_graph`'s graph, with the time it holds, or none: every node or edge
    attribute named ``time_attr`` is kept (a typed graph's partitioner and jobs read graphs
    this way, so a time on the data is never dropped)."""
    if isinstance(source, (str, PathLike)):
        suffix = str(source).lower()
        if suffix.endswith(TABLE_SUFFIXES):
            return temporal_table_graph(source, time_attr, name)
        if suffix.endswith((".pt", ".pth")):  # a saved HeteroData, Data or dict: read it
            name = name or str(source)
            source = load_torch_object(source)
    kind = type(source).__name__
    if kind == "Data" or (isinstance(source, Mapping) and "edge_index" in source
                          and not isinstance(source["edge_index"], Mapping)):
        graph = temporal_graph_from_data(source, time_attr, name or kind)
    else:
        graph = load_typed_graph(source, name)
        stores = _time_stores(source)
        if stores is not None:
            nodes, edges = stores
            et = {e: st[time_attr] for e, st in edges.items() if st.get(time_attr) is not None}
            nt = {t: st[time_attr] for t, st in nodes.items() if st.get(time_attr) is not None}
            attach_time(graph, et, nt, time_attr)
    return graph


def saved_time(path, time_attr: str = "time") -> bool:
    """True when the ``.pt`` at ``path`` (a ``HeteroData``, ``Data`` or a dict form) holds a
    node or edge attribute ``time_attr`` (or the plain dict form's ``edge_time``/``node_time``).
    The file is memory-mapped: nothing but its structure is read."""
    if not str(path).lower().endswith((".pt", ".pth")) or not Path(path).is_file():
        return False
    src = load_torch_object(path, mmap=True)
    if type(src).__name__ == "Data":
        return getattr(src, time_attr, None) is not None
    if not isinstance(src, Mapping) and type(src).__name__ != "HeteroData":
        return False
    stores = _time_stores(src)
    if stores is None:  # a dict with edge_index: homogeneous, or the plain typed dict form
        return any(src.get(k) is not None for k in (time_attr, "edge_time", "node_time"))
    return any(st.get(time_attr) is not None for group in stores for st in group.values())


def _time_stores(source) -> tuple[dict, dict] | None:
    """``({node type: attributes}, {edge type: attributes})`` of a ``HeteroData`` or its
    ``to_dict()``; ``None`` for other sources (the plain dict form carries its own times)."""
    if type(source).__name__ == "HeteroData":
        return ({t: dict(source[t].items()) for t in source.node_types},
                {e: dict(source[e].items()) for e in source.edge_types})
    if not isinstance(source, Mapping) or isinstance(source.get("edge_index"), Mapping):
        return None
    nodes = {str(k): v for k, v in source.items()
             if not isinstance(k, tuple) and k != "_global_store" and isinstance(v, Mapping)}
    edges = {edge_type_of(k, "dict"): v for k, v in source.items()
             if isinstance(k, tuple) and isinstance(v, Mapping)}
    return nodes, edges
