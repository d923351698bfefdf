"""Resolve a graph spec (a built-in name, ``rmat:...``, a path, or arrays) to a :class:`CSRGraph`.

One string names every graph a job, the CLI or a benchmark can use::

    cora                   the embedded Cora citation graph (features and labels; undirected)
    rmat:SCALE[:EF]        a Graph500 R-MAT graph, 2**SCALE nodes, EF*2**SCALE edges (EF=16)
    path                   a file or directory in one of the formats of :data:`FORMATS`
    dir/, 'dir/*.txt'      edge shards read in name order (graph/sources.py): a directory that
                           is not an OGB directory, or a glob

The Python API also takes a graph in memory: an ``edge_index`` (``2 x E`` tensor or array), a
``(src, dst)`` pair, a PyG ``Data``, a dict of arrays, or a :class:`CSRGraph`. :data:`FORMATS` is
the one registry of file formats (readers, CLI, YAML check and the "supported formats" error).
"""

from __future__ import annotations

import difflib
import importlib.resources
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from os import PathLike
from pathlib import Path

import numpy as np

from ..errors import GraphFormatError
from ..system.host_limits import check_allocation
from .build import MAX_NODE_ID, ReadOptions, build_graph
from .csr import CSRGraph, entry_rows
from .formats import (
    EDGE_LIST_SUFFIXES,
    FORMAT_DESCRIPTIONS,
    GRAPH_SUFFIXES,
    TABLE_SUFFIXES,
    TEXT_SUFFIXES,
    is_ogb_dir,
    is_sharded,
    supported_formats,
)
from .node_data import attach_node_data
from .ogb import read_ogb_dir
from .readers import (
    as_ids,
    as_numpy,
    edge_index_pair,
    has_header_row,
    is_gnn_benchmark,
    is_scipy_sparse,
    read_edge_list,
    read_gnn_benchmark,
    read_npy,
    read_npz,
    read_scipy_npz,
)
from .rmat import parse_rmat_spec, rmat_edge_range, rmat_graph
from .sources import TEXT_SUFFIXES as SPLIT_TEXT_SUFFIXES
from .sources import EdgeShare, read_files_share, read_text_range
from .tables import read_parquet, read_table
from .torch_files import graph_from_mapping, read_torch

__all__ = ["load_graph", "nonisolated_nodes", "BUILTINS", "SPEC_FORMS", "FORMATS",
           "GraphFormat", "detect_format", "supported_formats", "graph_from_memory",
           "EDGE_LIST_SUFFIXES", "GRAPH_SUFFIXES", "read_share"]

log = logging.getLogger(__name__)

BUILTINS = {"cora": "cora.npz"}
"""Built-in dataset names and their file in ``mnmg_sampler/data`` (provenance in its README)."""

_DEFAULT_UNDIRECTED = {"cora": True}  # Cora's citations are conventionally used undirected

def _read_text(path, **opts) -> CSRGraph:
    """Whitespace edge list; one with a header row goes through the table reader."""
    return read_table(path, **opts) if has_header_row(Path(path)) else read_edge_list(path, **opts)


def _suffix(*suffixes: str) -> Callable[[Path], bool]:
    return lambda p: p.is_file() and p.name.lower().endswith(suffixes)


@dataclass(frozen=True)
class GraphFormat:
    """One readable input format: its name, how a path is recognised, and its reader."""

    name: str
    pattern: str
    matches: Callable[[Path], bool]
    read: Callable[..., CSRGraph]


_READERS = (
    (_suffix(*TEXT_SUFFIXES), _read_text),
    (_suffix(*TABLE_SUFFIXES), read_table),
    (_suffix(".parquet", ".pq"), read_parquet),
    (_suffix(".npy"), read_npy),
    (lambda p: _suffix(".npz")(p) and is_gnn_benchmark(p), read_gnn_benchmark),
    (lambda p: _suffix(".npz")(p) and is_scipy_sparse(p), read_scipy_npz),
    (_suffix(".npz"), read_npz),
    (_suffix(".pt", ".pth"), read_torch),
    (is_ogb_dir, read_ogb_dir),
)

FORMATS: tuple[GraphFormat, ...] = tuple(
    GraphFormat(name, pattern, matches, read)
    for (name, pattern), (matches, read) in zip(FORMAT_DESCRIPTIONS, _READERS, strict=True))
"""Every file format :func:`load_graph` reads, in the order a path is matched against them
(names and patterns: :data:`mnmg_sampler.graph.formats.FORMAT_DESCRIPTIONS`)."""


