"""Typed (heterogeneous) graphs: every node type and relation in one CSR (GraphBolt's fused CSC).

Node ids of all types share one *internal* space (per-type id ``i`` of type ``t`` is internal id
``node_type_offset[t] + i``; types sorted by name). Relations ``(src, rel, dst)`` are sorted by
destination type, then source type and name, so those a node of type ``t`` samples from are
contiguous. Rows are destination nodes, cut into one *segment* per relation of the row's type:
node ``i`` of type ``t`` and its ``j``-th relation own segment ``seg_base[t] + i * R_t + j`` (two
reads, no search). Segments keep ascending edge id order, so a homogeneous graph is the one-type,
one-relation case with :class:`~mnmg_sampler.graph.csr.CSRGraph`'s very ``indptr``, ``indices``
and ``edge_ids`` (docs/hetero.md#the-layout-and-the-kernel).

Time (:func:`attach_time`): an int64 time per edge and/or node. Each segment is sorted (stably,
``edge_ids`` moving with their entries) by edge time, else by the neighbor's node time, so a
seed's admissible neighbors (time <= its own) are a prefix found by binary search; node time
also gives each seed its default time. Without time nothing is sorted or copied.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from ..errors import GraphFormatError, SamplingInputError
from ..system.host_limits import check_allocation
from .csr import check_weights, entry_rows
from .readers import MASK_KEYS, as_mask, as_numpy

__all__ = ["EDGE_TYPE", "NODE_TYPE", "TIME_MAX", "EdgeType", "TypedGraph", "TypedLayout",
           "attach_time", "check_time", "edge_type_of", "typed_graph", "typed_layout"]

EdgeType = tuple[str, str, str]
NODE_TYPE, EDGE_TYPE = "node", ("node", "to", "node")
"""The names of a homogeneous graph's one node type and one relation."""


def edge_type_of(key, name: str = "graph") -> EdgeType:
    """An edge type from a ``(src, rel, dst)`` tuple or a ``"src__rel__dst"`` string (PyG's
    ``EdgeTypeStr``, also the key form a ``.pt`` of ``to_dict()`` or a YAML file can hold)."""
    if isinstance(key, str):
        parts = key.split("__")
    elif isinstance(key, (tuple, list)):
        parts = list(key)
    else:
        parts = []
    if len(parts) != 3 or not all(isinstance(p, str) and p for p in parts):
        raise GraphFormatError(f"{name}: {key!r} is not an edge type",
                               "relations are named (src type, relation, dst type)",
                               "use a tuple ('author', 'writes', 'paper') or "
                               "'author__writes__paper'")
    return (parts[0], parts[1], parts[2])


