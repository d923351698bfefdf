"""Readers of whitespace edge lists and numpy files into a :class:`CSRGraph`: SNAP-style edge
lists, ``.npz`` / ``.npy`` edge arrays, ``scipy.sparse.save_npz`` matrices and the gnn-benchmark
layout (docs/formats.md#input-graphs; the registry of formats is ``graph/datasets.py``).

All with numpy alone (scipy is not a runtime dependency), and all end in
:func:`~.build.build_graph` (renumbering, memory and id-bound checks before any allocation).
Node ids must be integers. Edge lists are parsed and validated vectorised, so a malformed file
is reported with its name, line number and line instead of a bare ``ValueError``.
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
from .build import MAX_NODE_ID, ReadOptions, build_graph, check_id_bound
from .csr import CSRGraph, entry_rows

__all__ = [
    "MAX_NODE_ID",
    "MASK_KEYS",
    "check_id_bound",
    "build_graph",
    "ReadOptions",
    "read_text_bytes",
    "has_header_row",
    "header_line",
    "read_edge_list",
    "read_npz",
    "read_npy",
    "read_scipy_npz",
    "is_scipy_sparse",
    "read_gnn_benchmark",
    "is_gnn_benchmark",
    "GNN_BENCHMARK_KEYS",
]

log = logging.getLogger(__name__)

MASK_KEYS = {"train": ("train_mask", "train"), "val": ("val_mask", "valid_mask", "val"),
             "test": ("test_mask", "test")}
"""Split names and the keys a file may store their boolean node masks under."""

GNN_BENCHMARK_KEYS = ("adj_data", "adj_indices", "adj_indptr", "adj_shape")
"""Keys whose presence marks an ``.npz`` as the gnn-benchmark layout."""

_COMMENT = re.compile(rb"#[^\n]*")
_MAX_DIGITS = 19  # int64 ids have up to 19 digits; 19-digit tokens are compared with the max
_INT64_MAX = np.frombuffer(str(2**63 - 1).encode(), dtype=np.uint8)
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


def input_path(path: str | PathLike) -> tuple[Path, str]:
    """``(Path, name for messages)`` of an input file that exists (else a typed error)."""
    p = Path(path)
    _require_file(p)
    return p, str(p)


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


_UTF8_BOM = b"\xef\xbb\xbf"
_WIDE_BOMS = {b"\xff\xfe": "UTF-16 (little-endian)", b"\xfe\xff": "UTF-16 (big-endian)"}


def text_bytes(raw: bytes, name: str) -> bytes:
    """``raw`` without a UTF-8 byte-order mark (what Excel and many Windows tools write);
    :class:`GraphFormatError` for UTF-16/32 text, which is not ASCII-compatible."""
    if raw.startswith(_UTF8_BOM):
        return raw[len(_UTF8_BOM):]
    enc = next((v for k, v in _WIDE_BOMS.items() if raw.startswith(k)), None)
    if enc is None and b"\x00" in raw[:4096]:
        enc = "UTF-16 or UTF-32 (it holds NUL bytes)"
    if enc is not None:
        raise GraphFormatError(f"{name} is {enc} text, not UTF-8 or ASCII",
                               "the edge list cannot be read",
                               "save it as UTF-8 (e.g. iconv -f UTF-16 -t UTF-8 IN > OUT)")
    return raw


def read_text_bytes(path: Path) -> bytes:
    """The bytes of a text edge list (gzip decompressed, BOM stripped, UTF-16 refused)."""
    return text_bytes(_read_bytes(path), str(path))


_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def is_number(token: str) -> bool:
    """True for a token that reads as a number (``12``, ``-3``, ``1.5``, ``1e3``)."""
    return bool(_NUMBER.match(token.strip().strip('"').strip("'")))


def header_line(raw: bytes, delimiter: str | None = None) -> tuple[int, str] | None:
    """``(line number, text)`` of the header row of an edge list, or ``None``.

    The header is the first line that is neither blank nor a ``#`` comment, when none of its
    fields is a number (``src dst``). A first line with some numeric field (``0 1e3``,
    ``a 1``) is data, and a malformed one is reported by the parser, never skipped.
    """
    for no, line in enumerate(raw.split(b"\n"), 1):
        s = line.split(b"#", 1)[0].strip()
        if s:
            text = s.decode("utf-8", errors="replace")
            fields = text.split(delimiter) if delimiter else text.split()
            if any(is_number(f) for f in fields):
                return None
            return no, line.rstrip(b"\r").decode("utf-8", "replace")
    return None


def head_bytes(path: Path) -> bytes | None:
    """The first 64 KiB of a text file (gunzipped for ``.gz``, without a UTF-8 byte-order
    mark), or ``None`` when it cannot be read (its reader reports why)."""
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            head = f.read(1 << 16)
    except (OSError, EOFError):
        return None
    return head[len(_UTF8_BOM):] if head.startswith(_UTF8_BOM) else head


def has_header_row(path: Path) -> bool:
    """True if the text edge list at ``path`` starts with a header row (:func:`header_line`);
    False for a file that cannot be read (its reader reports it)."""
    head = head_bytes(path)
    return head is not None and header_line(head) is not None


def _blank_line(raw: bytes, line: int) -> bytes:
    """``raw`` with line ``line`` (1-based) replaced by spaces, keeping offsets."""
    start = 0
    for _ in range(line - 1):
        start = raw.index(b"\n", start) + 1
    end = raw.find(b"\n", start)
    end = len(raw) if end < 0 else end
    return raw[:start] + b" " * (end - start) + raw[end:]


def parse_edge_list(raw: bytes, name: str = "<edge list>") -> tuple[np.ndarray, np.ndarray]:
    """Parse the text of an edge list into ``(src, dst)`` int64 arrays, vectorised over the
    bytes with numpy; :class:`GraphFormatError` names ``name``, the first bad line and its text.
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
        what = ("a non-ASCII byte (the file is not UTF-8 / ASCII digits)" if b[pos] >= 128
                else "not a non-negative integer node id")
        raise _bad_line(name, raw, pos, what,
                        "write one 'src dst' pair of integer ids per line (a header row has no "
                        "number in it); start comments with '#'")
    starts = np.flatnonzero(~ws & prev_ws)
    ends = np.flatnonzero(~ws & next_ws)  # inclusive; pairs with starts one to one
    ndig = ends - starts + 1 - sign[starts]
    too_long = ndig > _MAX_DIGITS
    full = np.flatnonzero(ndig == _MAX_DIGITS)
    if full.size:  # 19 digits: above 2**63 - 1 when lexicographically greater
        first = (starts[full] + sign[starts[full]])[:, None] + np.arange(_MAX_DIGITS)
        d = b[first]
        diff = d != _INT64_MAX
        at = np.argmax(diff, axis=1)
        over = diff.any(axis=1) & (d[np.arange(full.size), at] > _INT64_MAX[at])
        too_long[full[over]] = True
    if too_long.any():
        pos = int(starts[np.argmax(too_long)])
        raise _bad_line(name, raw, pos, "a node id above 2**63 - 1",
                        "node ids are int64: relabel the nodes (e.g. to 0..N-1)")
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


