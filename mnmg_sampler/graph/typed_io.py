"""Typed graphs in: a PyG ``HeteroData``, a saved one (``.pt``, or its ``to_dict()``), the plain
dict form, and OGB's heterogeneous raw directory layout (as ogbn-mag's)::

    raw/num-node-dict.csv.gz                        header of type names, one row of counts
    raw/relations/<src>___<rel>___<dst>/edge.csv.gz one "src,dst" row per edge (per-type ids)
                                                    (or edge.csv, or edge.npy (E, 2) / (2, E))
    raw/relations/<...>/num-edge-list.csv.gz        the relation's edge count (optional, checked)
    raw/node-feat/<type>/node-feat.csv.gz           float features of that type (optional)
    raw/node-label/<type>/node-label.csv.gz         labels of that type (optional; NaN -> -1)
    split/<name>/<type>/{train,valid,test}.csv.gz   per-type split ids (optional; first name)

Every form becomes the dict of :func:`~mnmg_sampler.graph.typed.typed_graph`, which checks it.
Of a ``HeteroData`` the sampler reads ``num_nodes``, ``x``, ``y`` and split masks per node type
and ``edge_index`` and ``edge_weight`` per edge type; other attributes are not read.
"""

from __future__ import annotations

import gzip
import io
from collections.abc import Mapping
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path

import numpy as np

from ..errors import GraphFormatError
from .csr import check_weights
from .formats import is_ogb_hetero_dir
from .names import parse_dataset_name
from .ogb import _find, _table, _unreadable, parse_table
from .readers import MASK_KEYS, as_numpy, edge_index_pair, text_bytes
from .sources import edge_array
from .torch_files import load_torch_object
from .typed import (
    EdgeType,
    TypedGraph,
    _check_range,
    _edge_pair,
    _node_counts,
    _node_data,
    edge_type_of,
    typed_graph,
)
from .typed_generate import typed_sbm_graph, typed_useritem_graph

__all__ = ["HeteroShare", "is_ogb_hetero_dir", "load_typed_graph", "read_ogb_hetero_dir",
           "read_ogb_hetero_share", "read_typed_torch_share", "sliceable_typed_input",
           "typed_graph_at"]

_MASK_NAMES = {k for s, ks in MASK_KEYS.items() for k in (s, *ks)}


def _spec_from_stores(nodes: Mapping, edges: Mapping, name: str) -> dict:
    """The dict form from per-type attribute mappings (a HeteroData's stores or to_dict())."""
    spec: dict = {"num_nodes": {}, "edge_index": {}, "x": {}, "y": {}, "masks": {},
                  "edge_weight": {}}
    for t, st in nodes.items():
        if st.get("num_nodes") is not None:
            spec["num_nodes"][t] = int(st["num_nodes"])
        for k in ("x", "y"):
            if st.get(k) is not None:
                spec[k][t] = st[k]
        m = {k: v for k, v in st.items() if k in _MASK_NAMES and v is not None}
        if m:
            spec["masks"][t] = m
    for et, st in edges.items():
        if st.get("edge_index") is None:
            raise GraphFormatError(f"{name}: edge type {et} has no edge_index",
                                   "its edges cannot be read", "give it a (2, E) edge_index")
        spec["edge_index"][et] = st["edge_index"]
        if st.get("edge_weight") is not None:
            spec["edge_weight"][et] = st["edge_weight"]
    return spec


def _spec_of(obj, name: str) -> dict:
    """The plain dict form of a ``HeteroData``, its ``to_dict()`` or the dict form itself
    (arrays are not copied: a memory-mapped file stays mapped)."""
    if type(obj).__name__ == "HeteroData":
        nodes = {}
        for t in obj.node_types:
            nodes[t] = dict(obj[t].items())
            nodes[t]["num_nodes"] = obj[t].num_nodes
        return _spec_from_stores(nodes, {et: dict(obj[et].items()) for et in obj.edge_types},
                                 name)
    if isinstance(obj.get("edge_index"), Mapping):  # the plain dict form
        return obj
    nodes, edges = {}, {}
    for k, v in obj.items():
        if k == "_global_store":
            continue
        if not isinstance(v, Mapping):
            raise GraphFormatError(f"{name}: entry {k!r} is a {type(v).__name__}",
                                   "a HeteroData.to_dict() maps types to attribute dicts",
                                   "save data.to_dict() of a HeteroData, or the plain dict form "
                                   "(docs/hetero.md)")
        if isinstance(k, tuple):
            edges[edge_type_of(k, name)] = v
        else:
            nodes[str(k)] = v
    return _spec_from_stores(nodes, edges, name)


