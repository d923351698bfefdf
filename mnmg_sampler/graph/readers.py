"""Readers that turn graph files into a :class:`CSRGraph`.

Three formats (see ``docs/formats.md``):

* SNAP-style edge lists (``.txt``, optionally gzip-compressed ``.txt.gz``): one ``src dst`` pair
  per line, ``#`` starts a comment, blank lines are ignored.
* numpy ``.npz`` edge arrays: ``src``, ``dst``, optional ``num_nodes``, ``x``, ``y``.
* the gnn-benchmark ``.npz`` layout (Shchur et al.; the embedded Cora): adjacency and features as
  CSR arrays, ``labels``. Read with numpy alone, so scipy is not a runtime dependency.

Edge lists are parsed vectorised (a 1M-edge file takes well under a second) and validated byte by
byte with numpy, so a malformed file is reported with its file name, line number and the line
itself instead of a bare ``ValueError`` from numpy.
"""

from __future__ import annotations

import gzip
import logging
import re
import zipfile
from os import PathLike
from pathlib import Path

import numpy as np

from ..errors import GraphFormatError
from .csr import CSRGraph

__all__ = [
    "read_edge_list",
    "read_npz",
    "read_gnn_benchmark",
    "is_gnn_benchmark",
    "GNN_BENCHMARK_KEYS",
]

log = logging.getLogger(__name__)

GNN_BENCHMARK_KEYS = ("adj_data", "adj_indices", "adj_indptr", "adj_shape")
"""Keys whose presence marks an ``.npz`` as the gnn-benchmark layout."""

_COMMENT = re.compile(rb"#[^\n]*")
_MAX_DIGITS = 18  # every 18-digit id fits in int64; longer tokens could overflow silently
_WS = np.zeros(256, dtype=bool)
_WS[[9, 10, 11, 12, 13, 32]] = True  # the bytes bytes.split() treats as whitespace


def _blank_comments(raw: bytes) -> bytes:
    """Replace every ``#...`` comment by spaces, keeping byte offsets (and line numbers)."""
    if b"#" not in raw:
        return raw
    return _COMMENT.sub(lambda m: b" " * (m.end() - m.start()), raw)


def _line_of(raw: bytes, pos: int) -> tuple[int, str]:
    """1-based line number of byte ``pos`` and that line's text (shortened) for messages."""
    start = raw.rfind(b"\n", 0, pos) + 1
    end = raw.find(b"\n", pos)
    end = len(raw) if end < 0 else end
    text = raw[start:end].rstrip(b"\r").decode("utf-8", errors="replace")
    if len(text) > 80:
        text = text[:77] + "..."
    return raw.count(b"\n", 0, pos) + 1, text


def _bad_line(path: str, raw: bytes, pos: int, what: str, fix: str) -> GraphFormatError:
    line, text = _line_of(raw, pos)
    return GraphFormatError(
        f"{path}, line {line}: {what} in {text!r}",
        "the edge list cannot be read",
        fix,
    )


def _require_file(path: Path) -> None:
    if not path.is_file():
        raise GraphFormatError(
            f"graph file {path} does not exist", "there is no graph to load",
            "check the path (relative paths start at the current directory)",
        )


def _read_bytes(path: Path) -> bytes:
    name = str(path)
    _require_file(path)
    try:
        if path.name.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                return f.read()
        return path.read_bytes()
    except (OSError, EOFError) as e:  # gzip.BadGzipFile is an OSError
        raise GraphFormatError(
            f"{name} cannot be read: {e}", "the edge list cannot be loaded",
            "check that the file is complete and, for .gz, really gzip-compressed",
        ) from e