def read_edge_list(path: str | PathLike, *, num_nodes: int | None = None,
                   **opts) -> CSRGraph:
    """Read a SNAP-style edge list (``.txt`` or gzip ``.txt.gz``): ``src dst`` per line, ``#``
    comments, blank lines and CRLF allowed (docs/formats.md#snap-style-edge-lists-txt-txtgz).
    A header row (:func:`header_line`) is recorded in ``graph.header``. Without ``num_nodes``
    the graph has ``max id + 1`` nodes, unless renumbered.
    """
    p = Path(path)
    raw = read_text_bytes(p)
    header = header_line(raw)
    src, dst = parse_edge_list(raw if header is None else _blank_line(raw, header[0]), str(p))
    log.debug("read %d edges from %s", src.size, p)
    g = build_graph(str(p), src, dst, ReadOptions(**opts), num_nodes)
    g.header = header
    return g


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


def as_numpy(v) -> np.ndarray:
    """A tensor (copied to the host) or an array-like as a numpy array."""
    return v.detach().cpu().numpy() if hasattr(v, "detach") else np.asarray(v)


def as_ids(arr: np.ndarray, name: str, key: str) -> np.ndarray:
    """``arr`` as int64 node ids. Refused with :class:`GraphFormatError`: bool arrays (a mask
    is not a list of ids), floats (never cast silently, whole or not), uint64 above
    2**63 - 1, anything not an integer."""
    kind = arr.dtype.kind
    problem = None
    if kind == "b":
        problem = "bool array (a mask, not node ids)"
    elif kind == "f":
        whole = bool(np.isfinite(arr).all() and np.array_equal(arr, np.floor(arr)))
        problem = f"{arr.dtype} array{'' if whole else ' with fractional values'}"
    elif kind == "u" and arr.dtype.itemsize == 8 and arr.size and int(arr.max()) >= 2**63:
        problem = "uint64 array with values above 2**63 - 1"
    elif kind not in "iu":
        problem = f"{arr.dtype} array"
    if problem is not None:
        raise GraphFormatError(f"{name}: '{key}' is a {problem}",
                               "node ids must be an integer array",
                               f"save '{key}' as an int64 array of node ids")
    return arr.astype(np.int64, copy=False)


