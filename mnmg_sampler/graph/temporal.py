"""Time in a typed graph: an int64 edge time per relation and/or a node time per node type.

With edge time, every (row, relation) segment of the :class:`~mnmg_sampler.graph.typed.TypedGraph`
is sorted by edge time when the graph is built (stable: ties keep ascending edge id order), so a
seed's admissible neighbors (time <= the seed's time) are a prefix of the segment found by binary
search. ``edge_ids`` move with their entries, so they still name the input's edges. With node time
only, segments are sorted the same way by the neighbor's node time, so the admissible neighbors
are again a prefix. With both, edge time orders the segments and decides admissibility; node
time then only gives each seed its default time. Without time nothing changes (no pass, no copy).

Times are int64 (e.g. Unix seconds). Integer arrays are taken as they are; a float array is
converted only when every value is integral and fits int64, and refused otherwise
(:class:`~mnmg_sampler.errors.GraphFormatError` naming the relation or node type).
"""

from __future__ import annotations

from collections.abc import Mapping
from os import PathLike

import numpy as np

from ..errors import GraphFormatError
from ..host_limits import check_allocation
from .typed import TypedGraph, _arr, edge_type_of, typed_graph

__all__ = ["attach_time", "check_time", "load_temporal_graph", "read_with_time",
           "temporal_graph_from_data", "temporal_table_graph"]

TIME_MAX = np.iinfo(np.int64).max


def check_time(values, n: int, what: str) -> np.ndarray:
    """``values`` as a contiguous int64 ``[n]`` array, or a ``GraphFormatError`` naming ``what``.

    Integers (and booleans: no) are taken; floats only when exactly integral and in int64 range.
    """
    a = _arr(values)
    if a.ndim == 2 and a.shape[1] == 1:
        a = a[:, 0]
    if a.ndim != 1 or a.shape[0] != n:
        raise GraphFormatError(f"{what} has shape {tuple(a.shape)}, expected ({n},)",
                               "every edge (node) needs exactly one time",
                               f"give {what} as {n} int64 values")
    if a.dtype.kind in "iu":
        if a.dtype == np.uint64 and a.size and int(a.max()) > TIME_MAX:
            raise GraphFormatError(f"{what} has values above int64's range",
                                   "times are stored as int64", "give int64 times")
        return np.ascontiguousarray(a, dtype=np.int64)
    if a.dtype.kind == "f":
        finite = np.isfinite(a).all()
        if finite and (a.size == 0 or (np.abs(a).max() < 2.0**63 and (a == np.round(a)).all())):
            return np.ascontiguousarray(a, dtype=np.int64)
        raise GraphFormatError(f"{what} is a {a.dtype} array with non-integral, NaN or "
                               "out-of-range values", "times are int64 and would be rounded",
                               f"give {what} as int64 (e.g. Unix seconds)")
    raise GraphFormatError(f"{what} has dtype {a.dtype}", "times are int64",
                           f"give {what} as int64 values (e.g. Unix seconds)")


def _segment_of_entries(indptr: np.ndarray) -> np.ndarray:
    return np.repeat(np.arange(indptr.size - 1, dtype=np.int64), np.diff(indptr))


def attach_time(graph: TypedGraph, edge_time: Mapping | None = None,
                node_time: Mapping | None = None, time_attr: str = "time") -> TypedGraph:
    """Store ``edge_time`` (``{edge type: [E_r]}``, in the relation's input edge order) and/or
    ``node_time`` (``{node type: [N_t]}``) in ``graph`` and sort its segments by time (module
    docstring). Relations or types without a time get none: with edge time, every relation needs
    one; with node time, every node type. Returns ``graph`` (modified in place)."""
    name = graph.name
    E = graph.num_edges
    if edge_time:
        per = {edge_type_of(k, name): v for k, v in dict(edge_time).items()}
        for et in per:
            if et not in graph.edge_types:
                raise GraphFormatError(f"{name}: edge_time names {et}, which has no edge_index",
                                       "the times belong to no edge",
                                       f"use one of {list(graph.edge_types)}")
        missing = [et for et in graph.edge_types if et not in per]
        if missing:
            raise GraphFormatError(f"{name}: edge_time has no times for {missing}",
                                   "their edges could not be filtered by time",
                                   "give a time for every relation (or use node time), or read "
                                   "the graph without time (time_attr=None)")
    if node_time:
        nt = {str(k): v for k, v in dict(node_time).items()}
        for t in nt:
            if t not in graph.node_types:
                raise GraphFormatError(f"{name}: node_time names unknown node type {t!r}",
                                       "the times belong to no node",
                                       f"use one of {list(graph.node_types)}")
        missing = [t for t in graph.node_types if t not in nt]
        if missing:
            raise GraphFormatError(f"{name}: node_time has no times for types {missing}",
                                   "their nodes could not be filtered by time",
                                   "give a time for every node type (or use edge time), or read "
                                   "the graph without time (time_attr=None)")
    if not edge_time and not node_time:
        return graph
    check_allocation(f"time sorting of {E:,} edges ({name})", 8 * 5 * E + 8 * graph.num_nodes,
                     "use a machine with more memory, or fewer edges")
    if node_time:
        graph.node_time = np.concatenate(
            [check_time(nt[t], graph.num_nodes_of(t), f"{name}: node_time[{t!r}]")
             for t in graph.node_types]) if graph.node_types else np.zeros(0, np.int64)
    if edge_time:
        # the time of every CSR entry: its relation's time at its edge id
        rel_of = _relation_of_entries(graph)
        entry_time = np.empty(E, np.int64)
        n_of = graph.num_edges_dict()
        for r, et in enumerate(graph.edge_types):
            sel = rel_of == r
            n_r = int(n_of[et])
            t_r = check_time(per[et], n_r, f"{name}: edge_time[{et}]")
            entry_time[sel] = t_r[graph.edge_ids[sel]]
        del rel_of
    else:
        entry_time = graph.node_time[graph.indices]
    seg = _segment_of_entries(graph.indptr)
    order = np.lexsort((entry_time, seg))  # stable: ties keep the current (edge id) order
    del seg
    graph.indices = graph.indices[order]
    graph.edge_ids = graph.edge_ids[order]
    if graph.weights is not None:
        graph.weights = graph.weights[order]
    if edge_time:
        graph.edge_time = entry_time[order]
    graph.time_attr = time_attr
    return graph


