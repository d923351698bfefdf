"""Node features, labels and split masks given beside the graph: arrays or separate files.

A graph file may carry its own ``x``, ``y`` and masks; these override or complete them. Each value
is an array (numpy or torch) or the path of a file:

* ``.npy``; ``.npz`` with one array (or the array under the key ``x`` / ``y`` / ``mask``);
* ``.pt`` / ``.pth`` holding one tensor (loaded with ``weights_only=True``);
* ``.csv`` / ``.tsv`` / ``.txt`` (optionally ``.gz``): one row per node, no header.

A mask is a bool array with one entry per node, or an integer array of the node ids in the split
(OGB's ``train.csv.gz`` form).
"""

from __future__ import annotations

import gzip
import io
from collections.abc import Mapping
from os import PathLike
from pathlib import Path

import numpy as np

from ..errors import GraphFormatError
from .csr import CSRGraph
from .readers import _require_file, as_mask, as_numpy

__all__ = ["read_node_array", "attach_node_data", "SPLIT_NAMES"]

SPLIT_NAMES = ("train", "val", "test")
_ALIASES = {"valid": "val", "validation": "val"}


def read_node_array(path: str | PathLike, what: str = "node data") -> np.ndarray:
    """The array stored in ``path`` (formats in the module docstring)."""
    p = Path(path)
    name = str(p)
    _require_file(p)
    low = p.name.lower()
    try:
        if low.endswith(".npy"):
            return np.load(p, allow_pickle=False)
        if low.endswith(".npz"):
            with np.load(p, allow_pickle=False) as npz:
                keys = npz.files
                key = keys[0] if len(keys) == 1 else next(
                    (k for k in ("x", "y", "mask", "feat", "label") if k in keys), None)
                if key is None:
                    raise GraphFormatError(
                        f"{name} holds several arrays ({', '.join(keys)})",
                        f"it is unclear which one is the {what}",
                        "save a single array, or name it x / y / mask")
                return npz[key]
        if low.endswith((".pt", ".pth")):
            import torch

            t = torch.load(p, map_location="cpu", weights_only=True)
            if not torch.is_tensor(t):
                raise GraphFormatError(f"{name} holds a {type(t).__name__}",
                                       f"the {what} must be one tensor", "torch.save(tensor)")
            return t.numpy()
        if low.endswith((".csv", ".tsv", ".txt", ".csv.gz", ".tsv.gz", ".txt.gz")):
            raw = gzip.open(p, "rb").read() if low.endswith(".gz") else p.read_bytes()
            delim = "," if ".csv" in low else None
            arr = np.loadtxt(io.BytesIO(raw), delimiter=delim, ndmin=2)
            if arr.shape[1] == 1:
                arr = arr[:, 0]
            if np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)) and what != "features":
                return arr.astype(np.int64)
            return arr.astype(np.float32)
    except GraphFormatError:
        raise
    except (OSError, ValueError, EOFError, RuntimeError) as e:
        raise GraphFormatError(f"{name} cannot be read as {what}: {e}",
                               "the node data cannot be loaded",
                               "save it with numpy.save (without object arrays)") from e
    raise GraphFormatError(f"{name}: unknown file type for {what}",
                           "the node data cannot be loaded",
                           "use .npy, .npz, .pt, or .csv / .tsv / .txt (optionally .gz)")


def _array(v, what: str) -> np.ndarray:
    if isinstance(v, (str, PathLike)):
        return read_node_array(v, what)
    return as_numpy(v)


def attach_node_data(graph: CSRGraph, x=None, y=None,
                     masks: Mapping[str, object] | None = None) -> CSRGraph:
    """Set ``graph.x`` / ``graph.y`` / ``graph.masks[...]`` from arrays or files (in place).

    Given values win over those the graph file carried. Raises :class:`GraphFormatError` when
    a row count differs from ``graph.num_nodes``.
    """
    n = graph.num_nodes
    if x is not None:
        xa = _array(x, "features")
        if xa.ndim == 1:
            xa = xa[:, None]
        if xa.ndim != 2 or xa.shape[0] != n:
            raise GraphFormatError(f"{graph.name}: features have shape {xa.shape} but the graph "
                                   f"has {n} nodes", "the features need one row per node",
                                   f"give an [{n}, F] array")
        graph.x = np.ascontiguousarray(xa, dtype=np.float32)
    if y is not None:
        ya = _array(y, "labels")
        if ya.ndim == 2 and ya.shape[1] == 1:
            ya = ya[:, 0]
        if ya.ndim != 1 or ya.shape[0] != n:
            raise GraphFormatError(f"{graph.name}: labels have shape {ya.shape} but the graph "
                                   f"has {n} nodes", "the labels need one entry per node",
                                   f"give a [{n}] array")
        if ya.dtype.kind == "f":
            ya = np.where(np.isnan(ya), -1, ya)
        graph.y = ya.astype(np.int64)
    for key, v in (masks or {}).items():
        if v is None:
            continue
        split = _ALIASES.get(str(key), str(key))
        graph.masks = dict(graph.masks or {})
        graph.masks[split] = as_mask(_array(v, f"the {split} mask"), n,
                                     f"{graph.name}: mask {split!r}", graph.node_ids)
    return graph