def _node_count_dict(f: Path) -> dict[str, int]:
    try:
        raw = gzip.open(f, "rb").read() if f.name.endswith(".gz") else f.read_bytes()
        lines = [ln for ln in raw.decode().splitlines() if ln.strip()]
        names = [s.strip() for s in lines[0].split(",")]
        counts = np.loadtxt(io.StringIO(lines[1]), dtype=np.int64, delimiter=",", ndmin=1)
    except (OSError, EOFError, ValueError, IndexError, UnicodeDecodeError) as e:
        raise GraphFormatError(f"{f} cannot be read as a node-count table: {e}",
                               "the node types are unknown",
                               "write a header of type names and one row of counts") from e
    if len(names) != counts.shape[0]:
        raise GraphFormatError(f"{f}: {len(names)} type names but {counts.shape[0]} counts",
                               "the node types are unknown", "give one count per type")
    return {n: int(c) for n, c in zip(names, counts, strict=True)}


@dataclass
class HeteroShare:
    """What rank ``r`` of ``W`` reads of a typed input (every id range-checked).

    ``edges[et]`` is ``(first, total, src, dst)``: the relation's edges ``[first, first + k)``
    of ``total`` (per-type ids; the edge id is the row), the ``r``-th of ``W`` even slices, and
    ``weights[et]`` their float32 weights where the relation has some; ``x``/``y`` are
    ``{type: (first, rows)}``, sliced the same way, as are the bool ``mask_rows``; ``masks`` are
    whole split id lists (an OGB split is a small part of a type)."""

    name: str
    num_nodes: dict[str, int]
    edges: dict[EdgeType, tuple[int, int, np.ndarray, np.ndarray]] = field(default_factory=dict)
    x: dict[str, tuple[int, np.ndarray]] = field(default_factory=dict)
    y: dict[str, tuple[int, np.ndarray]] = field(default_factory=dict)
    masks: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    mask_rows: dict[str, dict[str, tuple[int, np.ndarray]]] = field(default_factory=dict)
    weights: dict[EdgeType, np.ndarray] = field(default_factory=dict)

    def count(self, t: str, what: str) -> int:
        """The node count of type ``t``, which ``what`` names."""
        if t not in self.num_nodes:
            raise GraphFormatError(f"{self.name}: {what} names node type {t!r}, which has no "
                                   "node count", "its ids or rows cannot be placed",
                                   f"use one of {sorted(self.num_nodes)}, or count {t!r}")
        return self.num_nodes[t]

    def add(self, et: EdgeType, first: int, total: int, src, dst) -> None:
        """Relation ``et``'s slice, its ids range-checked."""
        if et in self.edges:
            raise GraphFormatError(f"{self.name}: edge type {et} is given twice", "",
                                   "give it once")
        _check_range(self.name, et, "source", src, self.count(et[0], f"relation {et}"))
        _check_range(self.name, et, "destination", dst, self.count(et[2], f"relation {et}"))
        self.edges[et] = (first, total, src, dst)


_BLOCK = 1 << 24


