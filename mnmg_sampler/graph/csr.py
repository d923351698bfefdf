"""In-memory sampling graph: CSR over in-edges (CSC of the adjacency).

Row ``v`` lists the sources of the edges that end at ``v``: the neighbors ``v`` samples from, as
PyG's NeighborLoader does for message passing source -> target. Within a row, neighbors are kept
in **canonical order** (ascending edge id), so a node's neighbor positions, and therefore every
random draw, do not depend on how the graph was stored, relabelled or partitioned.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import EdgeWeightError, GraphFormatError, SamplingInputError


def entry_rows(indptr: np.ndarray) -> np.ndarray:
    """The row of every CSR entry (int64): the node it is a neighbor of, its edge's target."""
    return np.repeat(np.arange(indptr.size - 1, dtype=np.int64), np.diff(indptr))


@dataclass
class CSRGraph:
    """A graph ready to sample from, with optional node data.

    Attributes:
        indptr: int64 ``[num_nodes + 1]`` row offsets.
        indices: int64 ``[num_edges]`` neighbor (source) ids, canonical order within each row.
        edge_ids: int64 ``[num_edges]`` id of each CSR entry in the input edge list.
        x, y: optional node features ``[num_nodes, F]`` and labels ``[num_nodes]``.
        masks: optional boolean node masks by split name (``train``, ``val``, ``test``).
        node_ids: for a renumbered graph (sparse or 64-bit input ids), int64 ``[num_nodes]``,
            the original id of each node, ascending; ``None`` when ids are the input's own.
        header: ``(line, text)`` of the header row a text edge list had, for ``info``.
    """

    indptr: np.ndarray
    indices: np.ndarray
    edge_ids: np.ndarray
    x: np.ndarray | None = None
    y: np.ndarray | None = None
    name: str = "graph"
    masks: dict[str, np.ndarray] = field(default_factory=dict)
    node_ids: np.ndarray | None = None
    header: tuple[int, str] | None = None

    @property
    def num_nodes(self) -> int:
        return int(self.indptr.shape[0] - 1)

    @property
    def num_edges(self) -> int:
        return int(self.indices.shape[0])

    def degrees(self) -> np.ndarray:
        """In-degree (number of sampleable neighbors) of every node."""
        return np.diff(self.indptr)

    def original_ids(self, ids: np.ndarray) -> np.ndarray:
        """Original ids of node ids (themselves unless the graph was renumbered)."""
        ids = np.asarray(ids, dtype=np.int64)
        return ids if self.node_ids is None else self.node_ids[ids]

    @classmethod
    def from_edges(
        cls,
        src: np.ndarray,
        dst: np.ndarray,
        num_nodes: int | None = None,
        *,
        undirected: bool = False,
        drop_self_loops: bool = False,
        drop_duplicates: bool = False,
        name: str = "graph",
        x: np.ndarray | None = None,
        y: np.ndarray | None = None,
    ) -> CSRGraph:
        """Build from an edge list ``src -> dst``; edge ``i`` of the (processed) list has id ``i``.

        ``undirected`` appends every reverse edge after the originals; ``drop_duplicates`` keeps
        the first occurrence of each ``(src, dst)``; both run before ids are assigned.
        """
        src = np.asarray(src, dtype=np.int64).ravel()
        dst = np.asarray(dst, dtype=np.int64).ravel()
        if src.shape != dst.shape:
            raise GraphFormatError(
                f"{name}: src has {src.shape[0]} entries but dst has {dst.shape[0]}",
                "an edge list needs one source per destination",
                "give src and dst arrays of equal length",
            )
        if src.size and min(int(src.min()), int(dst.min())) < 0:
            raise GraphFormatError(
                f"{name}: negative node id {min(int(src.min()), int(dst.min()))}",
                "node ids index arrays and must be >= 0",
                "relabel the nodes to 0..N-1",
            )
        n = int(max(int(src.max()), int(dst.max())) + 1) if src.size else 0
        if num_nodes is None:
            num_nodes = n
        elif n > num_nodes:
            raise GraphFormatError(
                f"{name}: node id {n - 1} is out of range for {num_nodes} nodes",
                "every id must be < num_nodes",
                "pass a larger num_nodes or fix the edge list",
            )
        if undirected:
            src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
        if drop_self_loops:
            keep = src != dst
            src, dst = src[keep], dst[keep]
        if drop_duplicates and src.size:
            code = dst * np.int64(max(num_nodes, 1)) + src
            _, first = np.unique(code, return_index=True)
            first.sort()
            src, dst = src[first], dst[first]
        order = np.argsort(dst, kind="stable")  # stable: edge-id order within each row
        indptr = np.zeros(num_nodes + 1, np.int64)
        np.cumsum(np.bincount(dst, minlength=num_nodes), out=indptr[1:])
        return cls(indptr, src[order], order.astype(np.int64), x=x, y=y, name=name)

    def check_ids(self, ids: np.ndarray, what: str = "seed") -> None:
        """Raise :class:`SamplingInputError` if any id is outside ``[0, num_nodes)``."""
        if ids.size == 0:
            return
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= self.num_nodes:
            bad = lo if lo < 0 else hi
            raise SamplingInputError(
                f"{what} id {bad} is out of range for graph '{self.name}' with "
                f"{self.num_nodes} nodes",
                "no neighbors can be sampled for it",
                f"pass ids in [0, {self.num_nodes})",
            )


def check_weights(weights, num_entries: int, what: str = "edge weights") -> np.ndarray:
    """Validate edge weights for a CSR of ``num_entries`` entries; returns them as float32.

    One finite, non-negative number per CSR entry (in CSR order, like ``indices``). Zero is
    allowed (that edge is never drawn). Raises :class:`~mnmg_sampler.errors.EdgeWeightError`
    for a wrong shape, a non-numeric dtype, or any negative, NaN or infinite weight (naming the
    first offending entry), and when a float64 weight does not fit float32.
    """
    w = np.asarray(weights)
    if w.ndim != 1 or w.shape[0] != num_entries:
        raise EdgeWeightError(f"{what} have shape {w.shape}, expected ({num_entries},)",
                              "weighted sampling needs one weight per edge (CSR entry)",
                              "pass one weight per edge, in the order of the CSR's indices")
    if not (np.issubdtype(w.dtype, np.floating) or np.issubdtype(w.dtype, np.integer)):
        raise EdgeWeightError(f"{what} have dtype {w.dtype}, expected a number type",
                              "", "store the weights as float32")
    with np.errstate(over="ignore"):  # a float64 too large for float32 becomes inf: caught below
        w32 = w.astype(np.float32, copy=False)
    bad = ~np.isfinite(w32) | (w32 < 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise EdgeWeightError(
            f"{what}: entry {i} is {w[i]!r} ({int(bad.sum())} invalid in all)",
            "sampling probabilities must be finite and non-negative",
            "use weights >= 0 (0 means never drawn); drop or fix NaN/negative/infinite values")
    return np.ascontiguousarray(w32)