SPEC_FORMS = (
    "a built-in name (" + ", ".join(BUILTINS) + "), "
    "'rmat:SCALE' or 'rmat:SCALE:EDGE_FACTOR' (e.g. rmat:16 or rmat:20:8), "
    "or a path in one of the supported formats:\n" + supported_formats()
)


def detect_format(path: str | PathLike) -> GraphFormat:
    """The format of the file or directory at ``path``; :class:`GraphFormatError` listing the
    supported formats when none matches."""
    p = Path(path)
    for f in FORMATS:
        if f.matches(p):
            return f
    what = "a directory without raw/edge.csv.gz" if p.is_dir() else \
        f"the file type of '{p.name}' is not recognised"
    raise GraphFormatError(f"graph '{path}': {what}", "no graph can be loaded",
                           "give a file in one of the supported formats:\n" + supported_formats())


def _bad_spec(spec: str, what: str, fix: str = "") -> GraphFormatError:
    return GraphFormatError(f"graph '{spec}': {what}", "no graph can be loaded",
                            fix or f"give {SPEC_FORMS}")


def _parse_rmat(spec: str) -> tuple[int, int]:
    try:
        return parse_rmat_spec(spec)
    except ValueError:
        raise _bad_spec(spec, "not of the form rmat:SCALE[:EDGE_FACTOR] with integers",
                        "write e.g. rmat:16 or rmat:20:8") from None


def _bad_memory(what: str) -> GraphFormatError:
    return GraphFormatError(
        f"in-memory graph: {what}", "no graph can be built",
        "pass an edge_index of shape (2, E), a (src, dst) pair of 1-d integer arrays, a PyG "
        "Data, a dict with 'edge_index', a CSRGraph, or a spec string / path")


def graph_from_memory(data, *, num_nodes: int | None = None, name: str = "in-memory graph",
                      **opts) -> CSRGraph:
    """A :class:`CSRGraph` from arrays: ``edge_index`` ``(2, E)``, ``(src, dst)``, PyG ``Data``
    or a dict with ``edge_index`` (and optional ``x``, ``y``, ``num_nodes``, masks); ``opts``
    are those of :class:`~.build.ReadOptions`."""
    if hasattr(data, "to_dict") and hasattr(data, "edge_index") and not isinstance(data, dict):
        d = data.to_dict()
        d.setdefault("num_nodes", data.num_nodes)
        return graph_from_mapping(d, name, **opts)
    if isinstance(data, Mapping):
        return graph_from_mapping(dict(data), name, **opts)
    if isinstance(data, (tuple, list)):
        if len(data) != 2:
            raise _bad_memory(f"a sequence of {len(data)} items")
        src, dst = as_numpy(data[0]), as_numpy(data[1])
        if src.ndim != 1 or dst.ndim != 1 or src.dtype == object or dst.dtype == object:
            raise _bad_memory(f"src / dst are {src.dtype}{list(src.shape)} and "
                              f"{dst.dtype}{list(dst.shape)}, not 1-d integer arrays")
        src, dst = as_ids(src, name, "src"), as_ids(dst, name, "dst")
    else:
        arr = as_numpy(data)
        if arr.dtype == object:
            raise _bad_memory(f"a {type(data).__name__} is not an edge_index")
        src, dst = edge_index_pair(arr, name)
    return build_graph(name, src, dst, ReadOptions(**opts), num_nodes)


def load_graph(
    spec,
    *,
    undirected: bool | None = None,
    drop_self_loops: bool = False,
    drop_duplicates: bool = False,
    seed: int = 0,
    x=None,
    y=None,
    masks: Mapping[str, object] | None = None,
    num_nodes: int | None = None,
    max_node_id: int | None = MAX_NODE_ID,
    renumber: str | bool = "auto",
) -> CSRGraph:
    """Load the graph named by ``spec``: a spec string or path (see the module docstring), or
    a graph in memory (``edge_index``, ``(src, dst)``, PyG ``Data``, dict, :class:`CSRGraph`).

    ``undirected=None`` keeps the dataset's default: True for ``cora``, False otherwise.
    ``seed`` only affects ``rmat:`` graphs. ``x``, ``y`` and ``masks`` (``{"train": ...}``)
    are arrays or file paths that replace the input's node data (for a renumbered graph, one
    row per node in ascending original id). ``num_nodes`` applies to arrays in memory.
    ``max_node_id`` and ``renumber``: as in :class:`~.build.ReadOptions`. Raises
    :class:`GraphFormatError` for an unknown spec, a missing file or a malformed one; the
    message lists the supported formats.
    """
    opts = dict(drop_self_loops=drop_self_loops, drop_duplicates=drop_duplicates,
                max_node_id=max_node_id, renumber=renumber)
    if isinstance(spec, CSRGraph):
        g = spec
    elif not isinstance(spec, (str, PathLike)):
        g = graph_from_memory(spec, num_nodes=num_nodes, undirected=bool(undirected), **opts)
    else:
        g = _load_spec(str(spec), undirected, seed, opts)
    return attach_node_data(g, x, y, masks)