def _relation_of_entries(graph: TypedGraph) -> np.ndarray:
    """The relation of every CSR entry (segments of type t repeat its relations per node)."""
    S = graph.indptr.size - 1
    rel_of_seg = np.empty(S, np.int64)
    for t in range(len(graph.node_types)):
        lo, hi = int(graph.rel_offset[t]), int(graph.rel_offset[t + 1])
        n = int(graph.node_type_offset[t + 1] - graph.node_type_offset[t])
        b = int(graph.seg_base[t])
        rel_of_seg[b:b + n * (hi - lo)] = np.tile(np.arange(lo, hi, dtype=np.int64), n)
    return np.repeat(rel_of_seg, np.diff(graph.indptr))


NODE_TYPE = "node"
EDGE_TYPE = ("node", "to", "node")


def temporal_graph_from_data(data, time_attr: str = "time", name: str = "Data") -> TypedGraph:
    """A one-type :class:`TypedGraph` (node type ``"node"``, relation ``("node", "to",
    "node")``) from a homogeneous PyG ``Data`` or a dict ``{"edge_index", "num_nodes", "x",
    "y", time_attr}`` (split masks such as ``train_mask`` and ``edge_weight`` come along);
    ``data[time_attr]`` is node time or edge time as PyG decides (``Data.is_edge_attr``; for a
    dict, its length: ``num_edges`` means edge time, and a graph with as many nodes as edges is
    refused as ambiguous)."""
    from .readers import MASK_KEYS

    fields = dict(data) if isinstance(data, Mapping) else data.to_dict()
    get = fields.get
    ei = get("edge_index")
    if ei is None:
        raise GraphFormatError(f"{name} has no edge_index", "no graph can be built",
                               "give edge_index as a (2, E) array")
    ei = _arr(ei)
    n = get("num_nodes", None if isinstance(data, Mapping) else data.num_nodes)
    x = get("x")
    spec: dict = {"edge_index": {EDGE_TYPE: ei}}
    if n is None and x is None:
        n = int(ei.max()) + 1 if ei.size else 0
    spec["num_nodes"] = {NODE_TYPE: int(n if n is not None else _arr(x).shape[0])}
    if x is not None:
        spec["x"] = {NODE_TYPE: _arr(x)}
    if get("y") is not None:
        spec["y"] = {NODE_TYPE: _arr(get("y"))}
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
            is_edge = _arr(t).shape[0] == num_edges
        else:
            is_edge = bool(data.is_edge_attr(time_attr))
        spec["edge_time" if is_edge else "node_time"] = (
            {EDGE_TYPE: t} if is_edge else {NODE_TYPE: t})
    for k in ("edge_time", "node_time"):
        if isinstance(data, Mapping) and k in data:
            spec[k] = {EDGE_TYPE if k == "edge_time" else NODE_TYPE: data[k]}
    spec["time_attr"] = time_attr
    return typed_graph(spec, name)


def temporal_table_graph(path, time_column: str, name: str | None = None) -> TypedGraph:
    """The one-type temporal graph of a CSV / TSV / parquet edge table whose header names the
    edge time ``time_column`` (:func:`~.tables.read_table_times`; ids as in the file, nodes
    ``0 .. max id``); ``time_attr`` is the column's name."""
    from .build import check_id_bound
    from .tables import read_table_times

    name = name or str(path)
    src, dst, t = read_table_times(path, time_column)
    check_id_bound(name, src, dst)
    n = int(max(src.max(), dst.max())) + 1 if src.size else 0
    return typed_graph({"num_nodes": {NODE_TYPE: n},
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
    from .tables import TABLE_SUFFIXES
    from .typed_io import _hetero_safe_globals, load_typed_graph

    if isinstance(source, (str, PathLike)):
        suffix = str(source).lower()
        if suffix.endswith(TABLE_SUFFIXES):
            return temporal_table_graph(source, time_attr, name)
        if suffix.endswith((".pt", ".pth")):  # a saved HeteroData, Data or dict: read it
            from .torch_files import load_torch_object

            name = name or str(source)
            source = load_torch_object(source, _hetero_safe_globals())
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
