"""A PyG ``Data`` (or dict of tensors) saved with ``torch.save``, loaded ``weights_only=True``.

The PyG classes a pickled ``Data`` or ``HeteroData`` names (:func:`pyg_safe_globals`) are allowed
for the one load only (``torch.serialization.safe_globals``); nothing else in it can run code.
"""

from __future__ import annotations

import contextlib
from os import PathLike
from pathlib import Path

import numpy as np

from ..errors import GraphFormatError, MissingDependencyError
from .build import ReadOptions, build_graph
from .csr import CSRGraph
from .readers import as_numpy, check_node_rows, edge_index_pair, input_path, masks_from

__all__ = ["read_torch", "pyg_safe_globals", "graph_from_mapping", "load_torch_object"]


def pyg_safe_globals() -> list:
    """The PyG classes a saved ``Data`` or ``HeteroData`` needs, or ``[]`` without PyG."""
    try:
        from torch_geometric.data import Data, HeteroData
        from torch_geometric.data.data import DataEdgeAttr, DataTensorAttr
        from torch_geometric.data.storage import (
            BaseStorage,
            EdgeStorage,
            GlobalStorage,
            NodeStorage,
        )
    except ImportError:
        return []
    return [Data, DataEdgeAttr, DataTensorAttr, GlobalStorage, HeteroData, BaseStorage,
            NodeStorage, EdgeStorage]


def _safe_load(path: Path, mmap: bool = False):
    import torch

    allowed = pyg_safe_globals()
    ctx = getattr(torch.serialization, "safe_globals", None)
    with ctx(allowed) if (ctx and allowed) else contextlib.nullcontext():
        if allowed and ctx is None:  # torch 2.4: no scoped form
            torch.serialization.add_safe_globals(allowed)
        return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)


def graph_from_mapping(d, name: str, **opts) -> CSRGraph:
    """A graph from a mapping with ``edge_index`` and optional ``x``, ``y``, ``num_nodes`` and
    split masks (a PyG ``Data``'s fields); ``opts`` are those of :class:`~.build.ReadOptions`."""
    if "edge_index" not in d:
        raise GraphFormatError(f"{name} has no 'edge_index' (fields: {sorted(d)})",
                               "no graph can be built",
                               "save a Data (or dict) with a (2, E) edge_index")
    src, dst = edge_index_pair(as_numpy(d["edge_index"]), name)
    num_nodes = d.get("num_nodes")
    num_nodes = None if num_nodes is None else int(num_nodes)
    x = as_numpy(d["x"]) if d.get("x") is not None else None
    y = as_numpy(d["y"]) if d.get("y") is not None else None
    if y is not None and y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y is not None and y.dtype.kind in "iub":
        y = y.astype(np.int64, copy=False)
    if num_nodes is None and x is not None:
        num_nodes = int(x.shape[0])  # PyG's own rule: nodes without edges still count
    for key, arr in (("x", x), ("y", y)):
        if arr is not None and arr.ndim < 1:
            raise GraphFormatError(f"{name}: '{key}' is a scalar", f"'{key}' needs one row per "
                                   "node", f"save '{key}' with one row per node")
    g = build_graph(name, src, dst, ReadOptions(**opts), num_nodes, x=x, y=y)
    check_node_rows(name, g.num_nodes, g.x, g.y)
    g.masks = masks_from({k: as_numpy(v) for k, v in d.items() if "mask" in k or
                          k in ("train", "val", "valid", "test")}, name, g.num_nodes, g.node_ids)
    return g


def load_torch_object(path: str | PathLike, mmap: bool = False):
    """The object in a ``torch.save`` file, loaded with ``weights_only=True``: tensors, plain
    containers, PyG ``Data`` and ``HeteroData``; anything else is a typed error. ``mmap``:
    tensors map the file (read when touched)."""
    p, name = input_path(path)
    try:
        obj = _safe_load(p, mmap)
    except (OSError, RuntimeError, EOFError) as e:
        raise GraphFormatError(f"{name} is not a readable torch.save file: {e}",
                               "the graph cannot be loaded", "save it with torch.save") from e
    except Exception as e:  # the weights-only unpickler's refusal (pickle.UnpicklingError)
        if type(e).__name__ != "UnpicklingError":
            raise
        if not pyg_safe_globals() and "torch_geometric" in str(e):
            raise MissingDependencyError(
                "torch_geometric is not installed", f"{name} holds a PyG Data and cannot be read",
                "pip install 'mnmg-sampler[pyg]'") from e
        raise GraphFormatError(
            f"{name} cannot be loaded with weights_only=True: "
            f"{str(e).splitlines()[-1][:200]}",
            "only tensors, plain containers and PyG Data objects are accepted, for safety",
            "save data.to_dict() or a Data object; install 'mnmg-sampler[pyg]' for Data",
        ) from e
    return obj


def read_torch(path: str | PathLike, **opts) -> CSRGraph:
    """Read a ``.pt`` / ``.pth`` holding a PyG ``Data`` or a dict of tensors."""
    p, name = input_path(path)
    obj = load_torch_object(p)
    if hasattr(obj, "to_dict") and not isinstance(obj, dict):
        if type(obj).__name__ != "Data":
            raise GraphFormatError(f"{name} holds a {type(obj).__name__}",
                                   "only a homogeneous Data (or a dict) is read here",
                                   "for a HeteroData use mnmg_sampler.load_typed_graph "
                                   "(docs/hetero.md), else save one torch_geometric.data.Data")
        d = obj.to_dict()
        d.setdefault("num_nodes", obj.num_nodes)
    elif isinstance(obj, dict):
        d = obj
    else:
        raise GraphFormatError(f"{name} holds a {type(obj).__name__}",
                               "a Data object or a dict of tensors is needed",
                               "torch.save(data) with a torch_geometric.data.Data, or a dict")
    return graph_from_mapping(d, name, **opts)
