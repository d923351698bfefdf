"""Tabular edge lists: CSV / TSV (with or without a header row, optionally gzip) and parquet.

The source and target columns are the ones named ``src``/``source``/``from``/``u`` and
``dst``/``target``/``to``/``v`` (any case) when a header names them, else the first two columns;
other columns (weights, timestamps) are ignored. The first non-comment line is a header when none
of its fields is a number (``src,dst``); a UTF-8 byte-order mark is skipped; a malformed line is
a :class:`GraphFormatError` naming the file and the line. Parquet needs ``pyarrow`` (the
``parquet`` extra).
"""

from __future__ import annotations

import io
import logging
import warnings
from os import PathLike
from pathlib import Path

import numpy as np

from ..errors import GraphFormatError, MissingDependencyError
from .build import ReadOptions, build_graph
from .csr import CSRGraph
from .readers import as_ids, head_bytes, header_line, input_path, read_text_bytes
from .typed import check_time

__all__ = ["read_table", "read_parquet", "read_table_times", "SRC_NAMES", "DST_NAMES",
           "TABLE_SUFFIXES"]

TABLE_SUFFIXES = (".csv", ".tsv", ".csv.gz", ".tsv.gz", ".parquet", ".pq")
"""File names :func:`read_table_times` reads."""

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


def _first_bad_line(lines: list[str], skip: int, delim: str | None, cols: tuple[int, ...],
                    ok) -> tuple[int, str] | None:
    """``(line number, text)`` of the first data line whose ``cols`` are not integers passing
    ``ok(values)``, or ``None``."""
    for no in range(skip, len(lines)):
        body = lines[no].split("#", 1)[0]
        if not body.strip():
            continue
        fields = body.split(delim) if delim else body.split()
        try:
            good = ok([int(fields[c].strip().strip('"')) for c in cols])
        except (ValueError, IndexError):
            good = False
        if not good:
            return no + 1, lines[no] if len(lines[no]) <= 80 else lines[no][:77] + "..."
    return None


def _bad_row(name: str, lines: list[str], skip: int, delim: str | None, cols: tuple[int, int],
             err: Exception) -> GraphFormatError:
    """The first data line whose source or target is not an integer id, as a typed error."""
    bad = _first_bad_line(lines, skip, delim, cols, lambda v: all(0 <= x < 2**63 for x in v))
    if bad is not None:
        return GraphFormatError(
            f"{name}, line {bad[0]}: not a source and target integer node id in {bad[1]!r}",
            "the edge table cannot be read",
            "write integer node ids >= 0 in the source and target columns, one edge per "
            "line (a header row has no number in it)")
    return GraphFormatError(f"{name}: {err}", "the edge table cannot be read",
                            "write integer node ids in the source and target columns")


