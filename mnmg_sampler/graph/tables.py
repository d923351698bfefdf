"""Tabular edge lists: CSV / TSV (with or without a header row, optionally gzip) and parquet.

The source and target columns are the ones named ``src``/``source``/``from``/``u`` and
``dst``/``target``/``to``/``v`` (any case) when a header names them, else the first two columns;
other columns (weights, timestamps) are ignored. A header is recognised when a field of the first
non-comment line is not an integer. Parquet needs ``pyarrow`` (the ``parquet`` extra).
"""

from __future__ import annotations

import io
import logging
from os import PathLike
from pathlib import Path

import numpy as np

from ..errors import GraphFormatError, MissingDependencyError
from .csr import CSRGraph
from .readers import MAX_NODE_ID, _read_bytes, _require_file, build_graph

__all__ = ["read_table", "read_parquet", "SRC_NAMES", "DST_NAMES"]

log = logging.getLogger(__name__)

SRC_NAMES = ("src", "source", "from", "u", "src_id", "source_id", "node1", "head")
DST_NAMES = ("dst", "target", "to", "v", "dst_id", "target_id", "node2", "tail")


def _pick_columns(header: list[str], name: str) -> tuple[int, int]:
    low = [h.strip().strip('"').strip("'").lower() for h in header]
    src = next((i for i, h in enumerate(low) if h in SRC_NAMES), None)
    dst = next((i for i, h in enumerate(low) if h in DST_NAMES), None)
    if src is None and dst is None:
        if len(header) < 2:
            raise GraphFormatError(f"{name}: the header {header!r} has fewer than 2 columns",
                                   "no source and target column", "write 'src,dst' pairs")
        return 0, 1
    if src is None or dst is None:
        raise GraphFormatError(
            f"{name}: the header {header!r} names only one of the source and target columns",
            "the edge direction is unknown",
            f"name the columns {SRC_NAMES[0]!r} and {DST_NAMES[0]!r}",
        )
    return src, dst


def _delimiter(path: Path, first: str) -> str | None:
    lower = path.name.lower()
    if ".csv" in lower:
        return ","
    if ".tsv" in lower:
        return "\t"
    for d in (",", "\t", ";"):
        if d in first:
            return d
    return None  # any whitespace


def _check_non_negative(name: str, src: np.ndarray, dst: np.ndarray) -> None:
    """Refuse negative ids before the id bound is checked (their message is the clearer one)."""
    if src.size and min(int(src.min()), int(dst.min())) < 0:
        raise GraphFormatError(f"{name}: negative node id {min(int(src.min()), int(dst.min()))}",
                               "node ids index arrays and must be >= 0",
                               "relabel the nodes to 0..N-1")


def _is_int(tok: str) -> bool:
    tok = tok.strip().strip('"')
    return tok.lstrip("+-").isdigit()


def read_table(
    path: str | PathLike,
    *,
    num_nodes: int | None = None,
    undirected: bool = False,
    drop_self_loops: bool = False,
    drop_duplicates: bool = False,
    max_node_id: int | None = MAX_NODE_ID,
) -> CSRGraph:
    """Read a CSV / TSV edge table (``.csv``, ``.tsv``, optionally ``.gz``).

    ``#`` starts a comment. The first non-comment line is a header when one of its fields is
    not an integer; the columns are chosen as the module docstring says.
    """
    p = Path(path)
    name = str(p)
    raw = _read_bytes(p)
    text = raw.decode("utf-8", errors="replace")
    lines = text.splitlines()
    first_i = next((i for i, ln in enumerate(lines)
                    if ln.strip() and not ln.lstrip().startswith("#")), None)
    if first_i is None:
        src = dst = np.zeros(0, np.int64)
    else:
        first = lines[first_i]
        delim = _delimiter(p, first)
        fields = first.split(delim) if delim else first.split()
        header = not all(_is_int(f) for f in fields if f.strip())
        cols = _pick_columns(fields, name) if header else (0, 1)
        if len(fields) < 2:
            raise GraphFormatError(f"{name}, line {first_i + 1}: 1 field in {first!r}",
                                   "the edge table cannot be read",
                                   "write at least two columns: source and target")
        skip = first_i + 1 if header else 0
        try:
            arr = np.loadtxt(io.StringIO(text), dtype=np.int64, delimiter=delim, comments="#",
                             skiprows=skip, usecols=cols, ndmin=2)
        except ValueError as e:
            raise GraphFormatError(
                f"{name}: {e}", "the edge table cannot be read",
                "write integer node ids in the source and target columns, one edge per line",
            ) from e
        src, dst = np.ascontiguousarray(arr[:, 0]), np.ascontiguousarray(arr[:, 1])
    _check_non_negative(name, src, dst)
    log.debug("read %d edges from %s", src.size, p)
    return build_graph(name, src, dst, num_nodes, undirected=undirected,
                       drop_self_loops=drop_self_loops, drop_duplicates=drop_duplicates,
                       max_node_id=max_node_id)


def read_parquet(
    path: str | PathLike,
    *,
    undirected: bool = False,
    drop_self_loops: bool = False,
    drop_duplicates: bool = False,
    max_node_id: int | None = MAX_NODE_ID,
) -> CSRGraph:
    """Read a parquet edge table (needs ``pyarrow``); columns chosen as for CSV."""
    p = Path(path)
    name = str(p)
    _require_file(p)
    try:
        import pyarrow.parquet as pq
    except ImportError as e:
        raise MissingDependencyError(
            "pyarrow is not installed", f"{name} (parquet) cannot be read",
            "pip install 'mnmg-sampler[parquet]' (or pip install pyarrow)") from e
    try:
        table = pq.read_table(p)
    except Exception as e:  # pyarrow raises ArrowInvalid and OSError subclasses
        raise GraphFormatError(f"{name} is not a readable parquet file: {e}",
                               "the graph cannot be loaded",
                               "write it with pyarrow or pandas.DataFrame.to_parquet") from e
    i, j = _pick_columns(table.column_names, name)
    out = []
    for k in (i, j):
        col = table.column(k)
        arr = col.to_numpy()
        if arr.dtype.kind not in "iu":
            raise GraphFormatError(
                f"{name}: column {table.column_names[k]!r} has type {col.type}",
                "node ids must be integers", "store the source and target ids as int64")
        out.append(np.ascontiguousarray(arr, dtype=np.int64))
    src, dst = out
    _check_non_negative(name, src, dst)
    return build_graph(name, src, dst, undirected=undirected, drop_self_loops=drop_self_loops,
                       drop_duplicates=drop_duplicates, max_node_id=max_node_id)