def _load_spec(spec: str, undirected, seed, opts: dict) -> CSRGraph:
    key = spec.strip().lower()
    und = _DEFAULT_UNDIRECTED.get(key, False) if undirected is None else bool(undirected)
    if key in BUILTINS:
        res = importlib.resources.files("mnmg_sampler.data").joinpath(BUILTINS[key])
        with importlib.resources.as_file(res) as path:
            g = read_gnn_benchmark(path, undirected=und, **opts)
        g.name = key
        return g
    if key.startswith("rmat:"):
        scale, edge_factor = _parse_rmat(key)
        return rmat_graph(scale, edge_factor, seed, undirected=und,
                          drop_self_loops=opts["drop_self_loops"],
                          drop_duplicates=opts["drop_duplicates"])
    if is_sharded(spec):  # a directory (not OGB) or glob of edge shards (graph/sources.py)
        src, dst = read_files_share(spec, 0, 1)
        return build_graph(str(Path(spec).expanduser()), src, dst,
                           ReadOptions(undirected=und, **opts))
    path = Path(spec).expanduser()
    try:
        exists = path.exists()
    except OSError:  # e.g. a name too long for the file system: not a path
        exists = False
    if not exists:
        short = spec if len(spec) <= 80 else spec[:77] + "..."
        close = difflib.get_close_matches(key, [*BUILTINS, "rmat:SCALE"], n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise _bad_spec(short, f"no such built-in dataset or file{hint}")
    fmt = detect_format(path)
    log.debug("reading %s as %s", path, fmt.name)
    return fmt.read(path, undirected=und, **opts)


def _whole(spec: str, renumber: str | bool) -> EdgeShare:
    """A non-splittable input: load it and recover its edges in input order (original ids)."""
    g = load_graph(spec, undirected=False, renumber=renumber)
    order = np.argsort(g.edge_ids, kind="stable")
    src, dst = g.original_ids(g.indices[order]), g.original_ids(entry_rows(g.indptr)[order])
    # renumbered: the edges go back to the input's ids (the ingest renumbers them the same way:
    # the same distinct ids), x and y stay in node order
    return EdgeShare(src, dst, g.name, g.num_nodes if g.node_ids is None else None, g.x, g.y)


def read_share(spec: str | PathLike, rank: int, world: int, seed: int = 0,
               renumber: str | bool = "auto") -> EdgeShare:
    """Rank ``rank``'s share of the edges of graph ``spec`` (see :mod:`.sources`), in the
    input's own ids (renumbering, when any, is the caller's: ``distributed.ingest``)."""
    s = str(spec)
    key = s.strip().lower()
    if key.startswith("rmat:"):
        scale, ef = _parse_rmat(key)
        m = ef << scale
        check_allocation(f"rmat:{scale}:{ef}: rank {rank}'s {m // world:,} of {m:,} edges",
                         16 * (m // world + 1), "use a smaller SCALE or more ranks")
        src, dst = rmat_edge_range(scale, ef, rank * m // world, (rank + 1) * m // world,
                                   seed=seed)
        return EdgeShare(src, dst, f"rmat:{scale}:{ef}", 1 << scale)
    path = Path(s).expanduser()
    if is_sharded(s):
        return EdgeShare(*read_files_share(s, rank, world), s)
    if path.is_file() and path.name.lower().endswith(SPLIT_TEXT_SUFFIXES) \
            and not has_header_row(path):
        src, dst = read_text_range(path, rank, world)
        return EdgeShare(src, dst, str(path))
    if rank == 0:
        return _whole(s, renumber)
    name = str(path) if path.exists() else key
    return EdgeShare(np.zeros(0, np.int64), np.zeros(0, np.int64), name)


def nonisolated_nodes(graph: CSRGraph) -> np.ndarray:
    """Ids (int64, ascending) of the nodes with at least one neighbor to sample.

    That is in-degree ``>= 1``. Benchmarks draw seeds from these because half or more of an
    R-MAT graph's nodes are isolated and would make empty minibatches.
    """
    return np.flatnonzero(graph.degrees() >= 1).astype(np.int64, copy=False)
