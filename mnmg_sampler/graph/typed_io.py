"""Typed graphs in: a PyG ``HeteroData``, a saved one (``.pt``, or its ``to_dict()``), the plain
dict form, and OGB's heterogeneous raw directory layout (as ogbn-mag's)::

    raw/num-node-dict.csv.gz                        header of type names, one row of counts
    raw/relations/<src>___<rel>___<dst>/edge.csv.gz one "src,dst" row per edge (per-type ids)
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
from os import PathLike
from pathlib import Path

import numpy as np

from ..errors import GraphFormatError
from .formats import is_ogb_hetero_dir
from .ogb import _find, _table
from .readers import MASK_KEYS
from .typed import TypedGraph, edge_type_of, typed_graph

__all__ = ["from_hetero_data", "is_ogb_hetero_dir", "load_typed_graph", "read_ogb_hetero_dir",
           "read_typed_torch", "typed_graph_at"]

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


def from_hetero_data(data, name: str = "HeteroData") -> TypedGraph:
    """A :class:`TypedGraph` from a PyG ``HeteroData`` (node counts as PyG infers them)."""
    nodes = {}
    for t in data.node_types:
        st = dict(data[t].items())
        st["num_nodes"] = data[t].num_nodes
        nodes[t] = st
    edges = {et: dict(data[et].items()) for et in data.edge_types}
    return typed_graph(_spec_from_stores(nodes, edges, name), name)


def _from_mapping(d: Mapping, name: str) -> TypedGraph:
    if isinstance(d.get("edge_index"), Mapping):  # the plain dict form
        return typed_graph(d, name)
    nodes, edges = {}, {}
    for k, v in d.items():
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
    return typed_graph(_spec_from_stores(nodes, edges, name), name)


def _hetero_safe_globals() -> list:
    try:
        from torch_geometric.data import HeteroData
        from torch_geometric.data.storage import BaseStorage, EdgeStorage, NodeStorage
    except ImportError:
        return []
    return [HeteroData, BaseStorage, NodeStorage, EdgeStorage]


def read_typed_torch(path: str | PathLike) -> TypedGraph:
    """Read a ``.pt`` holding a ``HeteroData``, its ``to_dict()``, or the plain dict form
    (loaded with ``weights_only=True``: no code in the file can run)."""
    from .torch_files import load_torch_object

    name = str(path)
    obj = load_torch_object(path, _hetero_safe_globals())
    if _is_typed_object(obj):
        return load_typed_graph(obj, name)
    raise GraphFormatError(f"{name} holds a {type(obj).__name__} that is not a typed graph",
                           "a typed graph is read from a HeteroData, its to_dict() or the "
                           "plain dict form",
                           "torch.save(hetero_data) or torch.save(hetero_data.to_dict())")


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


def read_ogb_hetero_dir(path: str | PathLike) -> TypedGraph:
    """Read an OGB heterogeneous node-property directory (layout in the module docstring)."""
    root = Path(path)
    name = str(root)
    raw = root / "raw"
    nfile = _find(raw, "num-node-dict")
    if nfile is None:
        raise GraphFormatError(f"{name} has no raw/num-node-dict.csv.gz",
                               "it is not an OGB heterogeneous directory",
                               "point at the dataset root, the directory that holds raw/")
    spec: dict = {"num_nodes": _node_count_dict(nfile), "edge_index": {}, "x": {}, "y": {},
                  "masks": {}}
    rel_root = raw / "relations"
    rel_dirs = sorted(d for d in rel_root.iterdir() if d.is_dir()) if rel_root.is_dir() else []
    for d in rel_dirs:
        parts = d.name.split("___")
        if len(parts) != 3:
            raise GraphFormatError(f"{d} is not named <src>___<rel>___<dst>",
                                   "its relation is unknown", "rename it as OGB does")
        ef = _find(d, "edge")
        if ef is None:
            raise GraphFormatError(f"{d} has no edge.csv.gz", "the relation has no edges",
                                   "unpack the dataset again")
        e = _table(ef, np.int64, "edges")
        if e.size and e.shape[1] != 2:
            raise GraphFormatError(f"{ef}: {e.shape[1]} columns", "edges need 2",
                                   "write one 'src,dst' row per edge")
        e = e.reshape(-1, 2)
        cf = _find(d, "num-edge-list")
        if cf is not None and int(_table(cf, np.int64, "edge counts").sum()) != e.shape[0]:
            raise GraphFormatError(f"{cf} says {int(_table(cf, np.int64, 'x').sum())} edges but "
                                   f"{ef} has {e.shape[0]}", "the relation is incomplete",
                                   "unpack the dataset again")
        spec["edge_index"][tuple(parts)] = np.ascontiguousarray(e.T)
    for sub, key in (("node-feat", "x"), ("node-label", "y")):
        base = raw / sub
        for d in (sorted(p for p in base.iterdir() if p.is_dir()) if base.is_dir() else []):
            f = _find(d, sub)
            if f is None:
                continue
            if key == "x":
                spec["x"][d.name] = _table(f, np.float32, "features")
            else:
                lab = _table(f, np.float64, "labels")[:, 0]
                spec["y"][d.name] = np.where(np.isnan(lab), -1, lab).astype(np.int64)
    split_root = root / "split"
    splits = sorted(d for d in split_root.iterdir() if d.is_dir()) if split_root.is_dir() else []
    if splits:
        for d in sorted(p for p in splits[0].iterdir() if p.is_dir()):
            m = {}
            for split, stem in (("train", "train"), ("val", "valid"), ("test", "test")):
                f = _find(d, stem)
                if f is not None:
                    m[split] = _table(f, np.int64, "node ids")[:, 0]
            if m:
                spec["masks"][d.name] = m
    return typed_graph(spec, name)


def load_typed_graph(source, name: str | None = None) -> TypedGraph:
    """A :class:`TypedGraph` from a ``HeteroData``, a dict (plain form or ``to_dict()``), a
    ``.pt`` file or an OGB heterogeneous directory."""
    if type(source).__name__ == "HeteroData":
        return from_hetero_data(source, name or "HeteroData")
    if isinstance(source, Mapping):
        return _from_mapping(source, name or "dict")
    if isinstance(source, (str, PathLike)):
        p = Path(source)
        if is_ogb_hetero_dir(p):
            return read_ogb_hetero_dir(p)
        if p.suffix in (".pt", ".pth"):
            return read_typed_torch(p)
        raise GraphFormatError(f"{p} is neither a .pt file nor an OGB heterogeneous directory",
                               "no typed graph can be read from it",
                               "give a saved HeteroData (.pt) or a directory with "
                               "raw/num-node-dict.csv.gz")
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
        from .names import parse_dataset_name
        from .typed_generate import typed_sbm_graph

        spec = parse_dataset_name(str(path), "graph")
        return typed_sbm_graph(spec.papers, spec.classes, 0)
    if str(path).startswith(("typed-useritem:", "typed-useritem-t:")):
        from .names import parse_dataset_name
        from .typed_generate import typed_useritem_graph

        spec = parse_dataset_name(str(path), "graph")
        return typed_useritem_graph(spec.users, spec.items, 0, spec.temporal)
    p = Path(path)
    if is_ogb_hetero_dir(p):
        return read_ogb_hetero_dir(p)
    if p.suffix in (".pt", ".pth") and p.is_file():
        from .torch_files import load_torch_object

        obj = load_torch_object(p, _hetero_safe_globals())
        if _is_typed_object(obj):
            return load_typed_graph(obj, str(p))
    return None
