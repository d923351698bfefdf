"""Edge inputs that split across ranks: each rank reads its own share, in input order.

The shares of ranks ``0 .. W-1`` concatenated are the input's edges in a single process's order,
so edge ids (positions in the input) agree however many ranks read. Splittable inputs: ``rmat:``,
one uncompressed edge list (byte ranges cut at line starts) and a directory or glob of shards
(contiguous runs of files per rank, balanced by bytes); anything else is read whole by rank 0
(docs/partitioning.md#distributed-partitioning). Pure I/O: no collectives, and no import of
``datasets`` (which imports this module).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from os import PathLike
from pathlib import Path

import numpy as np

from ..errors import GraphFormatError, MissingDependencyError
from .formats import SHARD_SUFFIXES, is_sharded, shard_files
from .readers import _require_file, edge_index_pair, parse_edge_list, read_text_bytes, text_bytes

__all__ = ["EdgeShare", "SHARD_SUFFIXES", "is_sharded", "node_rows_file", "read_files_share",
           "read_text_range", "shard_files", "TEXT_SUFFIXES"]

log = logging.getLogger(__name__)

TEXT_SUFFIXES = (".txt", ".edges", ".el")
"""Uncompressed whitespace edge lists, which ranks split by byte ranges."""


@dataclass
class EdgeShare:
    """One rank's edges (int64, input order) and what it knows of the whole input.

    ``num_nodes`` is the input's declared node count (R-MAT, an ``.npz`` with ``num_nodes``) or
    ``None`` (then ``max id + 1`` over all ranks); ``x``/``y`` are the whole input's node data
    (only rank 0 of a non-splittable input holds them); ``name`` is the graph's name.
    """

    src: np.ndarray
    dst: np.ndarray
    name: str
    num_nodes: int | None = None
    x: np.ndarray | None = None
    y: np.ndarray | None = None


NODE_DTYPES = ("<f4", "<f8", "<f2", "<i8", "<i4", "<i2", "|i1", "|u1", "|b1", "<u4", "<u8", "<u2")
"""Dtypes accepted for node rows (features, labels)."""


def node_rows_file(path: str | PathLike, n: int, what: str) -> np.ndarray:
    """A ``.npy`` of node rows (``n`` rows, plain numeric dtype), memory-mapped."""
    try:
        a = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as e:
        raise GraphFormatError(f"{what} file {path} is not a readable .npy ({e})",
                               "the node data cannot be used",
                               "save it with numpy.save (no pickle)") from e
    if a.ndim == 0 or a.shape[0] != n or a.dtype.str not in NODE_DTYPES:
        raise GraphFormatError(f"{what} file {path} holds {a.dtype}{list(a.shape)}",
                               f"{what} need one row per node ({n}) in a plain numeric dtype",
                               f"save {n} rows")
    return a


def edge_array(path: Path) -> np.ndarray:
    """The edge_index in a ``.npy`` of shape ``(2, E)`` or ``(E, 2)``, memory-mapped, as
    ``(2, E)`` (PyG's orientation where a ``(2, 2)`` array is ambiguous)."""
    try:
        a = np.load(path, mmap_mode="r", allow_pickle=False)
        if a.ndim != 2 or 2 not in a.shape:
            raise ValueError(f"shape {a.shape} is not (2, E) or (E, 2)")
    except (OSError, ValueError) as e:
        raise GraphFormatError(f"{path} is not a usable edge array ({e})",
                               "the edges cannot be read",
                               "save a (2, E) or (E, 2) int array") from e
    return a.T if a.shape[0] != 2 else a


def _read_npy(path: Path) -> tuple[np.ndarray, np.ndarray]:
    if not path.name.lower().endswith(".src.npy"):
        return edge_index_pair(np.asarray(edge_array(path)), str(path))
    try:
        other = path.with_name(path.name[: -len(".src.npy")] + ".dst.npy")
        src = np.load(path, mmap_mode="r", allow_pickle=False)
        dst = np.load(other, mmap_mode="r", allow_pickle=False)
        if src.ndim != 1 or src.shape != dst.shape:
            raise ValueError(f"{path.name} and {other.name} are not 1-d of equal length")
    except (OSError, ValueError) as e:
        raise GraphFormatError(f"{path} is not a usable edge array ({e})",
                               "the edges cannot be read",
                               "save int arrays: one (2, E) .npy, or NAME.src.npy + NAME.dst.npy"
                               ) from e
    if src.dtype.kind not in "iu" or dst.dtype.kind not in "iu":
        raise GraphFormatError(f"{path}: edge ids have dtype {src.dtype}/{dst.dtype}",
                               "node ids must be integers", "save the arrays as int64")
    return np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)