def _decode(raw: bytes, name: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise GraphFormatError(f"{name}, line {line}: byte {raw[e.start]:#04x} is not UTF-8",
                               "the edge table cannot be read",
                               "save the file as UTF-8 (or plain ASCII)") from e


def read_table(path: str | PathLike, *, num_nodes: int | None = None, **opts) -> CSRGraph:
    """Read a CSV / TSV edge table (``.csv``, ``.tsv``, optionally ``.gz``).

    ``#`` starts a comment; blank lines and CRLF line ends are fine. The header row (recorded
    in ``graph.header``) and the columns are chosen as the module docstring says; ``opts`` are
    those of :class:`~.build.ReadOptions`.
    """
    p = Path(path)
    name = str(p)
    raw = read_text_bytes(p)
    text = _decode(raw, name)
    lines = text.splitlines()
    first_i = next((i for i, ln in enumerate(lines)
                    if ln.split("#", 1)[0].strip()), None)
    header = None
    src = dst = np.zeros(0, np.int64)
    if first_i is not None:
        first = lines[first_i].split("#", 1)[0]
        delim = _delimiter(p, first)
        fields = first.split(delim) if delim else first.split()
        header = header_line(raw, delim)
        if len(fields) < 2:
            raise GraphFormatError(f"{name}, line {first_i + 1}: 1 field in {first!r}",
                                   "the edge table cannot be read",
                                   "write at least two columns: source and target")
        cols = _pick_columns(fields, name) if header else (0, 1)
        skip = first_i + 1 if header else 0
        if any(ln.split("#", 1)[0].strip() for ln in lines[skip:]):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("error")  # numpy's warnings are errors, reported
                    arr = np.loadtxt(io.StringIO(text), dtype=np.int64, delimiter=delim,
                                     comments="#", skiprows=skip, usecols=cols, ndmin=2)
            except (ValueError, UserWarning) as e:
                raise _bad_row(name, lines, skip, delim, cols, e) from e
            src, dst = np.ascontiguousarray(arr[:, 0]), np.ascontiguousarray(arr[:, 1])
    log.debug("read %d edges from %s", src.size, p)
    g = build_graph(name, src, dst, ReadOptions(**opts), num_nodes)
    g.header = header
    return g


def read_parquet(path: str | PathLike, **opts) -> CSRGraph:
    """Read a parquet edge table (needs ``pyarrow``); columns chosen as for CSV."""
    p, name = input_path(path)
    table = _parquet_table(p, name)
    i, j = _pick_columns(table.column_names, name)
    out = []
    for k in (i, j):
        out.append(as_ids(table.column(k).to_numpy(), name, table.column_names[k]))
    src, dst = out
    return build_graph(name, src, dst, ReadOptions(**opts))


def _time_column(header: list[str], column: str, name: str) -> int:
    low = [h.strip().strip('"').strip("'").lower() for h in header]
    if column.lower() not in low:
        raise GraphFormatError(f"{name} has no column {column!r} (columns: {header})",
                               "the edges have no time", "name the time column in the header")
    return low.index(column.lower())


def table_has_column(path: str | PathLike, column: str) -> bool:
    """True if the CSV / TSV / parquet edge table at ``path`` has a header naming ``column``
    (matched without case, as :func:`read_table_times` matches it); reads the header only.
    False for a file that cannot be read (its reader reports it)."""
    p = Path(path)
    if p.name.lower().endswith((".parquet", ".pq")):
        try:
            import pyarrow.parquet as pq

            names = pq.read_schema(p).names
        except Exception:  # no pyarrow, or not parquet: the reader says which
            return False
    else:
        head = head_bytes(p)
        if head is None:
            return False
        first = next((ln for ln in head.decode("utf-8", "replace").splitlines()
                      if ln.split("#", 1)[0].strip()), "").split("#", 1)[0]
        delim = _delimiter(p, first)
        if header_line(head, delim) is None:
            return False
        names = first.split(delim) if delim else first.split()
    return column.lower() in [h.strip().strip('"').strip("'").lower() for h in names]


def read_table_times(path: str | PathLike, column: str
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(src, dst, time)`` of a CSV / TSV / parquet edge table whose header names the int64
    edge time ``column`` (matched without case), in the file's row order. Source and target
    columns are chosen as :func:`read_table` chooses them. A time that is not an integer (a
    fraction, ``NaN``, an empty field) is a :class:`GraphFormatError` naming the file (and the
    line, in text)."""
    p = Path(path)
    name = str(p)
    if p.name.lower().endswith((".parquet", ".pq")):
        table = _parquet_table(p, name)
        i, j = _pick_columns(table.column_names, name)
        k = _time_column(table.column_names, column, name)
        src, dst = (as_ids(table.column(c).to_numpy(), name, table.column_names[c])
                    for c in (i, j))
        col = table.column(k)
        if col.null_count:
            raise GraphFormatError(f"{name}: time column {column!r} has {col.null_count} "
                                   "missing values", "those edges have no time",
                                   "give every edge an int64 time")
        return src, dst, check_time(col.to_numpy(zero_copy_only=False), src.size,
                                    f"{name}: time column {column!r}")
    raw = read_text_bytes(p)
    text = _decode(raw, name)
    lines = text.splitlines()
    first_i = next((i for i, ln in enumerate(lines) if ln.split("#", 1)[0].strip()), None)
    first = "" if first_i is None else lines[first_i].split("#", 1)[0]
    delim = _delimiter(p, first)
    if first_i is None or header_line(raw, delim) is None:
        raise GraphFormatError(f"{name} has no header row", f"no column is named {column!r}",
                               f"write a header row naming the columns, e.g. src,dst,{column}")
    fields = first.split(delim) if delim else first.split()
    use = (*_pick_columns(fields, name), _time_column(fields, column, name))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # numpy's warnings are errors, reported
            arr = np.loadtxt(io.StringIO(text), dtype=np.int64, delimiter=delim, comments="#",
                             skiprows=first_i + 1, usecols=use, ndmin=2)
    except (ValueError, UserWarning) as e:
        raise _bad_time_row(name, lines, first_i + 1, delim, use, column) from e
    if arr.size and arr[:, :2].min() < 0:
        raise _bad_time_row(name, lines, first_i + 1, delim, use, column)
    return tuple(np.ascontiguousarray(arr[:, c]) for c in range(3))


def _bad_time_row(name: str, lines: list[str], skip: int, delim: str | None,
                  cols: tuple[int, ...], column: str) -> GraphFormatError:
    """The first data line without integer ids and an integer time, as a typed error."""
    bad = _first_bad_line(lines, skip, delim, cols,
                          lambda v: v[0] >= 0 and v[1] >= 0 and -2**63 <= v[2] < 2**63)
    if bad is not None:
        return GraphFormatError(
            f"{name}, line {bad[0]}: not integer node ids and an integer time in {bad[1]!r}",
            "the edge table cannot be read with time",
            f"write node ids >= 0 and an integer {column!r} (e.g. Unix seconds) per line")
    return GraphFormatError(f"{name}: unreadable edge times", "the edge table cannot be read",
                            f"write integer node ids and an integer {column!r}")


def _parquet_table(p: Path, name: str):
    try:
        import pyarrow.parquet as pq
    except ImportError as e:
        raise MissingDependencyError(
            "pyarrow is not installed", f"{name} (parquet) cannot be read",
            "pip install 'mnmg-sampler[parquet]' (or pip install pyarrow)") from e
    try:
        return pq.read_table(p)
    except Exception as e:  # pyarrow raises ArrowInvalid and OSError subclasses
        raise GraphFormatError(f"{name} is not a readable parquet file: {e}",
                               "the graph cannot be loaded",
                               "write it with pyarrow or pandas.DataFrame.to_parquet") from e