@dataclass
class TypedGraph:
    """A typed graph ready to sample from (layout in the module docstring).

    Attributes:
        node_types: type names, sorted.
        edge_types: relations ``(src, rel, dst)``, sorted by (dst, src, rel).
        node_type_offset: int64 ``[T + 1]``: first internal id of each type, then the total.
        rel_offset: int64 ``[T + 1]``: first relation ending at each type, then ``R``.
        seg_base: int64 ``[T]``: first segment of type ``t``.
        indptr: int64 ``[S + 1]`` segment offsets, ``S = sum_t N_t * R_t``.
        indices: int64 ``[E]`` neighbor internal ids.
        edge_ids: int64 ``[E]`` per-relation edge id (the column of the entry in that
            relation's ``edge_index``, PyG's ``e_id``).
        rel_src, rel_dst: int64 ``[R]`` source and destination type of each relation.
        weights: float32 ``[E]`` or ``None``; only read for relations with ``weighted[r]``.
        weighted: uint8 ``[R]``: 1 where the relation has edge weights.
        x, y: per-type features (own width and dtype) and labels, where given.
        masks: per-type boolean split masks (``train``, ``val``, ``test``).
        edge_time: int64 ``[E]`` time of every CSR entry, or ``None``; node_time: int64 ``[N]``
            per internal id, or ``None``; time_attr: their name (``docs/temporal.md``).
    """

    node_types: tuple[str, ...]
    edge_types: tuple[EdgeType, ...]
    node_type_offset: np.ndarray
    rel_offset: np.ndarray
    seg_base: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray
    edge_ids: np.ndarray
    rel_src: np.ndarray
    rel_dst: np.ndarray
    weights: np.ndarray | None = None
    weighted: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint8))
    x: dict[str, np.ndarray] = field(default_factory=dict)
    y: dict[str, np.ndarray] = field(default_factory=dict)
    masks: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    name: str = "graph"
    edge_time: np.ndarray | None = None
    node_time: np.ndarray | None = None
    time_attr: str | None = None

    @classmethod
    def from_csr(cls, g, weights=None) -> TypedGraph:
        """A :class:`~.csr.CSRGraph` as the one-type, one-relation graph (:data:`NODE_TYPE`,
        :data:`EDGE_TYPE`): the same ``indptr``, ``indices`` and ``edge_ids`` (not copied), its
        node data under the one type; ``weights`` (one per CSR entry) are validated."""
        w = None if weights is None else check_weights(weights, g.num_edges,
                                                       f"edge weights of '{g.name}'")
        zero = np.zeros(1, np.int64)
        return cls((NODE_TYPE,), (EDGE_TYPE,), np.array([0, g.num_nodes], np.int64),
                   np.array([0, 1], np.int64), zero, g.indptr, g.indices, g.edge_ids, zero, zero,
                   w, np.array([w is not None], np.uint8),
                   {} if g.x is None else {NODE_TYPE: g.x},
                   {} if g.y is None else {NODE_TYPE: g.y},
                   {NODE_TYPE: dict(g.masks)} if g.masks else {}, g.name)

    @property
    def num_nodes(self) -> int:
        """Nodes of all types."""
        return int(self.node_type_offset[-1])

    @property
    def num_edges(self) -> int:
        """Edges of all relations."""
        return int(self.indices.shape[0])

    def num_nodes_of(self, node_type: str) -> int:
        t = self.type_index(node_type)
        return int(self.node_type_offset[t + 1] - self.node_type_offset[t])

    def num_nodes_dict(self) -> dict[str, int]:
        return {t: self.num_nodes_of(t) for t in self.node_types}

    def num_edges_dict(self) -> dict[EdgeType, int]:
        """Edges per relation (counted from the segments, so it is what the sampler sees)."""
        seg = np.diff(self.indptr)
        out = {}
        for t in range(len(self.node_types)):
            lo, hi = int(self.rel_offset[t]), int(self.rel_offset[t + 1])
            if hi == lo:
                continue
            n = int(self.node_type_offset[t + 1] - self.node_type_offset[t])
            per = seg[self.seg_base[t]:self.seg_base[t] + n * (hi - lo)].reshape(n, hi - lo)
            for j, c in enumerate(per.sum(axis=0)):
                out[self.edge_types[lo + j]] = int(c)
        return {et: out.get(et, 0) for et in self.edge_types}

    def type_index(self, node_type: str) -> int:
        try:
            return self.node_types.index(node_type)
        except ValueError:
            raise SamplingInputError(f"node type {node_type!r} is not in graph '{self.name}'",
                                     "no node of it can be sampled",
                                     f"use one of {list(self.node_types)}") from None

    def relation_index(self, edge_type) -> int:
        et = edge_type_of(edge_type, self.name)
        try:
            return self.edge_types.index(et)
        except ValueError:
            raise SamplingInputError(f"edge type {et} is not in graph '{self.name}'",
                                     "no neighbor can be sampled along it",
                                     f"use one of {list(self.edge_types)}") from None

    def to_internal(self, node_type: str, ids: np.ndarray) -> np.ndarray:
        """Internal ids of per-type ``ids`` of ``node_type`` (range-checked)."""
        t = self.type_index(node_type)
        ids = np.ascontiguousarray(ids, dtype=np.int64).ravel()
        n = self.num_nodes_of(node_type)
        if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= n):
            bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
            raise SamplingInputError(
                f"{node_type} id {bad} is out of range for graph '{self.name}' with {n} "
                f"{node_type} nodes", "no neighbors can be sampled for it",
                f"pass {node_type} ids in [0, {n})")
        return ids + self.node_type_offset[t]

    def type_of(self, internal: np.ndarray) -> np.ndarray:
        """The type index of every internal id."""
        return np.searchsorted(self.node_type_offset, internal, side="right") - 1

    def metadata(self) -> tuple[list[str], list[EdgeType]]:
        """``(node_types, edge_types)`` as PyG's ``HeteroData.metadata()`` gives them."""
        return list(self.node_types), list(self.edge_types)


def _edge_pair(arr: np.ndarray, name: str, et: EdgeType) -> tuple[np.ndarray, np.ndarray]:
    if arr.ndim != 2 or arr.shape[0] != 2 or arr.dtype.kind not in "iu":
        raise GraphFormatError(
            f"{name}: edge_index of {et} is a {arr.dtype} array of shape {tuple(arr.shape)}",
            "an edge_index must be an integer array of shape (2, E): row 0 sources (type "
            f"{et[0]!r}), row 1 targets (type {et[2]!r})",
            f"give edge_index[{et}] as a (2, E) int64 array")
    arr = arr.astype(np.int64, copy=False)
    return np.ascontiguousarray(arr[0]), np.ascontiguousarray(arr[1])