def parse_edge_list(raw: bytes, name: str = "<edge list>") -> tuple[np.ndarray, np.ndarray]:
    """Parse the text of an edge list into ``(src, dst)`` int64 arrays.

    Vectorised: token boundaries, field counts and characters are checked with numpy over the
    bytes, the numbers are converted by ``np.fromstring``. Raises :class:`GraphFormatError`
    naming ``name``, the first bad line number and its text.
    """
    text = _blank_comments(raw)
    b = np.frombuffer(text, dtype=np.uint8)
    if b.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    ws = _WS[b]
    prev_ws = np.empty_like(ws)
    prev_ws[0] = True
    prev_ws[1:] = ws[:-1]
    next_ws = np.empty_like(ws)
    next_ws[-1] = True
    next_ws[:-1] = ws[1:]
    digit = (b >= 48) & (b <= 57)
    sign = ((b == 45) | (b == 43)) & prev_ws & ~next_ws  # a sign opens a token, never ends it
    bad = ~(ws | digit | sign)
    bad[1:] |= sign[:-1] & ~digit[1:]  # "-x": a sign must be followed by a digit
    if bad.any():
        pos = int(np.argmax(bad))
        raise _bad_line(name, raw, pos, "not a non-negative integer node id",
                        "write one 'src dst' pair of integer ids per line; "
                        "start comments with '#'")
    starts = np.flatnonzero(~ws & prev_ws)
    ends = np.flatnonzero(~ws & next_ws)  # inclusive; pairs with starts one to one
    too_long = (ends - starts + 1 - sign[starts]) > _MAX_DIGITS
    if too_long.any():
        pos = int(starts[np.argmax(too_long)])
        raise _bad_line(name, raw, pos, f"a node id with more than {_MAX_DIGITS} digits",
                        "relabel the nodes to 0..N-1")
    newlines = np.flatnonzero(b == 10)
    line_of_token = np.searchsorted(newlines, starts)  # 0-based line of each token
    fields = np.bincount(line_of_token)
    wrong = np.flatnonzero((fields != 0) & (fields != 2))
    if wrong.size:
        line = int(wrong[0])
        pos = int(starts[np.searchsorted(line_of_token, line)])
        raise _bad_line(name, raw, pos, f"{int(fields[line])} field(s) instead of 2",
                        "write exactly two ids per line: 'src dst'")
    values = np.fromstring(text, dtype=np.int64, sep=" ")
    if values.size != starts.size:  # pragma: no cover - the byte checks above prevent this
        values = np.array(text.split(), dtype=np.int64)
    neg = values < 0
    if neg.any():
        pos = int(starts[np.argmax(neg)])
        raise _bad_line(name, raw, pos, f"negative node id {int(values[np.argmax(neg)])}",
                        "node ids index arrays and must be >= 0; relabel the nodes to 0..N-1")
    pairs = values.reshape(-1, 2)
    return np.ascontiguousarray(pairs[:, 0]), np.ascontiguousarray(pairs[:, 1])


def read_edge_list(
    path: str | PathLike,
    *,
    num_nodes: int | None = None,
    undirected: bool = False,
    drop_self_loops: bool = False,
    drop_duplicates: bool = False,
) -> CSRGraph:
    """Read a SNAP-style edge list (``.txt`` or gzip ``.txt.gz``): ``src dst`` per line.

    Lines may hold ``#`` comments and be blank; ids are non-negative integers. Without
    ``num_nodes`` the graph has ``max id + 1`` nodes. The options are those of
    :meth:`CSRGraph.from_edges`; the graph's ``name`` is the path.
    """
    p = Path(path)
    raw = _read_bytes(p)
    src, dst = parse_edge_list(raw, str(p))
    _warn_sparse_ids(str(p), src, dst)
    log.debug("read %d edges from %s", src.size, p)
    return CSRGraph.from_edges(
        src, dst, num_nodes, undirected=undirected, drop_self_loops=drop_self_loops,
        drop_duplicates=drop_duplicates, name=str(p),
    )


def _warn_sparse_ids(name: str, src: np.ndarray, dst: np.ndarray) -> None:
    if src.size and max(int(src.max()), int(dst.max())) > 100 * src.size + 1_000_000:
        log.warning("%s: largest node id is far above the edge count; the CSR allocates one "
                    "row per id up to it, so relabel the nodes to 0..N-1 to save memory", name)


