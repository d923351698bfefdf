"""Graph input formats as plain data: file suffixes, format descriptions and path layouts.

The readers choose by these tables, and ``config`` checks ``dataset.name`` against them
without reading the graph (config imports graph, never the other way round). Only the
standard library and the package's errors: importing it loads no reader.
"""

from __future__ import annotations

import glob
from os import PathLike
from pathlib import Path

from ..errors import GraphFormatError

__all__ = ["TEXT_SUFFIXES", "TABLE_SUFFIXES", "EDGE_LIST_SUFFIXES", "GRAPH_SUFFIXES",
           "SHARD_SUFFIXES", "FORMAT_DESCRIPTIONS", "supported_formats", "ogb_file",
           "is_ogb_dir", "is_ogb_hetero_dir", "is_sharded", "shard_files"]

TEXT_SUFFIXES = (".txt", ".txt.gz", ".edges", ".edges.gz", ".el", ".el.gz")
TABLE_SUFFIXES = (".csv", ".csv.gz", ".tsv", ".tsv.gz")
EDGE_LIST_SUFFIXES = TEXT_SUFFIXES + TABLE_SUFFIXES
"""Suffixes of text edge lists (whitespace, CSV or TSV; optionally gzip)."""

GRAPH_SUFFIXES = (*EDGE_LIST_SUFFIXES, ".parquet", ".pq", ".npy", ".npz", ".pt", ".pth")
"""Every file suffix some format accepts (directories are matched by their content)."""

_SHARD_TEXT = (".txt", ".edges", ".el")
SHARD_SUFFIXES = (*_SHARD_TEXT, *(s + ".gz" for s in _SHARD_TEXT), ".npy", ".parquet")
"""Suffixes of the edge files a directory or glob of shards may hold."""

FORMAT_DESCRIPTIONS: tuple[tuple[str, str], ...] = (
    ("edge list (text)", "*.txt, *.edges, *.el [.gz]: 'src dst' per line, '#' comments, "
     "optional header row"),
    ("CSV / TSV table", "*.csv, *.tsv [.gz], with or without a header row; columns src/dst "
     "(or source/target) or the first two"),
    ("parquet table", "*.parquet, *.pq (needs pyarrow); columns as for CSV"),
    ("numpy edge_index", "*.npy: one (2, E) integer array"),
    ("gnn-benchmark npz", "*.npz with adj_data/adj_indices/adj_indptr/adj_shape "
     "(+ attr_*, labels)"),
    ("scipy sparse npz", "*.npz written by scipy.sparse.save_npz (csr, csc, coo)"),
    ("numpy arrays npz", "*.npz with src + dst or edge_index; optional num_nodes, x, y, "
     "train_mask/val_mask/test_mask"),
    ("PyG Data (torch.save)", "*.pt, *.pth: a torch_geometric Data or a dict of tensors, "
     "loaded with weights_only=True"),
    ("OGB node-property directory", "DIR/ with raw/edge.csv.gz (+ raw/node-feat, "
     "raw/node-label, split/*/train.csv.gz ...), read from disk"),
)
"""``(name, pattern)`` of every format, in the order a path is matched against them."""


def supported_formats() -> str:
    """The list of readable formats, one per line, for error messages and ``--help``."""
    return "\n".join(f"  - {name}: {pattern}" for name, pattern in FORMAT_DESCRIPTIONS)


def ogb_file(d: Path, stem: str) -> Path | None:
    """``d/stem.csv.gz`` or ``d/stem.csv``, whichever exists first, else ``None``."""
    for suffix in (".csv.gz", ".csv"):
        if (d / (stem + suffix)).is_file():
            return d / (stem + suffix)
    return None


def is_ogb_dir(path: str | PathLike) -> bool:
    """True if ``path`` is a directory with ``raw/edge.csv.gz`` (or ``raw/edge.csv``)."""
    p = Path(path)
    return p.is_dir() and (ogb_file(p / "raw", "edge") is not None)


def is_ogb_hetero_dir(path: str | PathLike) -> bool:
    """True if ``path`` is an OGB heterogeneous directory: ``raw/num-node-dict.csv(.gz)``."""
    p = Path(path)
    return p.is_dir() and ogb_file(p / "raw", "num-node-dict") is not None


_GLOB = set("*?[")


def is_sharded(spec: str | PathLike) -> bool:
    """True for a glob pattern, or a directory (not an OGB dataset directory) holding edge
    files; other directories are left to format detection."""
    s = str(spec)
    if s.strip().lower().startswith("rmat:"):
        return False
    p = Path(s).expanduser()
    try:
        if p.is_dir():
            return not is_ogb_dir(p) and any(
                q.name.lower().endswith(SHARD_SUFFIXES) for q in p.iterdir() if q.is_file())
        return bool(_GLOB & set(s)) and not p.exists()
    except OSError:  # e.g. a name too long for the file system: not a path
        return False


def shard_files(spec: str | PathLike) -> list[Path]:
    """The edge files of a directory or glob, sorted by name (``.dst.npy`` are paired, not
    listed); raises :class:`GraphFormatError` if there are none."""
    s = str(spec)
    p = Path(s).expanduser()
    if p.is_dir():
        found = [q for q in p.iterdir() if q.is_file()]
    elif _GLOB & set(s):
        found = [Path(q) for q in glob.glob(str(p)) if Path(q).is_file()]
    else:
        found = [p] if p.is_file() else []
    files = sorted(q for q in found if q.name.lower().endswith(SHARD_SUFFIXES)
                   and not q.name.lower().endswith(".dst.npy"))
    if not files:
        ogb = " (nor an OGB dataset: a directory without raw/edge.csv.gz)" if p.is_dir() else ""
        raise GraphFormatError(
            f"graph '{s}': no edge files found{ogb}",
            "there is no graph to load",
            f"give a directory or glob of files ending in {', '.join(SHARD_SUFFIXES)}",
        )
    return files