def _lines(path: Path):
    """The bytes of ``path`` (gzip or plain) in blocks, BOM stripped."""
    with (gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")) as f:
        block = f.read(_BLOCK)
        yield text_bytes(block, str(path))
        while block := f.read(_BLOCK):
            yield block


def _count_rows(path: Path) -> int:
    """Lines of ``path`` (a last line without a newline counts)."""
    n, last = 0, b"\n"
    try:
        for block in _lines(path):
            if block:
                n, last = n + block.count(b"\n"), block[-1:]
    except (OSError, EOFError) as e:
        raise _unreadable(path, "rows", e) from e
    return n + (last != b"\n")


def _rows(path: Path, lo: int, hi: int, total: int, dtype, what: str, says: str) -> np.ndarray:
    """Rows ``[lo, hi)`` of ``total`` of a headerless CSV (gzip or plain), streamed: memory is
    the slice, not the file. The slice that ends the table reads to its end, so a table with
    more or fewer rows than ``total`` is refused by some rank."""
    if hi == lo < total:
        return np.zeros((0, 1), dtype)
    got, seen, at = [], 0, 0 if lo == 0 else None  # seen: newlines before the block
    try:
        for block in _lines(path):
            nl = np.flatnonzero(np.frombuffer(block, np.uint8) == 10)
            if at is None and seen + nl.size >= lo:
                at = int(nl[lo - seen - 1]) + 1
            if at is not None:
                if hi < total and seen + nl.size >= hi:
                    got.append(block[at:int(nl[hi - seen - 1]) + 1])
                    break
                got.append(block[at:])
                at = 0
            seen += nl.size
    except (OSError, EOFError) as e:
        raise _unreadable(path, what, e) from e
    a = parse_table(b"".join(got), path, dtype, what)
    if a.shape[0] != hi - lo:
        raise GraphFormatError(f"{path} does not have the {total} rows {says}",
                               "the table is incomplete or has extra rows",
                               "unpack the dataset again")
    return a


def _edge_file(d: Path) -> Path:
    f = d / "edge.npy"
    if f.is_file():
        return f
    f = _find(d, "edge")
    if f is None:
        raise GraphFormatError(f"{d} has no edge.csv.gz (nor edge.csv or edge.npy)",
                               "the relation has no edges", "unpack the dataset again")
    return f


def _relation_edges(d: Path, rank: int, world: int):
    """``(first, total, src, dst)`` of rank ``rank``'s slice of relation directory ``d``."""
    ef = _edge_file(d)
    cf = _find(d, "num-edge-list")
    declared = None if cf is None else int(_table(cf, np.int64, "edge counts").sum())
    if ef.suffix == ".npy":
        a = edge_array(ef)
        total = a.shape[1]
        if declared not in (None, total):
            raise GraphFormatError(f"{cf} says {declared} edges but {ef} has {total}",
                                   "the relation is incomplete", "unpack the dataset again")
        lo, hi = total * rank // world, total * (rank + 1) // world
        src, dst = edge_index_pair(np.asarray(a[:, lo:hi]), str(ef))
    else:
        total = _count_rows(ef) if declared is None else declared
        lo, hi = total * rank // world, total * (rank + 1) // world
        e = _rows(ef, lo, hi, total, np.int64, "edges",
                  "it has" if cf is None else f"{cf.name} says")
        if e.size and e.shape[1] != 2:
            raise GraphFormatError(f"{ef}: {e.shape[1]} columns", "edges need 2",
                                   "write one 'src,dst' row per edge")
        src, dst = (np.ascontiguousarray(c) for c in e.reshape(-1, 2).T)
    return lo, total, src, dst


def read_ogb_hetero_share(path: str | PathLike, rank: int = 0, world: int = 1) -> HeteroShare:
    """Rank ``rank``'s share of an OGB heterogeneous directory (layout in the module docstring;
    a relation's edges may also be one ``edge.npy`` of shape ``(E, 2)`` or ``(2, E)``).
    Pure I/O; bad input raises :class:`GraphFormatError` on the rank that reads it."""
    root = Path(path)
    name = str(root)
    raw = root / "raw"
    nfile = _find(raw, "num-node-dict")
    if nfile is None:
        raise GraphFormatError(f"{name} has no raw/num-node-dict.csv.gz",
                               "it is not an OGB heterogeneous directory",
                               "point at the dataset root, the directory that holds raw/")
    sh = HeteroShare(name, _node_count_dict(nfile))
    rel_root = raw / "relations"
    for d in sorted(d for d in rel_root.iterdir() if d.is_dir()) if rel_root.is_dir() else []:
        et = tuple(d.name.split("___"))
        if len(et) != 3:
            raise GraphFormatError(f"{d} is not named <src>___<rel>___<dst>",
                                   "its relation is unknown", "rename it as OGB does")
        sh.add(et, *_relation_edges(d, rank, world))
    for sub, key in (("node-feat", "x"), ("node-label", "y")):
        base = raw / sub
        for d in (sorted(p for p in base.iterdir() if p.is_dir()) if base.is_dir() else []):
            f = _find(d, sub)
            if f is None:
                continue
            n = sh.count(d.name, str(f))
            lo, hi = n * rank // world, n * (rank + 1) // world
            says = f"type {d.name!r} has in raw/num-node-dict"
            if key == "x":
                sh.x[d.name] = (lo, _rows(f, lo, hi, n, np.float32, "features", says))
            else:
                lab = _rows(f, lo, hi, n, np.float64, "labels", says)[:, 0]
                sh.y[d.name] = (lo, np.where(np.isnan(lab), -1, lab).astype(np.int64))
    split_root = root / "split"
    splits = sorted(d for d in split_root.iterdir() if d.is_dir()) if split_root.is_dir() else []
    for d in (sorted(p for p in splits[0].iterdir() if p.is_dir()) if splits else []):
        m = {}
        for split, stem in (("train", "train"), ("val", "valid"), ("test", "test")):
            f = _find(d, stem)
            if f is None:
                continue
            m[split] = _table(f, np.int64, "node ids")[:, 0]
            _check_ids(m[split], sh.count(d.name, str(f)), str(f))
        if m:
            sh.masks[d.name] = m
    return sh


def read_typed_torch_share(path: str | PathLike, rank: int = 0, world: int = 1) -> HeteroShare:
    """Rank ``rank``'s share of a ``.pt`` typed graph (as :func:`load_typed_graph` reads it),
    memory-mapped (``load_torch_object(mmap=True)``): only the rank's slices are read. Node data and
    split masks are checked as :func:`~.typed.typed_graph` checks them (a split given as ids
    becomes a mask of the type's nodes on every rank)."""
    name = str(path)
    obj = load_torch_object(path, mmap=True)
    if not _is_typed_object(obj):
        raise GraphFormatError(f"{name} holds a {type(obj).__name__} that is not a typed graph",
                               "it has no node types or relations to partition",
                               "partition it without torchrun, or save a HeteroData")
    spec = _spec_of(obj, name)
    sh = HeteroShare(name, _node_counts(spec, name))
    cut = {t: (n * rank // world, n * (rank + 1) // world) for t, n in sh.num_nodes.items()}
    weights = {edge_type_of(k, name): v for k, v in dict(spec.get("edge_weight") or {}).items()}
    for key, ei in dict(spec["edge_index"]).items():
        et = edge_type_of(key, name)
        a = as_numpy(ei)
        total = a.shape[1] if a.ndim == 2 else 0
        lo, hi = total * rank // world, total * (rank + 1) // world
        sh.add(et, lo, total,
               *_edge_pair(a[:, lo:hi] if a.ndim == 2 and a.shape[0] == 2 else a, name, et))
        if et in weights:
            w, what = as_numpy(weights.pop(et)), f"{name}: edge_weight of {et}"
            if w.shape != (total,):
                check_weights(w, total, what)  # raises, naming the shape
            sh.weights[et] = check_weights(w[lo:hi], hi - lo, what)
    if weights:
        raise GraphFormatError(f"{name}: edge_weight names {next(iter(weights))}, which has no "
                               "edge_index", "the weights belong to no edge",
                               f"use one of {sorted(sh.edges)}")
    xs, ys, masks = _node_data(spec, name, sh.num_nodes)  # views of the mapped file
    for src_, dst_ in ((xs, sh.x), (ys, sh.y)):
        for t, a in src_.items():
            dst_[t] = (cut[t][0], np.ascontiguousarray(a[slice(*cut[t])]))
    for t, m in masks.items():
        sh.mask_rows[t] = {k: (cut[t][0], np.ascontiguousarray(v[slice(*cut[t])]))
                           for k, v in m.items()}
    return sh


def sliceable_typed_input(path: str | PathLike) -> bool:
    """True for what :func:`read_ogb_hetero_share` or :func:`read_typed_torch_share` reads: an
    OGB hetero directory, or a ``.pt`` holding a typed graph (mapped, not read)."""
    p = Path(path)
    if is_ogb_hetero_dir(p):
        return True
    try:
        return p.suffix in (".pt", ".pth") and p.is_file() and _is_typed_object(
            load_torch_object(p, mmap=True))
    except GraphFormatError:
        return False  # left to the reader that reports it


def _check_ids(ids: np.ndarray, n: int, what: str) -> None:
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= n):
        bad = int(ids.max()) if int(ids.max()) >= n else int(ids.min())
        raise GraphFormatError(f"{what} holds node id {bad} outside [0, {n})",
                               "the split cannot be built", "give node ids of the graph")


def read_ogb_hetero_dir(path: str | PathLike) -> TypedGraph:
    """Read an OGB heterogeneous node-property directory (layout in the module docstring)."""
    sh = read_ogb_hetero_share(path)
    spec = {"num_nodes": sh.num_nodes,
            "edge_index": {et: np.stack([s, d]) for et, (_, _, s, d) in sh.edges.items()},
            "x": {t: a for t, (_, a) in sh.x.items()}, "y": {t: a for t, (_, a) in sh.y.items()},
            "masks": sh.masks}
    return typed_graph(spec, sh.name)


def load_typed_graph(source, name: str | None = None) -> TypedGraph:
    """A :class:`TypedGraph` from a ``HeteroData``, a dict (plain form or ``to_dict()``), a
    ``.pt`` file of one (loaded with ``weights_only=True``: no code in the file can run) or an
    OGB heterogeneous directory."""
    if isinstance(source, (str, PathLike)):
        p = Path(source)
        if is_ogb_hetero_dir(p):
            return read_ogb_hetero_dir(p)
        if p.suffix not in (".pt", ".pth"):
            raise GraphFormatError(f"{p} is neither a .pt file nor an OGB heterogeneous "
                                   "directory", "no typed graph can be read from it",
                                   "give a saved HeteroData (.pt) or a directory with "
                                   "raw/num-node-dict.csv.gz")
        name, source = str(p), load_torch_object(p)
        if not _is_typed_object(source):
            raise GraphFormatError(f"{name} holds a {type(source).__name__} that is not a typed "
                                   "graph", "a typed graph is read from a HeteroData, its "
                                   "to_dict() or the plain dict form",
                                   "torch.save(hetero_data) or torch.save(hetero_data.to_dict())")
    if type(source).__name__ == "HeteroData" or isinstance(source, Mapping):
        name = name or ("dict" if isinstance(source, Mapping) else "HeteroData")
        return typed_graph(_spec_of(source, name), name)
    raise GraphFormatError(f"a {type(source).__name__} is not a typed graph source", "",
                           "pass a HeteroData, a dict, a .pt path or an OGB hetero directory")


def _is_typed_object(obj) -> bool:
    if type(obj).__name__ == "HeteroData":
        return True
    return isinstance(obj, Mapping) and (isinstance(obj.get("edge_index"), Mapping)
                                         or any(isinstance(k, tuple) for k in obj))


def typed_graph_at(path: str | PathLike) -> TypedGraph | None:
    """The typed graph at ``path`` if it holds one (an OGB hetero directory, or a ``.pt`` of a
    HeteroData, its ``to_dict()`` or the plain dict form), else ``None``: it is then for the
    homogeneous readers. ``typed-sbm:PAPERS[:CLASSES]`` and ``typed-useritem:USERS[:ITEMS]`` are
    the generated typed graphs (:mod:`.typed_generate`, seed 0)."""
    if str(path).startswith("typed-sbm:"):
        spec = parse_dataset_name(str(path), "graph")
        return typed_sbm_graph(spec.papers, spec.classes, 0)
    if str(path).startswith(("typed-useritem:", "typed-useritem-t:")):
        spec = parse_dataset_name(str(path), "graph")
        return typed_useritem_graph(spec.users, spec.items, 0, spec.temporal)
    p = Path(path)
    if is_ogb_hetero_dir(p):
        return read_ogb_hetero_dir(p)
    if p.suffix in (".pt", ".pth") and p.is_file():
        obj = load_torch_object(p)
        if _is_typed_object(obj):
            return load_typed_graph(obj, str(p))
    return None
