"""Graph500 R-MAT generator: power-law synthetic graphs of any size, deterministic by seed.

Each edge picks one quadrant of the adjacency matrix per bit of the node id, with probabilities
``a``, ``b``, ``c`` and ``d = 1 - a - b - c``; the Graph500 defaults (0.57, 0.19, 0.19) leave half
or more of the nodes isolated (benchmarks draw seeds with
:func:`mnmg_sampler.graph.datasets.nonisolated_nodes`). Node ids are then permuted, as Graph500
does, so that high-degree nodes are not clustered at low ids.

Edge ``i`` is a pure function of ``(seed, i)`` (:mod:`mnmg_sampler.rng`'s stream ``(seed, key
0x7A47, hop 0, node i)``, one 64-bit draw per two levels; relabelled by :func:`.permute.permute`),
so a rank draws any range of edges alone (:func:`rmat_edge_range`) and gets the same graph.
"""

from __future__ import annotations

import logging

import numpy as np

from ..errors import GraphFormatError
from ..rng import _mix64_int
from ..system.host_limits import check_allocation
from .csr import CSRGraph
from .permute import permute

__all__ = ["rmat_bytes", "rmat_edges", "rmat_edge_range", "rmat_graph", "parse_rmat_spec"]

log = logging.getLogger(__name__)

MAX_SCALE = 40
_U64 = (1 << 64) - 1
_GOLD = 0x9E3779B97F4A7C15
_RMAT_KEY = 0x7A47  # the RNG "request key" of R-MAT draws
_PERM_SALT = 0x7A48  # salt of the node relabelling


def parse_rmat_spec(spec: str) -> tuple[int, int]:
    """``(scale, edge_factor)`` of ``rmat:SCALE[:EDGE_FACTOR]`` (edge factor 16 by default);
    ``ValueError`` when it is not of that form with integers."""
    parts = spec.split(":")[1:]
    if not 1 <= len(parts) <= 2:
        raise ValueError(spec)
    return int(parts[0]), (int(parts[1]) if len(parts) == 2 else 16)


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


def rmat_bytes(scale: int, edge_factor: int, parts: int = 1) -> int:
    """A lower bound on the peak bytes one of ``parts`` ranks needs for its share of the graph.

    Per edge: the drawn ``src, dst`` (int64, 16 B) and their relabelled copies (16 B), then the
    CSR's neighbor ids and edge ids (16 B); per node, the CSR's row pointer (8 B). Generating in
    one process is ``parts=1``. Pure arithmetic: nothing is allocated.
    """
    m, n, p = int(edge_factor) << int(scale), 1 << int(scale), max(1, int(parts))
    return 48 * -(-m // p) + 8 * (-(-n // p) + 1)


def check_rmat_memory(scale: int, edge_factor: int, parts: int = 1, ranks_per_host: int = 1,
                      key: str = "") -> None:
    """:class:`~mnmg_sampler.errors.MemoryBudgetError` before generating an R-MAT graph whose
    share (:func:`rmat_bytes`, times the ranks sharing this host) cannot fit here; ``key``
    (e.g. ``dataset.name``) prefixes the message."""
    scale, edge_factor = int(scale), int(edge_factor)
    nbytes = rmat_bytes(scale, edge_factor, parts) * max(1, int(ranks_per_host))
    share = f"1/{parts} of " if parts > 1 else ""
    ranks = f", on each of the {ranks_per_host} ranks of this host" if ranks_per_host > 1 else ""
    check_allocation(
        f"{key + ': ' if key else ''}rmat:{scale}:{edge_factor} ({1 << scale:,} nodes, "
        f"{edge_factor << scale:,} edges): {share}its edges and CSR{ranks}", nbytes,
        "use a smaller scale or edge factor (each scale step doubles the graph; e.g. "
        "rmat:20:16), or spread it over more ranks and hosts")


def _thresholds(a: float, b: float, c: float) -> tuple[np.uint64, np.uint64, np.uint64]:
    """Quadrant boundaries as 32-bit integers: a 32-bit draw ``u`` picks a if ``u < ta``, b if
    ``u < tab``, c if ``u < tabc``, else d."""
    def t(p: float) -> np.uint64:
        return np.uint64(min(1 << 32, int(round(p * (1 << 32)))))

    return t(a), t(a + b), t(a + b + c)


def rmat_edge_range(
    scale: int,
    edge_factor: int,
    lo: int,
    hi: int,
    a: float = 0.57,
    b: float = 0.19,
    c: float = 0.19,
    seed: int = 0,
    chunk: int = 1 << 24,
) -> tuple[np.ndarray, np.ndarray]:
    """Edges ``lo .. hi-1`` of the R-MAT graph of :func:`rmat_edges` (int64 ``src, dst``): any
    split into ranges gives, concatenated, the same edges (module docstring). Compiled (numba,
    parallel over edges); ``chunk`` edges per call.
    """
    _check(scale, edge_factor, a, b, c)
    scale, edge_factor = int(scale), int(edge_factor)
    m = edge_factor << scale
    lo, hi = max(0, int(lo)), min(m, int(hi))
    n_out = max(0, hi - lo)
    check_allocation(  # src, dst and their relabelled copies
        f"edges {lo:,}..{hi:,} of R-MAT scale {scale}, edge factor {edge_factor}", 32 * n_out,
        "use a smaller scale or edge factor, or draw the edges over more ranks")
    src = np.empty(n_out, np.int64)
    dst = np.empty(n_out, np.int64)
    from .generate import rmat_levels  # compiled lazily: importing graph stays light

    ta, tab, tabc = _thresholds(a, b, c)
    h = _mix64_int(_mix64_int((int(seed) & _U64) + _GOLD & _U64) ^ (_RMAT_KEY + _GOLD & _U64))
    h = np.uint64(_mix64_int(h ^ _GOLD))  # rng.stream_base up to hop 0
    for c0 in range(lo, hi, chunk):
        c1 = min(hi, c0 + chunk)
        rmat_levels(h, c0, c1 - c0, scale, ta, tab, tabc, src[c0 - lo:c1 - lo],
                    dst[c0 - lo:c1 - lo])
    n = 1 << scale
    return permute(src, n, seed, _PERM_SALT), permute(dst, n, seed, _PERM_SALT)


def rmat_edges(
    scale: int,
    edge_factor: int = 16,
    a: float = 0.57,
    b: float = 0.19,
    c: float = 0.19,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Draw ``edge_factor * 2**scale`` directed R-MAT edges over ``2**scale`` nodes.

    Returns int64 ``(src, dst)``: :func:`rmat_edge_range` over all edges. Self-loops and
    duplicate edges are kept, as in Graph500; drop them when building the CSR.
    """
    _check(scale, edge_factor, a, b, c)
    return rmat_edge_range(scale, edge_factor, 0, int(edge_factor) << int(scale), a, b, c, seed)


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
    """An R-MAT :class:`CSRGraph` named ``rmat:SCALE:EDGE_FACTOR`` with ``2**scale`` nodes; its
    memory (:func:`rmat_bytes`) is checked before any edge is drawn."""
    _check(scale, edge_factor, a, b, c)
    check_rmat_memory(scale, edge_factor)
    src, dst = rmat_edges(scale, edge_factor, a, b, c, seed)
    log.debug("generated %d R-MAT edges (scale %d, seed %d)", src.size, scale, seed)
    return CSRGraph.from_edges(
        src, dst, 1 << int(scale), undirected=undirected, drop_self_loops=drop_self_loops,
        drop_duplicates=drop_duplicates, name=f"rmat:{int(scale)}:{int(edge_factor)}",
    )
