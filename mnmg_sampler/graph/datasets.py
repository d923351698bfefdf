"""Resolve a graph spec (a built-in name, ``rmat:...``, a path, or arrays) to a :class:`CSRGraph`.

One string names every graph a job, the CLI or a benchmark can use::

    cora                   the embedded Cora citation graph (features and labels; undirected)
    rmat:SCALE[:EF]        a Graph500 R-MAT graph, 2**SCALE nodes, EF*2**SCALE edges (EF=16)
    path                   a file or directory in one of the formats of :data:`FORMATS`
    dir/, 'dir/*.txt'      edge shards read in name order (graph/sources.py): a directory that
                           is not an OGB directory, or a glob

The Python API also takes the graph in memory: an ``edge_index`` (``2 x E`` tensor or array), a
``(src, dst)`` pair, a PyG ``Data``, a dict of arrays, or a :class:`CSRGraph`.

:data:`FORMATS` is the one registry of file formats: the readers, the CLI, the YAML check and the
"supported formats" error all use it.
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
from .csr import CSRGraph
from .node_data import attach_node_data
from .readers import (
    MAX_NODE_ID,
    is_gnn_benchmark,
    is_scipy_sparse,
    read_edge_list,
    read_gnn_benchmark,
    read_npy,
    read_npz,
    read_scipy_npz,
)
from .rmat import rmat_graph

__all__ = ["load_graph", "nonisolated_nodes", "BUILTINS", "SPEC_FORMS", "FORMATS",
           "GraphFormat", "detect_format", "supported_formats", "graph_from_memory",
           "EDGE_LIST_SUFFIXES", "GRAPH_SUFFIXES"]

log = logging.getLogger(__name__)

BUILTINS = {"cora": "cora.npz"}
"""Built-in dataset names and their file in ``mnmg_sampler/data`` (provenance in its README)."""

_DEFAULT_UNDIRECTED = {"cora": True}  # Cora's citations are conventionally used undirected

TEXT_SUFFIXES = (".txt", ".txt.gz", ".edges", ".edges.gz", ".el", ".el.gz")
TABLE_SUFFIXES = (".csv", ".csv.gz", ".tsv", ".tsv.gz")
EDGE_LIST_SUFFIXES = TEXT_SUFFIXES + TABLE_SUFFIXES
"""Suffixes of text edge lists (whitespace, CSV or TSV; optionally gzip)."""


def _has_header(path: Path) -> bool:
    import gzip

    opener = gzip.open if path.name.lower().endswith(".gz") else open
    try:
        with opener(path, "rt", errors="replace") as f:
            for line in f:
                s = line.split("#", 1)[0].strip()
                if s:
                    return not all(t.lstrip("+-").isdigit() for t in s.split())
    except (OSError, EOFError):
        return False  # the edge-list reader reports the broken file
    return False


def _read_text(path, **opts) -> CSRGraph:
    """Whitespace edge list; one with a header row goes through the table reader."""
    from .tables import read_table

    return read_table(path, **opts) if _has_header(Path(path)) else read_edge_list(path, **opts)


def _read_table(path, **opts) -> CSRGraph:
    from .tables import read_table

    return read_table(path, **opts)


def _read_parquet(path, **opts) -> CSRGraph:
    from .tables import read_parquet

    return read_parquet(path, **opts)


def _read_torch(path, **opts) -> CSRGraph:
    from .torch_files import read_torch

    return read_torch(path, **opts)


def _read_ogb(path, **opts) -> CSRGraph:
    from .ogb import read_ogb_dir

    return read_ogb_dir(path, **opts)


def _is_ogb(path: Path) -> bool:
    from .ogb import is_ogb_dir

    return is_ogb_dir(path)


def _suffix(*suffixes: str) -> Callable[[Path], bool]:
    return lambda p: p.is_file() and p.name.lower().endswith(suffixes)


@dataclass(frozen=True)
class GraphFormat:
    """One readable input format: its name, how a path is recognised, and its reader."""

    name: str
    pattern: str
    matches: Callable[[Path], bool]
    read: Callable[..., CSRGraph]


FORMATS: tuple[GraphFormat, ...] = (
    GraphFormat("edge list (text)", "*.txt, *.edges, *.el [.gz]: 'src dst' per line, '#' "
                "comments, optional header row", _suffix(*TEXT_SUFFIXES), _read_text),
    GraphFormat("CSV / TSV table", "*.csv, *.tsv [.gz], with or without a header row; columns "
                "src/dst (or source/target) or the first two", _suffix(*TABLE_SUFFIXES),
                _read_table),
    GraphFormat("parquet table", "*.parquet, *.pq (needs pyarrow); columns as for CSV",
                _suffix(".parquet", ".pq"), _read_parquet),
    GraphFormat("numpy edge_index", "*.npy: one (2, E) integer array", _suffix(".npy"),
                read_npy),
    GraphFormat("gnn-benchmark npz", "*.npz with adj_data/adj_indices/adj_indptr/adj_shape "
                "(+ attr_*, labels)", lambda p: _suffix(".npz")(p) and is_gnn_benchmark(p),
                read_gnn_benchmark),
    GraphFormat("scipy sparse npz", "*.npz written by scipy.sparse.save_npz (csr, csc, coo)",
                lambda p: _suffix(".npz")(p) and is_scipy_sparse(p), read_scipy_npz),
    GraphFormat("numpy arrays npz", "*.npz with src + dst or edge_index; optional num_nodes, x, "
                "y, train_mask/val_mask/test_mask", _suffix(".npz"), read_npz),
    GraphFormat("PyG Data (torch.save)", "*.pt, *.pth: a torch_geometric Data or a dict of "
                "tensors, loaded with weights_only=True", _suffix(".pt", ".pth"), _read_torch),
    GraphFormat("OGB node-property directory", "DIR/ with raw/edge.csv.gz (+ raw/node-feat, "
                "raw/node-label, split/*/train.csv.gz ...), read from disk", _is_ogb, _read_ogb),
)
"""Every file format :func:`load_graph` reads, in the order a path is matched against them."""

GRAPH_SUFFIXES = (*EDGE_LIST_SUFFIXES, ".parquet", ".pq", ".npy", ".npz", ".pt", ".pth")
"""Every file suffix some format accepts (directories are matched by their content)."""


def supported_formats() -> str:
    """The list of readable formats, one per line, for error messages and ``--help``."""
    return "\n".join(f"  - {f.name}: {f.pattern}" for f in FORMATS)


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
    parts = spec.split(":")[1:]
    try:
        if not 1 <= len(parts) <= 2:
            raise ValueError
        scale = int(parts[0])
        edge_factor = int(parts[1]) if len(parts) == 2 else 16
    except ValueError:
        raise _bad_spec(spec, "not of the form rmat:SCALE[:EDGE_FACTOR] with integers",
                        "write e.g. rmat:16 or rmat:20:8") from None
    return scale, edge_factor


def _bad_memory(what: str) -> GraphFormatError:
    return GraphFormatError(
        f"in-memory graph: {what}", "no graph can be built",
        "pass an edge_index of shape (2, E), a (src, dst) pair of 1-d integer arrays, a PyG "
        "Data, a dict with 'edge_index', a CSRGraph, or a spec string / path")


def _np(v) -> np.ndarray:
    return v.detach().cpu().numpy() if hasattr(v, "detach") else np.asarray(v)


def graph_from_memory(data, *, num_nodes: int | None = None, undirected: bool = False,
                      drop_self_loops: bool = False, drop_duplicates: bool = False,
                      max_node_id: int | None = MAX_NODE_ID,
                      name: str = "in-memory graph") -> CSRGraph:
    """A :class:`CSRGraph` from arrays: ``edge_index`` ``(2, E)``, ``(src, dst)``, PyG ``Data``
    or a dict with ``edge_index`` (and optional ``x``, ``y``, ``num_nodes``, masks)."""
    from .readers import build_graph, edge_index_pair
    from .torch_files import graph_from_mapping

    opts = dict(undirected=undirected, drop_self_loops=drop_self_loops,
                drop_duplicates=drop_duplicates, max_node_id=max_node_id)
    if hasattr(data, "to_dict") and hasattr(data, "edge_index") and not isinstance(data, dict):
        d = data.to_dict()
        d.setdefault("num_nodes", data.num_nodes)
        return graph_from_mapping(d, name, **opts)
    if isinstance(data, Mapping):
        return graph_from_mapping(dict(data), name, **opts)
    if isinstance(data, (tuple, list)):
        if len(data) != 2:
            raise _bad_memory(f"a sequence of {len(data)} items")
        src, dst = _np(data[0]), _np(data[1])
        if src.ndim != 1 or dst.ndim != 1 or src.dtype.kind not in "iu" or \
                dst.dtype.kind not in "iu":
            raise _bad_memory(f"src / dst are {src.dtype}{list(src.shape)} and "
                              f"{dst.dtype}{list(dst.shape)}, not 1-d integer arrays")
    else:
        arr = _np(data)
        if arr.dtype == object:
            raise _bad_memory(f"a {type(data).__name__} is not an edge_index")
        src, dst = edge_index_pair(arr, name)
    src = src.astype(np.int64, copy=False)
    dst = dst.astype(np.int64, copy=False)
    return build_graph(name, src, dst, num_nodes, warn_sparse=False, **opts)


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
) -> CSRGraph:
    """Load the graph named by ``spec``: a spec string or path (see the module docstring), or
    a graph in memory (``edge_index``, ``(src, dst)``, PyG ``Data``, dict, :class:`CSRGraph`).

    ``undirected=None`` keeps the dataset's default: True for ``cora``, False otherwise.
    ``seed`` only affects ``rmat:`` graphs. ``x``, ``y`` and ``masks`` (``{"train": ...}``)
    are arrays or file paths that replace the node data the input carries
    (:func:`~mnmg_sampler.graph.node_data.attach_node_data`). ``num_nodes`` applies to arrays
    in memory. Node ids above ``max_node_id`` are refused (``None``: no bound). Raises
    :class:`GraphFormatError` for an unknown spec, a missing file or a malformed one; the
    message lists the supported formats.
    """
    if isinstance(spec, CSRGraph):
        g = spec
    elif not isinstance(spec, (str, PathLike)):
        g = graph_from_memory(spec, num_nodes=num_nodes, undirected=bool(undirected),
                              drop_self_loops=drop_self_loops, drop_duplicates=drop_duplicates,
                              max_node_id=max_node_id)
    else:
        g = _load_spec(str(spec), undirected, drop_self_loops, drop_duplicates, seed, max_node_id)
    return attach_node_data(g, x, y, masks)


def _load_spec(spec: str, undirected, drop_self_loops, drop_duplicates, seed,
               max_node_id) -> CSRGraph:
    key = spec.strip().lower()
    und = _DEFAULT_UNDIRECTED.get(key, False) if undirected is None else bool(undirected)
    opts = dict(undirected=und, drop_self_loops=drop_self_loops, drop_duplicates=drop_duplicates)
    if key in BUILTINS:
        res = importlib.resources.files("mnmg_sampler.data").joinpath(BUILTINS[key])
        with importlib.resources.as_file(res) as path:
            g = read_gnn_benchmark(path, **opts)
        g.name = key
        return g
    if key.startswith("rmat:"):
        scale, edge_factor = _parse_rmat(key)
        return rmat_graph(scale, edge_factor, seed, **opts)
    from .sources import is_sharded, read_share

    if is_sharded(spec):  # a directory (not OGB) or glob of edge shards (graph/sources.py)
        sh = read_share(spec, 0, 1)
        from .readers import check_id_bound

        check_id_bound(spec, sh.src, sh.dst, max_node_id, None)
        return CSRGraph.from_edges(sh.src, sh.dst, None, name=str(Path(spec).expanduser()),
                                   **opts)
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
    return fmt.read(path, max_node_id=max_node_id, **opts)


def nonisolated_nodes(graph: CSRGraph) -> np.ndarray:
    """Ids (int64, ascending) of the nodes with at least one neighbor to sample.

    That is ``graph.degrees() >= 1`` (in-degree; any degree for an undirected graph). Seeds
    are drawn from these in benchmarks because half or more of an R-MAT graph's nodes are
    isolated and would make empty minibatches.
    """
    return np.flatnonzero(graph.degrees() >= 1).astype(np.int64, copy=False)
