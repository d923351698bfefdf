"""The last step every reader shares: options, checks before allocating, renumbering, the CSR.

Every reader ends with :func:`build_graph`, which refuses negative ids, renumbers sparse ids
(:func:`should_renumber`: real interaction data carries 64-bit ids, and a CSR sized by the
largest id would need a row per possible id; the distinct ids, sorted, become ``0 .. N-1`` and
stay in :attr:`CSRGraph.node_ids`, so outputs show them again), and otherwise checks the CSR's
size against what the process can allocate and refuses ids above ``max_node_id`` (default
2**40), all before the CSR is built.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from ..errors import GraphFormatError
from ..system.host_limits import check_allocation
from .csr import CSRGraph
from .unique import sorted_unique

__all__ = ["MAX_NODE_ID", "RENUMBER_MODES", "RENUMBER_FLOOR", "ReadOptions", "build_graph",
           "check_id_bound", "should_renumber", "renumber_ids", "csr_bytes"]

log = logging.getLogger(__name__)

MAX_NODE_ID = 1 << 40
"""Default bound on node ids (without renumbering, the CSR has a row per id up to the largest)."""

RENUMBER_MODES = ("auto", "true", "false")
RENUMBER_FLOOR = 1 << 20
"""``auto`` renumbers only when the largest id + 1 is above this many rows (16 MiB of CSR)."""


@dataclass(frozen=True)
class ReadOptions:
    """How a reader cleans the edges and numbers the nodes (the keywords every reader takes).

    ``undirected`` appends every reverse edge; ``drop_self_loops`` / ``drop_duplicates`` clean
    the edge list; ids above ``max_node_id`` are refused (``None``: no bound); ``renumber`` is
    ``"auto"`` (see :func:`should_renumber`), ``"true"`` or ``"false"`` (bools are accepted).
    """

    undirected: bool = False
    drop_self_loops: bool = False
    drop_duplicates: bool = False
    max_node_id: int | None = MAX_NODE_ID
    renumber: str = "auto"

    def __post_init__(self) -> None:
        mode = self.renumber
        if isinstance(mode, bool):
            object.__setattr__(self, "renumber", "true" if mode else "false")
        elif str(mode).lower() in RENUMBER_MODES:
            object.__setattr__(self, "renumber", str(mode).lower())
        else:
            raise GraphFormatError(f"renumber={mode!r}", "node ids cannot be numbered",
                                   "use renumber='auto', 'true' or 'false'")


def csr_bytes(num_nodes: int, num_edges: int) -> int:
    """Peak bytes :meth:`CSRGraph.from_edges` allocates: row offsets and counts (16 per node),
    the sort order, neighbors and edge ids (24 per edge)."""
    return 16 * (int(num_nodes) + 1) + 24 * int(num_edges)


def should_renumber(max_id: int, distinct: int) -> bool:
    """The ``auto`` rule: renumber when the largest id + 1 exceeds both ``4 x`` the number of
    distinct ids and :data:`RENUMBER_FLOOR` (then most CSR rows would be ids nobody uses)."""
    return max_id + 1 > max(4 * distinct, RENUMBER_FLOOR)


def _distinct(src: np.ndarray, dst: np.ndarray, top: int) -> int | None:
    """The number of distinct ids when a bitmap of ``top + 1`` bytes is at most 8 bytes per
    edge (cheaper than sorting); ``None`` when the ids are so sparse that ``auto`` renumbers
    anyway (fewer than ``2 E`` distinct ids can never reach a quarter of ``top + 1``)."""
    if top + 1 > 8 * max(src.size, 1):
        return None
    seen = np.zeros(top + 1, bool)
    seen[src] = True
    seen[dst] = True
    return int(np.count_nonzero(seen))


def renumber_ids(src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(node_ids, new_src, new_dst)``: the distinct ids ascending, and each endpoint's rank
    among them. Memory is proportional to the edges, not to the largest id."""
    node_ids = sorted_unique(np.concatenate([src, dst]))
    return (node_ids, np.searchsorted(node_ids, src).astype(np.int64),
            np.searchsorted(node_ids, dst).astype(np.int64))


def _top(src: np.ndarray, dst: np.ndarray) -> int:
    return max(int(src.max()), int(dst.max())) if src.size else -1


RENUMBER_FIX = "renumber the nodes (dataset.renumber: true, --renumber true)"


