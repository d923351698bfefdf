"""An OGB node-property-prediction dataset directory, read from disk (never downloaded).

The layout is the one ``ogb`` unpacks (e.g. ``ogbn_arxiv/``;
docs/formats.md#ogb-node-property-prediction-directory). The ``ogb`` package is not needed;
files are parsed with numpy.
"""

from __future__ import annotations

import gzip
import io
import logging
import warnings
from os import PathLike
from pathlib import Path

import numpy as np

from ..errors import GraphFormatError
from .build import ReadOptions, build_graph
from .csr import CSRGraph
from .formats import is_ogb_dir
from .formats import ogb_file as _find
from .readers import as_mask, text_bytes

__all__ = ["is_ogb_dir", "parse_table", "read_ogb_dir"]

log = logging.getLogger(__name__)

_SPLITS = {"train": "train", "val": "valid", "test": "test"}


def _table(path: Path, dtype, what: str) -> np.ndarray:
    try:
        raw = gzip.open(path, "rb").read() if path.name.endswith(".gz") else path.read_bytes()
    except (OSError, EOFError) as e:
        raise _unreadable(path, what, e) from e
    return parse_table(text_bytes(raw, str(path)), path, dtype, what)


def _unreadable(path, what: str, e: Exception) -> GraphFormatError:
    return GraphFormatError(f"{path} cannot be read as a CSV of {what}: {e}",
                            "the OGB dataset cannot be loaded",
                            "check the file, or unpack the dataset again")


def parse_table(raw: bytes, path, dtype, what: str) -> np.ndarray:
    """The rows of headerless CSV text ``raw`` (from ``path``) as a 2-d ``dtype`` array."""
    if not raw.strip():  # numpy would warn; an empty table has no rows
        return np.zeros((0, 1), dtype)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a numpy warning is reported, never printed
            return np.loadtxt(io.BytesIO(raw), dtype=dtype, delimiter=",", ndmin=2)
    except (ValueError, UserWarning) as e:
        raise _unreadable(path, what, e) from e


def read_ogb_dir(path: str | PathLike, **opts) -> CSRGraph:
    """Read an OGB node-property-prediction directory (layout in docs/formats.md)."""
    root = Path(path)
    name = str(root)
    raw = root / "raw"
    edge_file = _find(raw, "edge")
    if edge_file is None:
        raise GraphFormatError(f"{name} has no raw/edge.csv.gz",
                               "it is not an OGB node-property-prediction directory",
                               "point at the dataset root, the directory that holds raw/")
    edges = _table(edge_file, np.int64, "edges")
    if edges.shape[1] != 2 and edges.size:
        raise GraphFormatError(f"{edge_file}: {edges.shape[1]} columns", "edges need 2",
                               "write one 'src,dst' row per edge")
    src, dst = np.ascontiguousarray(edges[:, 0]), np.ascontiguousarray(edges[:, 1])
    num_nodes = None
    nfile = _find(raw, "num-node-list")
    if nfile is not None:
        num_nodes = int(_table(nfile, np.int64, "node counts").sum())
    g = build_graph(name, src, dst, ReadOptions(**opts), num_nodes)
    x = y = None
    ffile = _find(raw, "node-feat")
    if ffile is not None:
        x = _table(ffile, np.float32, "features")
    lfile = _find(raw, "node-label")
    if lfile is not None:
        lab = _table(lfile, np.float64, "labels")[:, 0]
        y = np.where(np.isnan(lab), -1, lab).astype(np.int64)
    for what, arr in (("node-feat", x), ("node-label", y)):
        if arr is not None and arr.shape[0] != g.num_nodes:
            raise GraphFormatError(f"{name}: raw/{what} has {arr.shape[0]} rows but the graph "
                                   f"has {g.num_nodes} nodes", "node data needs one row per node",
                                   "unpack the dataset again")
    g.x, g.y = x, y
    split_root = root / "split"
    splits = sorted(d for d in split_root.iterdir() if d.is_dir()) if split_root.is_dir() else []
    if splits:
        sdir = splits[0]
        if len(splits) > 1:
            log.info("%s: using split/%s of %s", name, sdir.name, [d.name for d in splits])
        for key, stem in _SPLITS.items():
            f = _find(sdir, stem)
            if f is not None:
                g.masks[key] = as_mask(_table(f, np.int64, "node ids")[:, 0], g.num_nodes,
                                       str(f), g.node_ids)
    return g