def _int_array(arr: np.ndarray, name: str, key: str, ndim: int = 1,
               allow_bool: bool = False) -> np.ndarray:
    if arr.ndim != ndim or arr.dtype.kind not in ("iub" if allow_bool else "iu"):
        raise GraphFormatError(
            f"{name}: '{key}' is a {arr.ndim}-d {arr.dtype} array",
            f"'{key}' must be a {ndim}-d integer array (bool is a mask, not ids)",
            f"save '{key}' as a {ndim}-d int64 array",
        )
    return arr.astype(np.int64) if arr.dtype.kind == "b" else as_ids(arr, name, key)


def check_node_rows(name: str, num_nodes: int, x, y) -> None:
    for key, arr in (("x", x), ("y", y)):
        if arr is not None and (arr.ndim < 1 or arr.shape[0] != num_nodes):
            raise GraphFormatError(
                f"{name}: '{key}' has shape {arr.shape} but the graph has {num_nodes} nodes",
                f"'{key}' needs one row per node",
                f"save '{key}' with {num_nodes} rows (or pass num_nodes to match it)",
            )


def edge_index_pair(arr: np.ndarray, name: str, key: str = "edge_index"
                    ) -> tuple[np.ndarray, np.ndarray]:
    """``(src, dst)`` of an integer ``edge_index`` array, ``2 x E`` (PyG) or ``E x 2``."""
    if arr.ndim == 2 and arr.shape[0] != 2 and arr.shape[1] == 2:
        arr = arr.T
    if arr.ndim != 2 or arr.shape[0] != 2:
        raise GraphFormatError(
            f"{name}: '{key}' is a {arr.dtype} array of shape {tuple(arr.shape)}",
            "an edge_index must be an integer array of shape (2, E): row 0 sources, row 1 "
            "targets",
            f"save '{key}' as a (2, E) int64 array",
        )
    arr = as_ids(arr, name, key)
    return np.ascontiguousarray(arr[0]), np.ascontiguousarray(arr[1])