def _open_npz(path: Path) -> np.lib.npyio.NpzFile:
    name = str(path)
    _require_file(path)
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise GraphFormatError(
            f"{name} is not a readable numpy .npz archive: {e}", "the graph cannot be loaded",
            "write it with numpy.savez / savez_compressed",
        ) from e


def _get(npz: np.lib.npyio.NpzFile, name: str, key: str, what: str) -> np.ndarray:
    if key not in npz.files:
        raise GraphFormatError(
            f"{name} has no key '{key}' (keys: {', '.join(sorted(npz.files)) or 'none'})",
            f"{what} cannot be built",
            f"save the array under '{key}'",
        )
    try:
        return npz[key]
    except ValueError as e:  # object arrays need pickle, which is refused
        raise GraphFormatError(
            f"{name}: array '{key}' cannot be loaded without pickle ({e})",
            "object arrays are not accepted, for safety",
            f"save '{key}' as a plain numeric array",
        ) from e


def _int_array(arr: np.ndarray, name: str, key: str, ndim: int = 1) -> np.ndarray:
    if arr.ndim != ndim or arr.dtype.kind not in "iub":
        raise GraphFormatError(
            f"{name}: '{key}' is a {arr.ndim}-d {arr.dtype} array",
            f"'{key}' must be a {ndim}-d integer array",
            f"save '{key}' as a {ndim}-d int64 array",
        )
    return arr.astype(np.int64, copy=False)


def _check_node_data(name: str, num_nodes: int, x, y) -> None:
    for key, arr in (("x", x), ("y", y)):
        if arr is not None and (arr.ndim < 1 or arr.shape[0] != num_nodes):
            raise GraphFormatError(
                f"{name}: '{key}' has shape {arr.shape} but the graph has {num_nodes} nodes",
                f"'{key}' needs one row per node",
                f"save '{key}' with {num_nodes} rows (or pass num_nodes to match it)",
            )


def read_npz(
    path: str | PathLike,
    *,
    undirected: bool = False,
    drop_self_loops: bool = False,
    drop_duplicates: bool = False,
) -> CSRGraph:
    """Read an ``.npz`` of edge arrays: ``src``, ``dst`` (equal length, ids >= 0).

    Optional ``num_nodes`` (scalar; default ``max id + 1``), ``x`` (features, one row per node)
    and ``y`` (labels, one per node; stored as int64 when integral). Loaded with
    ``allow_pickle=False``.
    """
    p = Path(path)
    name = str(p)
    with _open_npz(p) as npz:
        src = _int_array(_get(npz, name, "src", "the edge list"), name, "src")
        dst = _int_array(_get(npz, name, "dst", "the edge list"), name, "dst")
        if src.shape != dst.shape:
            raise GraphFormatError(
                f"{name}: 'src' has {src.shape[0]} entries but 'dst' has {dst.shape[0]}",
                "an edge list needs one source per destination",
                "save src and dst arrays of equal length",
            )
        num_nodes = None
        if "num_nodes" in npz.files:
            nn = _int_array(_get(npz, name, "num_nodes", "the graph"), name, "num_nodes", 0)
            num_nodes = int(nn)
            if num_nodes < 0:
                raise GraphFormatError(f"{name}: num_nodes is {num_nodes}",
                                       "a graph cannot have fewer than 0 nodes",
                                       "save a non-negative num_nodes")
        x = _get(npz, name, "x", "features") if "x" in npz.files else None
        y = _get(npz, name, "y", "labels") if "y" in npz.files else None
    if y is not None and y.dtype.kind in "iub":
        y = y.astype(np.int64, copy=False)
    _warn_sparse_ids(name, src, dst)
    g = CSRGraph.from_edges(
        src, dst, num_nodes, undirected=undirected, drop_self_loops=drop_self_loops,
        drop_duplicates=drop_duplicates, name=name, x=x, y=y,
    )
    _check_node_data(name, g.num_nodes, x, y)
    return g