def _check_range(name: str, et: EdgeType, which: str, ids: np.ndarray, n: int) -> None:
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= n):
        bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
        t = et[0] if which == "source" else et[2]
        raise GraphFormatError(
            f"{name}: {et} has {which} id {bad}, outside the {n} nodes of type {t!r}",
            "the edge cannot be placed", f"give {t!r} ids in [0, {n}) or a larger node count")


def _node_counts(spec: Mapping, name: str) -> dict[str, int]:
    counts = {str(k): v for k, v in dict(spec.get("num_nodes") or {}).items()}
    for t, x in dict(spec.get("x") or {}).items():
        counts.setdefault(str(t), int(as_numpy(x).shape[0]))
    out = {}
    for t, n in counts.items():
        try:
            ok = int(n) == n and int(n) >= 0
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise GraphFormatError(f"{name}: node count of {t!r} is {n!r}",
                                   "a node type needs a count >= 0",
                                   f"give num_nodes[{t!r}] as an integer")
        out[t] = int(n)
    return out


def _node_data(spec: Mapping, name: str, counts: dict[str, int]):
    xs, ys, masks = {}, {}, {}
    for key, out in (("x", xs), ("y", ys)):
        for t, v in dict(spec.get(key) or {}).items():
            t = str(t)
            if t not in counts:
                raise GraphFormatError(f"{name}: {key}[{t!r}] names an unknown node type",
                                       "its rows belong to no node",
                                       f"use one of {sorted(counts)} or add num_nodes[{t!r}]")
            a = as_numpy(v)
            if key == "y":
                if a.ndim == 2 and a.shape[1] == 1:
                    a = a[:, 0]
                if a.dtype.kind in "iub":
                    a = a.astype(np.int64, copy=False)
            if a.ndim < 1 or a.shape[0] != counts[t]:
                raise GraphFormatError(
                    f"{name}: {key}[{t!r}] has shape {tuple(a.shape)} but type {t!r} has "
                    f"{counts[t]} nodes", f"'{key}' needs one row per node",
                    f"give {key}[{t!r}] with {counts[t]} rows")
            out[t] = a
    for t, m in dict(spec.get("masks") or {}).items():
        t = str(t)
        if t not in counts:
            raise GraphFormatError(f"{name}: masks[{t!r}] names an unknown node type",
                                   "the split cannot be built", f"use one of {sorted(counts)}")
        got = {}
        for split, keys in MASK_KEYS.items():
            k = next((k for k in (split, *keys) if k in m), None)
            if k is not None:
                got[split] = as_mask(as_numpy(m[k]), counts[t], f"{name}: masks[{t!r}][{k!r}]")
        unknown = set(m) - {k for s, ks in MASK_KEYS.items() for k in (s, *ks)}
        if unknown:
            raise GraphFormatError(f"{name}: masks[{t!r}] has unknown splits {sorted(unknown)}",
                                   "they would be dropped", "use train, val and test")
        masks[t] = got
    return xs, ys, masks


def _cat(arrays: list[np.ndarray], dtype) -> np.ndarray:
    return np.concatenate(arrays) if arrays else np.zeros(0, dtype)


class TypedLayout(NamedTuple):
    """Where types, relations and segments go (the module docstring), from counts alone."""

    node_types: tuple[str, ...]
    edge_types: tuple[EdgeType, ...]
    node_type_offset: np.ndarray
    rel_offset: np.ndarray
    seg_base: np.ndarray
    rel_src: np.ndarray
    rel_dst: np.ndarray


def typed_layout(counts: Mapping[str, int], edge_types) -> TypedLayout:
    """The layout of a typed graph with ``counts`` nodes per type and relations ``edge_types``
    (any order): what :func:`typed_graph` builds, and what a rank that reads only a slice of
    each relation needs to place its edges."""
    node_types = tuple(sorted(counts))
    tix = {t: i for i, t in enumerate(node_types)}
    T = len(node_types)
    ets = tuple(sorted(edge_types, key=lambda e: (tix[e[2]], tix[e[0]], e[1])))
    off = np.zeros(T + 1, np.int64)
    np.cumsum([counts[t] for t in node_types], out=off[1:])
    rel_dst = np.array([tix[e[2]] for e in ets], np.int64)
    rel_src = np.array([tix[e[0]] for e in ets], np.int64)
    rel_offset = np.zeros(T + 1, np.int64)
    np.cumsum(np.bincount(rel_dst, minlength=T), out=rel_offset[1:])
    seg_base = np.zeros(T, np.int64)
    np.cumsum((np.diff(off) * np.diff(rel_offset))[:-1], out=seg_base[1:])
    return TypedLayout(node_types, ets, off, rel_offset, seg_base, rel_src, rel_dst)


