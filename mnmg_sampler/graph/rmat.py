"""Graph500 R-MAT generator: power-law synthetic graphs of any size, deterministic by seed.

Each edge picks one quadrant of the adjacency matrix per bit of the node id, with probabilities
``a`` (top-left), ``b`` (top-right), ``c`` (bottom-left) and ``d = 1 - a - b - c``. The Graph500
defaults (0.57, 0.19, 0.19) give a heavy-tailed degree distribution where half or more of the
nodes are isolated, which is why benchmarks draw seeds with
:func:`mnmg_sampler.graph.datasets.nonisolated_nodes`. Node ids are randomly permuted afterwards
so high-degree nodes are not clustered at low ids (as Graph500 does).

Generation is vectorised over all edges, looping only over the ``scale`` bits, with one float32
buffer of random numbers reused per bit: scale 20 (16.7M edges) takes a few seconds.
"""

from __future__ import annotations

import logging

import numpy as np

from ..errors import GraphFormatError
from .csr import CSRGraph

__all__ = ["rmat_edges", "rmat_graph"]

log = logging.getLogger(__name__)

MAX_SCALE = 40


def _check(scale: int, edge_factor: int, a: float, b: float, c: float) -> None:
    fix = "use e.g. rmat:16 (scale 16, edge factor 16) or rmat:20:8"
    if int(scale) != scale or not 1 <= scale <= MAX_SCALE:
        raise GraphFormatError(f"R-MAT scale {scale!r} is not an integer in [1, {MAX_SCALE}]",
                               "the graph has 2**scale nodes", fix)
    if int(edge_factor) != edge_factor or edge_factor < 1:
        raise GraphFormatError(f"R-MAT edge factor {edge_factor!r} is not a positive integer",
                               "the graph has edge_factor * 2**scale edges", fix)
    if min(a, b, c) < 0 or a + b + c > 1 + 1e-9:
        raise GraphFormatError(
            f"R-MAT probabilities a={a}, b={b}, c={c} are invalid",
            "a, b, c and d = 1 - a - b - c must all be >= 0",
            "use the Graph500 values a=0.57, b=0.19, c=0.19",
        )


def rmat_edges(
    scale: int,
    edge_factor: int = 16,
    a: float = 0.57,
    b: float = 0.19,
    c: float = 0.19,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Draw ``edge_factor * 2**scale`` directed R-MAT edges over ``2**scale`` nodes.

    Returns int64 ``(src, dst)``. The same arguments always give the same edges (one
    ``np.random.default_rng(seed)`` draws both the quadrants and the node permutation).
    Self-loops and duplicate edges are kept, as in Graph500; drop them when building the CSR.
    """
    _check(scale, edge_factor, a, b, c)
    scale, edge_factor = int(scale), int(edge_factor)
    n = 1 << scale
    m = edge_factor * n
    rng = np.random.default_rng(seed)
    ab, abc = np.float32(a + b), np.float32(a + b + c)
    a32 = np.float32(a)
    src = np.zeros(m, dtype=np.int64)
    dst = np.zeros(m, dtype=np.int64)
    r = np.empty(m, dtype=np.float32)
    bit = np.empty(m, dtype=bool)
    tmp = np.empty(m, dtype=bool)
    for _ in range(scale):
        rng.random(out=r, dtype=np.float32)
        # quadrant: a -> (0, 0), b -> (0, 1), c -> (1, 0), d -> (1, 1)
        np.greater(r, ab, out=bit)  # c or d: the source bit is 1
        src <<= 1
        np.add(src, bit, out=src)
        np.greater(r, a32, out=tmp)  # b, c or d
        np.logical_xor(tmp, bit, out=tmp)  # b only
        np.greater(r, abc, out=bit)  # d
        np.logical_or(tmp, bit, out=tmp)  # b or d: the destination bit is 1
        dst <<= 1
        np.add(dst, tmp, out=dst)
    del r, bit, tmp
    perm = rng.permutation(n)
    np.take(perm, src, out=src)
    np.take(perm, dst, out=dst)
    return src, dst


def rmat_graph(
    scale: int,
    edge_factor: int = 16,
    seed: int = 0,
    *,
    undirected: bool = False,
    drop_self_loops: bool = False,
    drop_duplicates: bool = False,
    a: float = 0.57,
    b: float = 0.19,
    c: float = 0.19,
) -> CSRGraph:
    """An R-MAT :class:`CSRGraph` named ``rmat:SCALE:EDGE_FACTOR`` with ``2**scale`` nodes."""
    src, dst = rmat_edges(scale, edge_factor, a, b, c, seed)
    log.debug("generated %d R-MAT edges (scale %d, seed %d)", src.size, scale, seed)
    return CSRGraph.from_edges(
        src, dst, 1 << int(scale), undirected=undirected, drop_self_loops=drop_self_loops,
        drop_duplicates=drop_duplicates, name=f"rmat:{int(scale)}:{int(edge_factor)}",
    )
