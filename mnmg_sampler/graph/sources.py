"""Edge inputs that split across ranks: each rank reads its own share, in input order.

A *share* is the edges rank ``r`` of ``W`` reads; the shares of ranks ``0 .. W-1`` concatenated
are the input's edges in the order a single process reads them, so edge ids (positions in the
input) agree however many ranks read. Splittable inputs:

* ``rmat:SCALE[:EF]``: rank ``r`` draws edges ``[r*m/W, (r+1)*m/W)`` (``rmat_edge_range``).
* one uncompressed whitespace edge list (``.txt``, ``.edges``, ``.el`` without a header row):
  byte ranges cut at line starts.
* a directory (other than an OGB directory) or a glob of shards, read in sorted name order,
  contiguous runs of files per rank (balanced by bytes): whitespace edge lists (also ``.gz``),
  ``.npy`` edge_index arrays of shape ``(2, E)``, ``NAME.src.npy`` beside ``NAME.dst.npy``, and
  Parquet files with ``src`` and ``dst`` columns (needs pyarrow).

Anything else (any other single file of :data:`~.datasets.FORMATS`, an OGB directory,
built-ins) is read whole by rank 0 with :func:`~.datasets.load_graph`; the other ranks' shares
are empty. Pure I/O: no collectives here (see ``distributed.ingest``).
"""

from __future__ import annotations

import glob
import logging
from dataclasses import dataclass
from os import PathLike
from pathlib import Path

import numpy as np

from ..errors import GraphFormatError, MissingDependencyError

__all__ = ["EdgeShare", "SHARD_SUFFIXES", "is_sharded", "node_rows_file", "read_share",
           "shard_files"]

log = logging.getLogger(__name__)

TEXT_SUFFIXES = (".txt", ".edges", ".el")
SHARD_SUFFIXES = (*TEXT_SUFFIXES, *(s + ".gz" for s in TEXT_SUFFIXES), ".npy", ".parquet")
_GLOB = set("*?[")


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


def is_sharded(spec: str | PathLike) -> bool:
    """True for a glob pattern, or a directory (not an OGB dataset directory) holding edge
    files; other directories are left to :func:`~.datasets.detect_format`."""
    s = str(spec)
    if s.strip().lower().startswith("rmat:"):
        return False
    p = Path(s).expanduser()
    try:
        if p.is_dir():
            from .ogb import is_ogb_dir

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


def _read_npy(path: Path) -> tuple[np.ndarray, np.ndarray]:
    name = path.name.lower()
    try:
        if name.endswith(".src.npy"):
            other = path.with_name(path.name[: -len(".src.npy")] + ".dst.npy")
            src = np.load(path, mmap_mode="r", allow_pickle=False)
            dst = np.load(other, mmap_mode="r", allow_pickle=False)
            if src.ndim != 1 or src.shape != dst.shape:
                raise ValueError(f"{path.name} and {other.name} are not 1-d of equal length")
        else:
            from .readers import edge_index_pair

            a = np.load(path, mmap_mode="r", allow_pickle=False)
            if a.ndim != 2 or 2 not in a.shape:
                raise ValueError(f"shape {a.shape} is not (2, E) or (E, 2)")
            src, dst = edge_index_pair(a, str(path))
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
    from .readers import _read_bytes, parse_edge_list

    name = path.name.lower()
    if name.endswith(".npy"):
        return _read_npy(path)
    if name.endswith(".parquet"):
        return _read_parquet(path)
    return parse_edge_list(_read_bytes(path), str(path))


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
    from .readers import _require_file, parse_edge_list

    _require_file(path)
    size = path.stat().st_size
    with open(path, "rb") as f:
        lo = _line_start(f, rank * size // world)
        hi = _line_start(f, (rank + 1) * size // world)
        f.seek(lo)
        raw = f.read(max(0, hi - lo))
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


def _has_header(path: Path) -> bool:
    from .datasets import _has_header as has

    return has(path)


def _whole(spec: str) -> EdgeShare:
    """A non-splittable input: load it and recover its edges in input order."""
    from .datasets import load_graph

    g = load_graph(spec, undirected=False)
    order = np.argsort(g.edge_ids, kind="stable")
    rows = np.repeat(np.arange(g.num_nodes, dtype=np.int64), g.degrees())
    return EdgeShare(g.indices[order], rows[order], g.name, g.num_nodes, g.x, g.y)


def read_share(spec: str | PathLike, rank: int, world: int, seed: int = 0) -> EdgeShare:
    """Rank ``rank``'s share of the edges of graph ``spec`` (see the module docstring)."""
    s = str(spec)
    key = s.strip().lower()
    if key.startswith("rmat:"):
        from .datasets import _parse_rmat
        from .rmat import rmat_edge_range

        scale, ef = _parse_rmat(key)
        m = ef << scale
        src, dst = rmat_edge_range(scale, ef, rank * m // world, (rank + 1) * m // world,
                                   seed=seed)
        return EdgeShare(src, dst, f"rmat:{scale}:{ef}", 1 << scale)
    path = Path(s).expanduser()
    if is_sharded(s):
        src, dst = _cat([_read_file(f) for f in _my_files(shard_files(s), rank, world)])
        return EdgeShare(src, dst, s)
    if path.is_file() and path.name.lower().endswith(TEXT_SUFFIXES) and not _has_header(path):
        src, dst = read_text_range(path, rank, world)
        return EdgeShare(src, dst, str(path))
    if rank == 0:
        return _whole(s)
    name = str(path) if path.exists() else key
    return EdgeShare(*_empty(), name)