def is_gnn_benchmark(path: str | PathLike) -> bool:
    """True if the ``.npz`` at ``path`` has the gnn-benchmark adjacency keys."""
    with _open_npz(Path(path)) as npz:
        return all(k in npz.files for k in GNN_BENCHMARK_KEYS)


def _csr_parts(npz, name: str, prefix: str, what: str):
    """Validated ``(indptr, indices, data, shape)`` of the CSR matrix stored under ``prefix``."""
    indptr = _int_array(_get(npz, name, f"{prefix}_indptr", what), name, f"{prefix}_indptr")
    indices = _int_array(_get(npz, name, f"{prefix}_indices", what), name, f"{prefix}_indices")
    data = _get(npz, name, f"{prefix}_data", what)
    shape = _int_array(_get(npz, name, f"{prefix}_shape", what), name, f"{prefix}_shape")
    problem = None
    if shape.shape != (2,) or shape.min() < 0:
        problem = f"'{prefix}_shape' is {shape.tolist()}, not [rows, cols]"
    elif indptr.shape[0] != shape[0] + 1:
        problem = (f"'{prefix}_indptr' has {indptr.shape[0]} entries for {shape[0]} rows "
                   f"(needs {shape[0] + 1})")
    elif indptr[0] != 0 or np.any(np.diff(indptr) < 0) or indptr[-1] != indices.shape[0]:
        problem = f"'{prefix}_indptr' is not a valid offset array for {indices.shape[0]} entries"
    elif data.shape != indices.shape:
        problem = (f"'{prefix}_data' has {data.shape[0] if data.ndim else 0} entries but "
                   f"'{prefix}_indices' has {indices.shape[0]}")
    elif indices.size and (indices.min() < 0 or indices.max() >= shape[1]):
        problem = f"'{prefix}_indices' has a column outside [0, {shape[1]})"
    if problem:
        raise GraphFormatError(f"{name}: {problem}", f"{what} cannot be built",
                               "re-export the matrix with scipy.sparse.csr_matrix")
    return indptr, indices, data, (int(shape[0]), int(shape[1]))


def read_gnn_benchmark(
    path: str | PathLike,
    *,
    undirected: bool = False,
    drop_self_loops: bool = False,
    drop_duplicates: bool = False,
) -> CSRGraph:
    """Read the gnn-benchmark ``.npz`` layout (Cora, CiteSeer, ... of Shchur et al.).

    ``adj_*`` is the adjacency as CSR: a stored entry at row ``i``, column ``j`` is the edge
    ``i -> j`` (its value is ignored). ``attr_*`` (CSR) or ``attr_matrix`` (dense) become the
    dense float32 features ``x``; ``labels`` become int64 ``y``. Built with numpy only.
    """
    p = Path(path)
    name = str(p)
    with _open_npz(p) as npz:
        indptr, indices, _, shape = _csr_parts(npz, name, "adj", "the adjacency")
        if shape[0] != shape[1]:
            raise GraphFormatError(f"{name}: adjacency shape is {list(shape)}",
                                   "an adjacency matrix must be square",
                                   "save an N x N adjacency")
        n = shape[0]
        x = None
        if "attr_indptr" in npz.files:
            a_ptr, a_idx, a_data, a_shape = _csr_parts(npz, name, "attr", "the features")
            x = np.zeros(a_shape, dtype=np.float32)
            x[np.repeat(np.arange(a_shape[0]), np.diff(a_ptr)), a_idx] = a_data
        elif "attr_matrix" in npz.files:
            x = np.asarray(_get(npz, name, "attr_matrix", "the features"), dtype=np.float32)
        y = None
        if "labels" in npz.files:
            y = _int_array(_get(npz, name, "labels", "the labels"), name, "labels")
    _check_node_data(name, n, x, y)
    src = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    return CSRGraph.from_edges(
        src, indices, n, undirected=undirected, drop_self_loops=drop_self_loops,
        drop_duplicates=drop_duplicates, name=name, x=x, y=y,
    )