def _read_parquet(path: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        import pyarrow.parquet as pq
    except ImportError as e:
        raise MissingDependencyError(
            f"{path} is a Parquet file and pyarrow is not installed",
            "the edges cannot be read", "pip install 'mnmg-sampler[parquet]'") from e
    try:
        table = pq.read_table(path, columns=["src", "dst"])
    except Exception as e:  # pyarrow raises its own ArrowInvalid / KeyError types
        raise GraphFormatError(f"{path} cannot be read as Parquet with columns src, dst ({e})",
                               "the edges cannot be read",
                               "write int64 columns named src and dst") from e
    return (table.column("src").to_numpy().astype(np.int64, copy=False),
            table.column("dst").to_numpy().astype(np.int64, copy=False))


def _read_file(path: Path) -> tuple[np.ndarray, np.ndarray]:
    name = path.name.lower()
    if name.endswith(".npy"):
        return _read_npy(path)
    if name.endswith(".parquet"):
        return _read_parquet(path)
    return parse_edge_list(read_text_bytes(path), str(path))


def _line_start(f, pos: int) -> int:
    """The first line start at or after byte ``pos`` of the open file ``f``."""
    if pos == 0:
        return 0
    f.seek(pos - 1)
    while True:
        block = f.read(1 << 16)
        if not block:
            return f.tell()
        i = block.find(b"\n")
        if i >= 0:
            return f.tell() - len(block) + i + 1


def read_text_range(path: Path, rank: int, world: int) -> tuple[np.ndarray, np.ndarray]:
    """Edges of the lines of ``path`` that start in bytes ``[r*S/W, (r+1)*S/W)``."""
    _require_file(path)
    size = path.stat().st_size
    with open(path, "rb") as f:
        lo = _line_start(f, rank * size // world)
        hi = _line_start(f, (rank + 1) * size // world)
        f.seek(lo)
        raw = f.read(max(0, hi - lo))
    if lo == 0:
        raw = text_bytes(raw, str(path))
    return parse_edge_list(raw, f"{path} (bytes {lo}..{hi})")


def _my_files(files: list[Path], rank: int, world: int) -> list[Path]:
    sizes = np.array([max(1, f.stat().st_size) for f in files], np.float64)
    mid = (np.cumsum(sizes) - sizes / 2) / sizes.sum()  # each file's byte midpoint in [0, 1)
    owner = np.minimum((mid * world).astype(np.int64), world - 1)
    return [f for f, o in zip(files, owner, strict=True) if o == rank]


def _empty() -> tuple[np.ndarray, np.ndarray]:
    return np.zeros(0, np.int64), np.zeros(0, np.int64)


def _cat(pairs: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    if not pairs:
        return _empty()
    return (np.concatenate([p[0] for p in pairs]).astype(np.int64, copy=False),
            np.concatenate([p[1] for p in pairs]).astype(np.int64, copy=False))


def read_files_share(spec: str, rank: int, world: int) -> tuple[np.ndarray, np.ndarray]:
    """Rank ``rank``'s edges of the directory or glob of shards ``spec``: a contiguous run of its
    files (balanced by bytes), read in name order."""
    return _cat([_read_file(f) for f in _my_files(shard_files(spec), rank, world)])