def check_id_bound(name: str, src: np.ndarray, dst: np.ndarray,
                   max_node_id: int | None = MAX_NODE_ID, num_nodes: int | None = None,
                   renumber_fix: str = RENUMBER_FIX) -> None:
    """Check the memory a CSR sized by the largest id (or ``num_nodes``) needs, then refuse ids
    above ``max_node_id`` (``None``: no bound); both before anything is allocated.
    ``renumber_fix`` is the errors' advice for sparse ids where this graph can be renumbered."""
    top = _top(src, dst)
    if num_nodes is not None:
        top = max(top, int(num_nodes) - 1)
    check_allocation(
        f"{name}: a CSR of {top + 1:,} rows (one per id up to the largest, {top:,})",
        csr_bytes(top + 1, src.size),
        f"relabel the nodes to 0..N-1, or {renumber_fix}")
    if max_node_id is not None and top > max_node_id:
        raise GraphFormatError(
            f"{name}: node id {top} is above the bound {max_node_id}",
            f"the graph would need {top + 1:,} CSR rows ({8 * (top + 2) / 2**30:,.1f} GiB)",
            f"relabel the nodes to 0..N-1, {renumber_fix}, or raise the bound (max_node_id= "
            "in Python, dataset.max_node_id in YAML, --max-node-id on the CLI)",
        )


def _check_ids(name: str, src: np.ndarray, dst: np.ndarray) -> None:
    if src.shape != dst.shape:
        raise GraphFormatError(
            f"{name}: src has {src.shape[0]} entries but dst has {dst.shape[0]}",
            "an edge list needs one source per destination", "give src and dst of equal length")
    if src.size and min(int(src.min()), int(dst.min())) < 0:
        raise GraphFormatError(f"{name}: negative node id {min(int(src.min()), int(dst.min()))}",
                               "node ids index arrays and must be >= 0",
                               "relabel the nodes to 0..N-1")


def _take_rows(arr, node_ids: np.ndarray, name: str, key: str):
    """Rows of per-node data (indexed by original id) at the renumbered nodes."""
    if arr is None:
        return None
    if arr.shape[0] <= int(node_ids[-1]):
        raise GraphFormatError(f"{name}: '{key}' has {arr.shape[0]} rows but the largest node id "
                               f"is {int(node_ids[-1])}", f"'{key}' needs one row per node id",
                               f"save '{key}' with a row per id, or do not renumber")
    return arr[node_ids]


def build_graph(name: str, src: np.ndarray, dst: np.ndarray, opts: ReadOptions,
                num_nodes: int | None = None, *, x: np.ndarray | None = None,
                y: np.ndarray | None = None) -> CSRGraph:
    """A :class:`CSRGraph` named ``name`` from the edges ``src -> dst`` (int64), cleaned and
    numbered as ``opts`` says. ``num_nodes`` is the node count the input states (``None``: the
    largest id + 1); with it, ``auto`` does not renumber. ``x`` and ``y`` are indexed by original
    id and follow the renumbering (split masks: :func:`~.readers.masks_from`)."""
    src = np.ascontiguousarray(src, dtype=np.int64).ravel()
    dst = np.ascontiguousarray(dst, dtype=np.int64).ravel()
    _check_ids(name, src, dst)
    top = _top(src, dst)
    mode = opts.renumber
    node_ids = None
    want = mode == "true"
    if mode == "auto" and num_nodes is None and top + 1 > RENUMBER_FLOOR:
        distinct = _distinct(src, dst, top)
        want = distinct is None or should_renumber(top, distinct)
    if want:
        check_allocation(f"{name}: renumbering {src.size:,} edges", 32 * src.size,
                         "use a machine with more memory, or split the input")
        ids, new_src, new_dst = renumber_ids(src, dst)
        if mode == "true" or should_renumber(top, ids.size):
            node_ids, src, dst = ids, new_src, new_dst
            num_nodes = int(ids.size)
            log.info("%s: renumbered %d distinct node ids (largest %d) to 0..%d", name,
                     ids.size, top, ids.size - 1)
            x, y = _take_rows(x, ids, name, "x"), _take_rows(y, ids, name, "y")
    if node_ids is None:
        check_id_bound(name, src, dst, opts.max_node_id, num_nodes)
    g = CSRGraph.from_edges(src, dst, num_nodes, undirected=opts.undirected,
                            drop_self_loops=opts.drop_self_loops,
                            drop_duplicates=opts.drop_duplicates, name=name, x=x, y=y)
    g.node_ids = node_ids
    return g