def masks_from(arrays: dict, name: str, num_nodes: int,
               node_ids: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Boolean split masks found in ``arrays`` under the keys of :data:`MASK_KEYS`, each stored
    as ``bool [num_nodes]`` or node ids (original ids for a renumbered graph: :func:`as_mask`).
    """
    out = {}
    for split, keys in MASK_KEYS.items():
        key = next((k for k in keys if k in arrays), None)
        if key is not None:
            out[split] = as_mask(np.asarray(arrays[key]), num_nodes, f"{name}: '{key}'",
                                 node_ids)
    return out


def as_mask(arr: np.ndarray, num_nodes: int, what: str,
            node_ids: np.ndarray | None = None) -> np.ndarray:
    """A bool ``[num_nodes]`` mask from a bool mask or an array of node ids (original ids,
    translated through ``node_ids``, for a renumbered graph)."""
    arr = np.asarray(arr)
    if node_ids is not None and arr.dtype == np.bool_ and arr.ndim == 1 \
            and arr.shape[0] > int(node_ids[-1]):
        return arr[node_ids]
    if arr.dtype == np.bool_ and arr.ndim == 1 and arr.shape[0] == num_nodes:
        return arr
    if arr.dtype.kind in "iu" and arr.ndim <= 2 and (arr.ndim < 2 or 1 in arr.shape):
        ids = arr.astype(np.int64, copy=False).ravel()
        if node_ids is not None and ids.size:
            pos = np.minimum(np.searchsorted(node_ids, ids), node_ids.size - 1)
            ids = np.where(node_ids[pos] == ids, pos, -1)
        if ids.size and (ids.min() < 0 or ids.max() >= num_nodes):
            raise GraphFormatError(
                f"{what} holds node id {int(ids.max() if ids.max() >= num_nodes else ids.min())}"
                f" outside [0, {num_nodes})" if node_ids is None else
                f"{what} holds an id that is not a node of the graph",
                "the split cannot be built",
                "give node ids of the graph, or a bool mask with one entry per node")
        mask = np.zeros(num_nodes, dtype=bool)
        mask[ids] = True
        return mask
    raise GraphFormatError(
        f"{what} is a {arr.dtype} array of shape {tuple(arr.shape)}",
        f"a split needs a bool mask of {num_nodes} entries or a 1-d array of node ids",
        "save the mask as bool [num_nodes] or the split as int64 node ids")


def read_npz(path: str | PathLike, **opts) -> CSRGraph:
    """Read an ``.npz`` of edge arrays (``src`` and ``dst``, or ``edge_index``) with optional
    ``num_nodes``, ``x``, ``y`` and split masks (docs/formats.md#numpy-edge-arrays-npz-npy),
    loaded with ``allow_pickle=False``."""
    p = Path(path)
    name = str(p)
    with _open_npz(p) as npz:
        if "edge_index" in npz.files and "src" not in npz.files:
            src, dst = edge_index_pair(_get(npz, name, "edge_index", "the edge list"), name)
        else:
            if "src" not in npz.files:
                raise GraphFormatError(
                    f"{name} has no key 'src' nor 'edge_index' (keys: "
                    f"{', '.join(sorted(npz.files)) or 'none'})",
                    "the edge list cannot be built",
                    "save the edges as 'src' and 'dst' arrays, or as a (2, E) 'edge_index'")
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
        mask_arrays = {k: _get(npz, name, k, "the split") for keys in MASK_KEYS.values()
                       for k in keys if k in npz.files}
    if y is not None and y.dtype.kind in "iub":
        y = y.astype(np.int64, copy=False)
    g = build_graph(name, src, dst, ReadOptions(**opts), num_nodes, x=x, y=y)
    check_node_rows(name, g.num_nodes, g.x, g.y)
    g.masks = masks_from(mask_arrays, name, g.num_nodes, g.node_ids)
    return g


def read_npy(path: str | PathLike, **opts) -> CSRGraph:
    """Read a ``.npy`` holding one integer ``edge_index`` (``2 x E``, or ``E x 2``)."""
    p, name = input_path(path)
    try:
        arr = np.load(p, allow_pickle=False, mmap_mode="r")
    except (OSError, ValueError, EOFError) as e:
        raise GraphFormatError(
            f"{name} is not a readable numpy .npy array without pickle: {e}",
            "the graph cannot be loaded", "write a (2, E) int64 array with numpy.save",
        ) from e
    src, dst = edge_index_pair(np.asarray(arr), name, "the array")
    return build_graph(name, src, dst, ReadOptions(**opts))


SCIPY_KEYS = ("format", "shape")
"""Keys ``scipy.sparse.save_npz`` writes (with ``indptr``/``indices``/``data`` or
``row``/``col``/``data``)."""


def is_scipy_sparse(path: str | PathLike) -> bool:
    """True if the ``.npz`` at ``path`` was written by ``scipy.sparse.save_npz``."""
    with _open_npz(Path(path)) as npz:
        return all(k in npz.files for k in SCIPY_KEYS) and "data" in npz.files


def read_scipy_npz(path: str | PathLike, **opts) -> CSRGraph:
    """Read a square sparse matrix saved by ``scipy.sparse.save_npz`` (csr, csc or coo): a
    stored entry ``(i, j)`` is the edge ``i -> j`` (value ignored), in stored order."""
    p = Path(path)
    name = str(p)
    with _open_npz(p) as npz:
        fmt_arr = _get(npz, name, "format", "the matrix")
        fmt = fmt_arr.item().decode() if fmt_arr.dtype.kind == "S" else str(fmt_arr.item())
        shape = _int_array(_get(npz, name, "shape", "the matrix"), name, "shape")
        if shape.shape != (2,) or shape[0] != shape[1]:
            raise GraphFormatError(f"{name}: sparse matrix shape is {shape.tolist()}",
                                   "an adjacency matrix must be square",
                                   "save an N x N matrix")
        n = int(shape[0])
        if fmt == "coo":
            src = _int_array(_get(npz, name, "row", "the matrix"), name, "row")
            dst = _int_array(_get(npz, name, "col", "the matrix"), name, "col")
        elif fmt in ("csr", "csc"):
            indptr = _int_array(_get(npz, name, "indptr", "the matrix"), name, "indptr")
            indices = _int_array(_get(npz, name, "indices", "the matrix"), name, "indices")
            if indptr.shape[0] != n + 1 or (indptr.size and indptr[-1] != indices.shape[0]) \
                    or np.any(np.diff(indptr) < 0):
                raise GraphFormatError(f"{name}: 'indptr' does not match {n} rows and "
                                       f"{indices.shape[0]} entries", "the matrix is corrupt",
                                       "re-save it with scipy.sparse.save_npz")
            outer = entry_rows(indptr)
            src, dst = (outer, indices) if fmt == "csr" else (indices, outer)
        else:
            raise GraphFormatError(f"{name}: sparse format {fmt!r}",
                                   "only csr, csc and coo matrices are read",
                                   "convert with matrix.tocsr() before save_npz")
    if src.size and (min(int(src.min()), int(dst.min())) < 0
                     or max(int(src.max()), int(dst.max())) >= n):
        raise GraphFormatError(f"{name}: an entry lies outside the {n} x {n} matrix",
                               "the matrix is corrupt", "re-save it with scipy.sparse.save_npz")
    return build_graph(name, src, dst, ReadOptions(**opts), n)


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


def read_gnn_benchmark(path: str | PathLike, **opts) -> CSRGraph:
    """Read the gnn-benchmark ``.npz`` layout (Cora, CiteSeer, ... of Shchur et al.): ``adj_*``
    is the adjacency as CSR (entry ``(i, j)``: edge ``i -> j``), ``attr_*`` (CSR) or
    ``attr_matrix`` become float32 ``x``, ``labels`` int64 ``y``."""
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
            y = _int_array(_get(npz, name, "labels", "the labels"), name, "labels",
                           allow_bool=True)
    check_node_rows(name, n, x, y)
    return build_graph(name, entry_rows(indptr), indices, ReadOptions(**opts), n, x=x, y=y)
