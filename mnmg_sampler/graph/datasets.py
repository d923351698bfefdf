"""Resolve a graph spec (a built-in name, ``rmat:...`` or a path) to a :class:`CSRGraph`.

One string names every graph a job, the CLI or a benchmark can use::

    cora                   the embedded Cora citation graph (features and labels; undirected)
    rmat:SCALE[:EF]        a Graph500 R-MAT graph, 2**SCALE nodes, EF*2**SCALE edges (EF=16)
    path/to/edges.txt[.gz] a SNAP-style edge list
    path/to/graph.npz      numpy arrays: src/dst, or the gnn-benchmark layout (adj_*, attr_*)
    dir/, 'dir/*.txt'      shards read in name order (edge lists, .npy, .parquet; graph/sources.py)
"""

from __future__ import annotations

import difflib
import importlib.resources
import logging
from os import PathLike
from pathlib import Path

import numpy as np

from ..errors import GraphFormatError
from .csr import CSRGraph
from .readers import is_gnn_benchmark, read_edge_list, read_gnn_benchmark, read_npz
from .rmat import rmat_graph

__all__ = ["load_graph", "nonisolated_nodes", "BUILTINS", "SPEC_FORMS"]

log = logging.getLogger(__name__)

BUILTINS = {"cora": "cora.npz"}
"""Built-in dataset names and their file in ``mnmg_sampler/data`` (provenance in its README)."""

_DEFAULT_UNDIRECTED = {"cora": True}  # Cora's citations are conventionally used undirected

EDGE_LIST_SUFFIXES = (".txt", ".txt.gz", ".tsv", ".tsv.gz", ".edges", ".edges.gz")

SPEC_FORMS = (
    "a built-in name (" + ", ".join(BUILTINS) + "), "
    "'rmat:SCALE' or 'rmat:SCALE:EDGE_FACTOR' (e.g. rmat:16 or rmat:20:8), "
    "or a path to an edge list (" + ", ".join(EDGE_LIST_SUFFIXES) + ") or an .npz file"
)


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


def load_graph(
    spec: str | PathLike,
    *,
    undirected: bool | None = None,
    drop_self_loops: bool = False,
    drop_duplicates: bool = False,
    seed: int = 0,
) -> CSRGraph:
    """Load the graph named by ``spec`` (see the module docstring for the forms).

    ``undirected=None`` keeps the dataset's default: True for ``cora``, False otherwise.
    ``seed`` only affects ``rmat:`` graphs. Raises :class:`GraphFormatError` for an unknown
    spec, a missing file or a malformed one.
    """
    spec = str(spec)
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

    if is_sharded(spec):  # a directory, glob, .npy or .parquet of edges (graph/sources.py)
        sh = read_share(spec, 0, 1)
        return CSRGraph.from_edges(sh.src, sh.dst, None, name=str(Path(spec).expanduser()),
                                   **opts)
    path = Path(spec).expanduser()
    if not path.exists():
        close = difflib.get_close_matches(key, [*BUILTINS, "rmat:SCALE"], n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise _bad_spec(spec, f"no such built-in dataset or file{hint}")
    name = path.name.lower()
    if name.endswith(".npz"):
        if is_gnn_benchmark(path):
            return read_gnn_benchmark(path, **opts)
        return read_npz(path, **opts)
    if name.endswith(EDGE_LIST_SUFFIXES):
        return read_edge_list(path, **opts)
    raise _bad_spec(spec, f"the file type of '{path.name}' is not recognised")


def nonisolated_nodes(graph: CSRGraph) -> np.ndarray:
    """Ids (int64, ascending) of the nodes with at least one neighbor to sample.

    That is ``graph.degrees() >= 1`` (in-degree; any degree for an undirected graph). Seeds
    are drawn from these in benchmarks because half or more of an R-MAT graph's nodes are
    isolated and would make empty minibatches.
    """
    return np.flatnonzero(graph.degrees() >= 1).astype(np.int64, copy=False)