def typed_graph(spec: Mapping, name: str = "graph") -> TypedGraph:
    """Build a :class:`TypedGraph` from the plain dict form.

    ``spec`` holds ``num_nodes`` (``{type: count}``; a type with ``x`` may omit it),
    ``edge_index`` (``{(src, rel, dst): (2, E) ints}``, per-type ids), and optionally ``x`` /
    ``y``, ``masks``, ``edge_weight`` (docs/hetero.md#inputs) and ``edge_time`` /
    ``node_time`` (int64 per relation / node type, named ``time_attr``, default ``"time"``).
    Edge types may be ``"src__rel__dst"`` strings. Bad input raises
    :class:`~mnmg_sampler.errors.GraphFormatError` naming the type or relation.
    """
    if not isinstance(spec, Mapping) or "edge_index" not in spec:
        raise GraphFormatError(f"{name} has no 'edge_index'", "no typed graph can be built",
                               "give {'num_nodes': {...}, 'edge_index': {(src, rel, dst): "
                               "(2, E) array}}")
    counts = _node_counts(spec, name)
    edges: dict[EdgeType, tuple[np.ndarray, np.ndarray]] = {}
    for key, ei in dict(spec["edge_index"]).items():
        et = edge_type_of(key, name)
        if et in edges:
            raise GraphFormatError(f"{name}: edge type {et} is given twice", "", "give it once")
        for t in (et[0], et[2]):
            if t not in counts:
                raise GraphFormatError(
                    f"{name}: relation {et} names node type {t!r}, which has no node count",
                    "its node ids cannot be placed",
                    f"add num_nodes[{t!r}] (or x[{t!r}]); known types: {sorted(counts)}")
        src, dst = _edge_pair(as_numpy(ei), name, et)
        _check_range(name, et, "source", src, counts[et[0]])
        _check_range(name, et, "destination", dst, counts[et[2]])
        edges[et] = (src, dst)
    weights_in = {edge_type_of(k, name): v for k, v in dict(spec.get("edge_weight") or {}).items()}
    for et in weights_in:
        if et not in edges:
            raise GraphFormatError(f"{name}: edge_weight names {et}, which has no edge_index",
                                   "the weights belong to no edge", f"use one of {sorted(edges)}")
    x, y, masks = _node_data(spec, name, counts)

    lay = typed_layout(counts, edges)
    node_types, edge_types, off = lay.node_types, lay.edge_types, lay.node_type_offset
    rel_offset, seg_base, rel_src, rel_dst = lay.rel_offset, lay.seg_base, lay.rel_src, lay.rel_dst
    tix = {t: i for i, t in enumerate(node_types)}
    R = len(edge_types)
    per_type = np.diff(rel_offset)
    S = int((np.diff(off) * per_type).sum())
    E = sum(int(s.shape[0]) for s, _ in edges.values())
    check_allocation(f"a typed CSR of {E:,} edges and {S:,} (node, relation) segments "
                     f"({name})", 8 * (6 * E + 2 * S),
                     "use a machine with more memory, or fewer edges")

    segs, srcs, eids, ws = [], [], [], []
    weighted = np.zeros(R, np.uint8)
    for r, et in enumerate(edge_types):
        src, dst = edges[et]
        td = tix[et[2]]
        segs.append(seg_base[td] + dst * per_type[td] + (r - rel_offset[td]))
        srcs.append(src + off[tix[et[0]]])
        eids.append(np.arange(src.shape[0], dtype=np.int64))
        if et in weights_in:
            weighted[r] = 1
            ws.append(check_weights(as_numpy(weights_in[et]), src.shape[0],
                                    f"{name}: edge_weight of {et}"))
        else:
            ws.append(np.ones(src.shape[0], np.float32))
    seg = np.concatenate(segs) if segs else np.zeros(0, np.int64)
    order = np.argsort(seg, kind="stable")  # stable: edge-id order within each segment
    indptr = np.zeros(S + 1, np.int64)
    np.cumsum(np.bincount(seg, minlength=S), out=indptr[1:])
    del seg
    indices = _cat(srcs, np.int64)[order]
    edge_ids = _cat(eids, np.int64)[order]
    weights = _cat(ws, np.float32)[order] if weighted.any() else None
    graph = TypedGraph(node_types, edge_types, off, rel_offset, seg_base, indptr, indices,
                       edge_ids, rel_src, rel_dst, weights, weighted, x, y, masks, name)
    if spec.get("edge_time") or spec.get("node_time"):
        attach_time(graph, spec.get("edge_time"), spec.get("node_time"),
                    str(spec.get("time_attr") or "time"))
    return graph


TIME_MAX = np.iinfo(np.int64).max


def check_time(values, n: int, what: str) -> np.ndarray:
    """``values`` as a contiguous int64 ``[n]`` array, or a ``GraphFormatError`` naming ``what``.

    Integers (and booleans: no) are taken; floats only when exactly integral and in int64 range.
    """
    a = as_numpy(values)
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
    seg = entry_rows(graph.indptr)
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
