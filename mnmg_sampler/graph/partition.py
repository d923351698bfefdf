"""Split a graph into contiguous id ranges, one per rank, and write them atomically.

Partitioning is a *relabelling*: part ``r`` owns the new ids ``[boundaries[r], boundaries[r+1])``,
so an id's owner is one ``searchsorted`` away
(:class:`mnmg_sampler.distributed.partition_book.PartitionBook`). Within a part nodes keep the
order of their original ids, rows the input's canonical order, and samplers key the RNG on
original ids, so a minibatch mapped back through ``new_to_orig`` is bit-identical to sampling the
unpartitioned graph.

Methods: ``range`` (equal chunks of the input order), ``random`` (a keyed permutation,
:mod:`.permute`, cut into equal chunks), ``hash`` (a seeded hash of the id) and ``metis``
(``pymetis`` on the symmetrised graph: fewest cut edges). The first three decide a node's part
from its id alone (:func:`assign_nodes`), so :mod:`mnmg_sampler.distributed.ingest` partitions on
every rank with the same result. A :class:`~.csr.CSRGraph` is the one-type, one-relation
:class:`~.typed.TypedGraph`: each node type is split on its own (``metis``: all relations as one
graph); a part is a CSR over its owned (node, relation) segments, keyed for the RNG by internal
ids (docs/formats.md#partition-directories).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import MissingDependencyError, PartitionError
from .csr import CSRGraph, check_weights, entry_rows
from .datasets import load_graph
from .partition_io import (
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST,
    TMP_PREFIX,
    TYPED_FORMAT_VERSION,
    check_replaceable,
    file_entry,
    write_manifest,
)
from .permute import hash_ids, permute, unpermute
from .typed import TypedGraph
from .unique import sorted_unique

__all__ = [
    "METHODS",
    "DISTRIBUTED_METHODS",
    "PartitionPlan",
    "assign_nodes",
    "check_type_names",
    "part_arrays",
    "part_node_ids",
    "partition_graph",
    "part_stats",
    "typed_section",
    "write_partitions",
    "partition",
    "edge_cut",
]

log = logging.getLogger(__name__)

METHODS = ("random", "range", "hash", "metis")
DISTRIBUTED_METHODS = ("random", "range", "hash")
"""Methods whose part of a node is a function of its id (no whole-graph pass)."""
_MASK_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


@dataclass
class PartitionPlan:
    """Where every node goes and its new id.

    Attributes:
        assignment: int64 ``[num_nodes]``, part of each *original* node.
        boundaries: int64 ``[parts + 1]``; part ``r`` owns new ids
            ``[boundaries[r], boundaries[r+1])``.
        new_to_orig, orig_to_new: int64 ``[num_nodes]`` id maps, new -> original and back.
        edge_cut: fraction of CSR entries (sampling edges) whose endpoints lie in different parts.
        imbalance: max nodes per part / mean nodes per part (1.0 = perfect).
        edge_imbalance: max CSR entries per part / mean (the sampling work per rank).
        part_nodes, part_edges: int64 ``[parts]`` owned nodes and CSR entries of each part.
    """

    method: str
    seed: int
    parts: int
    assignment: np.ndarray
    boundaries: np.ndarray
    new_to_orig: np.ndarray
    orig_to_new: np.ndarray
    edge_cut: float
    imbalance: float
    edge_imbalance: float
    part_nodes: np.ndarray
    part_edges: np.ndarray

    @property
    def num_nodes(self) -> int:
        return int(self.new_to_orig.shape[0])

    def summary(self) -> dict:
        """Plain numbers for logs, the CLI and the manifest (:func:`part_stats`)."""
        return part_stats(self.method, self.seed, self.num_nodes, int(self.part_edges.sum()),
                          self.part_nodes, self.part_edges, self.edge_cut)


def part_stats(method: str, seed: int, n: int, num_edges: int, part_nodes, part_edges,
               cut: float) -> dict:
    """The manifest's ``stats`` of a partitioning (``cut``: its edge cut)."""
    part_nodes = np.asarray(part_nodes, np.int64)
    part_edges = np.asarray(part_edges, np.int64)
    parts = part_nodes.shape[0]
    return {
        "method": method, "seed": int(seed), "parts": parts, "edge_cut": float(cut),
        "imbalance": float(part_nodes.max() / (n / parts)) if n else 1.0,
        "edge_imbalance": float(part_edges.max() / (num_edges / parts)) if num_edges else 1.0,
        "part_nodes": [int(v) for v in part_nodes],
        "part_edges": [int(v) for v in part_edges],
    }


def edge_cut(graph: CSRGraph, assignment: np.ndarray) -> float:
    """Fraction of CSR entries whose neighbor and row are assigned to different parts.

    Each such entry, when sampled, sends a neighbor id to another rank's next frontier.
    """
    if graph.num_edges == 0:
        return 0.0
    dst = entry_rows(graph.indptr)
    return float(np.count_nonzero(assignment[graph.indices] != assignment[dst]) / graph.num_edges)


def _check_args(graph: CSRGraph, parts: int, method: str) -> None:
    if method not in METHODS:
        raise PartitionError(
            f"unknown partition method {method!r}",
            "no partition can be made",
            f"use one of {', '.join(METHODS)}",
        )
    if isinstance(parts, bool) or int(parts) != parts or parts < 1:
        raise PartitionError(
            f"invalid number of parts {parts!r}",
            "a graph is split into at least one part",
            "pass --parts N with N >= 1 (one part per rank: the world size)",
        )
    if parts > max(graph.num_nodes, 1):
        raise PartitionError(
            f"{parts} parts requested for graph '{graph.name}' with {graph.num_nodes} nodes",
            "some parts would own no node",
            f"use at most {graph.num_nodes} parts",
        )


def _even_boundaries(n: int, parts: int) -> np.ndarray:
    return (np.arange(parts + 1, dtype=np.int64) * n) // parts


_RANDOM_SALT, _HASH_SALT = 0x9A27, 0x4A54


def assign_nodes(ids: np.ndarray, n: int, parts: int, method: str, seed: int = 0) -> np.ndarray:
    """Part (int64) of every original id in ``ids`` for a graph of ``n`` nodes.

    ``method`` is one of :data:`DISTRIBUTED_METHODS`; the answer depends only on the id, so any
    rank can compute it for any id.
    """
    ids = np.asarray(ids, dtype=np.int64)
    if parts == 1:
        return np.zeros(ids.shape, np.int64)
    if method == "hash":
        h = hash_ids(ids, seed, _HASH_SALT) >> np.uint64(32)
        return (h * np.uint64(parts) >> np.uint64(32)).astype(np.int64)
    pos = ids if method == "range" else permute(ids, n, seed, _RANDOM_SALT)
    return np.searchsorted(_even_boundaries(n, parts), pos, side="right") - 1


def part_node_ids(rank: int, n: int, parts: int, method: str, seed: int = 0,
                  chunk: int = 1 << 22) -> np.ndarray:
    """The original ids (ascending int64) that :func:`assign_nodes` puts in part ``rank``.

    ``range`` and ``random`` touch only the part's own ids; ``hash`` scans all ``n`` ids in
    chunks of ``chunk`` (time O(n), memory O(part + chunk)).
    """
    if parts == 1:
        return np.arange(n, dtype=np.int64)
    b = _even_boundaries(n, parts)
    if method == "range":
        return np.arange(b[rank], b[rank + 1], dtype=np.int64)
    if method == "random":
        pos = np.arange(b[rank], b[rank + 1], dtype=np.int64)
        return np.sort(unpermute(pos, n, seed, _RANDOM_SALT))
    out = []
    for lo in range(0, n, chunk):
        ids = np.arange(lo, min(n, lo + chunk), dtype=np.int64)
        out.append(ids[assign_nodes(ids, n, parts, method, seed) == rank])
    return np.concatenate(out) if out else np.zeros(0, np.int64)


def _symmetric_adjacency(graph: CSRGraph) -> tuple[np.ndarray, np.ndarray]:
    """CSR (xadj, adjncy) of the undirected simple graph underlying ``graph`` (METIS input)."""
    n = graph.num_nodes
    src = graph.indices
    dst = entry_rows(graph.indptr)
    keep = src != dst
    a = np.concatenate([src[keep], dst[keep]])
    b = np.concatenate([dst[keep], src[keep]])
    code = sorted_unique(a * np.int64(n) + b)  # sorted by a, then b; duplicates gone
    a, b = code // n, code % n
    xadj = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(a, minlength=n), out=xadj[1:])
    return xadj, b


def _import_pymetis():
    try:
        import pymetis
    except ImportError as e:
        raise MissingDependencyError(
            "the metis partition method needs the optional package pymetis, which is not installed",
            "the graph cannot be partitioned with METIS",
            "pip install 'mnmg-sampler[metis]' (or use --method random / range)",
        ) from e
    return pymetis


METIS_MAX_EDGES = 1 << 30
"""Default budget of :func:`partition_graph`'s ``metis_max_edges`` (CSR entries)."""


def _assign_metis(graph: CSRGraph, parts: int, seed: int, max_edges: int | None) -> np.ndarray:
    budget = METIS_MAX_EDGES if max_edges is None else int(max_edges)
    if graph.num_edges > budget:
        raise PartitionError(
            f"graph '{graph.name}' has {graph.num_edges:,} edges, above the METIS budget of "
            f"{budget:,}",
            "METIS runs in one process over the whole graph (it is never distributed here), "
            "which would need several times the graph's size in memory",
            "use --method random, hash or range, which partition on all ranks "
            "(`torchrun --nproc-per-node N -m mnmg_sampler partition ...`), or raise the "
            "budget with --metis-max-edges (partition.metis_max_edges) on a machine that holds "
            "the graph",
        )
    pymetis = _import_pymetis()
    xadj, adjncy = _symmetric_adjacency(graph)
    if graph.num_nodes >= 2**31 or adjncy.shape[0] >= 2**31:
        raise PartitionError(
            f"graph '{graph.name}' is too large for pymetis's 32-bit ids "
            f"({graph.num_nodes} nodes, {adjncy.shape[0]} symmetric edges)",
            "METIS cannot partition it",
            "use --method random or range",
        )
    opts = pymetis.Options(seed=int(seed) % (2**31))
    xadj, adjncy = xadj.astype(np.int32), adjncy.astype(np.int32)
    if hasattr(pymetis, "CSRAdjacency"):  # pymetis >= 2025.2; xadj=/adjncy= is deprecated
        cuts, membership = pymetis.part_graph(
            parts, pymetis.CSRAdjacency(xadj, adjncy), options=opts)
    else:
        cuts, membership = pymetis.part_graph(parts, xadj=xadj, adjncy=adjncy, options=opts)
    log.info("METIS: %d of %d undirected edges cut", cuts, adjncy.shape[0] // 2)
    return np.asarray(membership, dtype=np.int64)


def _seg_start(g: TypedGraph) -> np.ndarray:
    """First segment of every internal id (its ``R_t`` segments follow)."""
    per_type = np.diff(g.rel_offset)
    t = np.repeat(np.arange(len(g.node_types)), np.diff(g.node_type_offset))
    return g.seg_base[t] + (np.arange(g.num_nodes, dtype=np.int64) - g.node_type_offset[t]) * \
        per_type[t]


def homogeneous_view(graph: CSRGraph | TypedGraph) -> CSRGraph:
    """Every relation as one graph over the internal ids (row ``v`` = all its segments): what
    METIS, the edge cut and the per-part edge counts read. A :class:`CSRGraph` is its own."""
    if isinstance(graph, CSRGraph):
        return graph
    indptr = np.append(graph.indptr[_seg_start(graph)], graph.indptr[-1]).astype(np.int64)
    return CSRGraph(indptr, graph.indices, np.arange(graph.num_edges, dtype=np.int64),
                    name=graph.name)


def partition_graph(graph: CSRGraph | TypedGraph, parts: int, method: str, seed: int = 0, *,
                    metis_max_edges: int | None = None) -> PartitionPlan:
    """Assign every node to one of ``parts`` parts and relabel so parts are contiguous id ranges.

    Args:
        graph: the plan covers its internal ids (for a typed graph).
        method: ``range``, ``random``, ``hash`` or ``metis``; ``seed`` seeds all but ``range``.
        metis_max_edges: METIS refuses graphs with more CSR entries (:class:`PartitionError`);
            ``None`` = :data:`METIS_MAX_EDGES`.

    Returns:
        The :class:`PartitionPlan`; nothing is written (see :func:`write_partitions`).
    """
    view = homogeneous_view(graph)
    _check_args(view, parts, method)
    parts = int(parts)
    if method == "metis" and parts > 1:
        assignment = _assign_metis(view, parts, seed, metis_max_edges)
    else:
        chunks = []
        for nt in (np.diff(graph.node_type_offset).tolist() if isinstance(graph, TypedGraph)
                   else [graph.num_nodes]):
            if method == "range" or parts == 1:
                chunks.append(np.repeat(np.arange(parts, dtype=np.int64),
                                        np.diff(_even_boundaries(nt, parts))))
            else:
                chunks.append(assign_nodes(np.arange(nt, dtype=np.int64), nt, parts, method, seed))
        assignment = np.concatenate(chunks) if chunks else np.zeros(0, np.int64)
    return plan_from_assignment(view, assignment, method, seed, parts)


def plan_from_assignment(graph: CSRGraph, assignment: np.ndarray, method: str, seed: int,
                         parts: int) -> PartitionPlan:
    """The :class:`PartitionPlan` of a part per node: relabelling and statistics."""
    n = graph.num_nodes
    # Stable sort: parts in order, original-id order within a part.
    new_to_orig = np.argsort(assignment, kind="stable").astype(np.int64)
    orig_to_new = np.empty(n, np.int64)
    orig_to_new[new_to_orig] = np.arange(n, dtype=np.int64)
    part_nodes = np.bincount(assignment, minlength=parts).astype(np.int64)
    boundaries = np.zeros(parts + 1, np.int64)
    np.cumsum(part_nodes, out=boundaries[1:])
    part_edges = np.bincount(assignment, weights=graph.degrees(), minlength=parts).astype(np.int64)
    s = part_stats(method, seed, n, graph.num_edges, part_nodes, part_edges,
                   edge_cut(graph, assignment))
    plan = PartitionPlan(method, int(seed), parts, assignment, boundaries, new_to_orig,
                         orig_to_new, s["edge_cut"], s["imbalance"], s["edge_imbalance"],
                         part_nodes, part_edges)
    log.info("partitioned '%s' into %d parts with %s: edge cut %.4f, imbalance %.3f nodes, "
             "%.3f edges", graph.name, parts, method, plan.edge_cut, plan.imbalance,
             plan.edge_imbalance)
    return plan


def _entry_positions(graph, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(indptr, pos)`` of the rows (segments) ``rows``: local offsets and the input CSR
    position of every local entry (row start + offset within the row)."""
    deg = graph.indptr[rows + 1] - graph.indptr[rows]
    indptr = np.zeros(rows.size + 1, np.int64)
    np.cumsum(deg, out=indptr[1:])
    pos = np.repeat(graph.indptr[rows] - indptr[:-1], deg) + np.arange(int(indptr[-1]),
                                                                       dtype=np.int64)
    return indptr, pos


def part_arrays(g: TypedGraph, plan: PartitionPlan, rank: int, *,
                named: bool = True) -> dict[str, np.ndarray]:
    """The arrays of part ``rank`` (docs/formats.md#partition-directories); ``named=False``
    gives the homogeneous file names (``x``, ``y``, ``mask_<split>``, no ``type_offset``)."""
    lo, hi = int(plan.boundaries[rank]), int(plan.boundaries[rank + 1])
    owned = np.ascontiguousarray(plan.new_to_orig[lo:hi])  # ascending internal ids
    type_offset = np.searchsorted(owned, g.node_type_offset).astype(np.int64)
    per_type = np.diff(g.rel_offset)
    if len(g.edge_types) == len(g.node_types) == 1:  # one segment per row
        seg = owned
    else:  # every owned node's segments, in local order: node by node, relation by relation
        seg = _seg_start(g)[owned][:, None] + np.arange(int(per_type.max(initial=0)))[None, :]
        t_of = np.repeat(np.arange(len(g.node_types)), np.diff(type_offset))
        seg = seg[np.arange(seg.shape[1])[None, :] < per_type[t_of][:, None]]
    indptr, pos = _entry_positions(g, seg)
    out = {"indptr": indptr, "indices": plan.orig_to_new[g.indices[pos]],
           "edge_ids": np.asarray(g.edge_ids[pos], np.int64), "orig_ids": owned}
    if named:
        out["type_offset"] = type_offset
    if g.weighted.any():
        out["weights"] = np.ascontiguousarray(g.weights[pos], np.float32)
    if g.edge_time is not None:  # per entry, in the (time-sorted) segment order
        out["edge_time"] = np.ascontiguousarray(g.edge_time[pos], np.int64)
    if g.node_time is not None:
        out["node_time"] = np.ascontiguousarray(g.node_time[owned], np.int64)
    for t, name in enumerate(g.node_types):
        ids = owned[type_offset[t]:type_offset[t + 1]] - g.node_type_offset[t]
        for key, arr in (("x", g.x.get(name)), ("y", g.y.get(name))):
            if arr is not None:
                out[f"{key}.{name}" if named else key] = np.ascontiguousarray(
                    np.asarray(arr)[ids])
        for split, m in g.masks.get(name, {}).items():
            m = np.asarray(m, bool) if named else np.asarray(m)
            out[f"mask.{name}.{split}" if named else f"mask_{split}"] = \
                np.ascontiguousarray(m[ids])
    return out


def check_type_names(name: str, node_types) -> None:
    """Node type names become file names (``x.<type>.npy``): refuse the others."""
    for t in node_types:
        if not _MASK_NAME.match(t):
            raise PartitionError(
                f"typed graph '{name}': node type {t!r} cannot be used in a file name",
                "its features, labels and masks cannot be stored",
                "name node types with letters, digits, '_', '-' or '.'")


def _check_node_data(graph: CSRGraph | TypedGraph) -> None:
    """Node data must be storable: one row per node in a plain dtype, file-name-safe names."""
    named = isinstance(graph, TypedGraph)
    g = graph if named else TypedGraph.from_csr(graph)
    check_type_names(g.name, g.node_types)
    for t in g.node_types:
        at = f"[{t!r}]" if named else ""
        masks = g.masks.get(t, {})
        for what, arr in ((f"x{at}", g.x.get(t)), (f"y{at}", g.y.get(t)),
                          *((f"masks{at}[{k!r}]", v) for k, v in masks.items())):
            arr = None if arr is None else np.asarray(arr)
            if arr is not None and (arr.ndim == 0 or arr.shape[0] != g.num_nodes_of(t)
                                    or arr.dtype.hasobject):
                raise PartitionError(
                    f"graph '{g.name}': {what} has shape {arr.shape} and dtype {arr.dtype}",
                    "node data needs one row per node in a plain numeric dtype to be split",
                    f"give {what} with {g.num_nodes_of(t)} rows (numeric or bool)")
        for name in masks:
            if not _MASK_NAME.match(str(name)):
                raise PartitionError(
                    f"graph '{g.name}': mask name {name!r} cannot be used in a file name",
                    "the mask cannot be stored",
                    "use letters, digits, '_', '-' or '.' in mask names")


def _save(directory: Path, rel: str, arr: np.ndarray, files: dict) -> None:
    path = directory / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        np.save(f, np.ascontiguousarray(arr), allow_pickle=False)
        f.flush()
        os.fsync(f.fileno())  # data on disk before the manifest that vouches for it
    files[rel] = file_entry(path, arr)


def build_manifest(name: str, num_nodes: int, num_edges: int, boundaries, has_x: bool,
                   has_y: bool, masks: list[str], stats: dict, parts_meta: list[dict],
                   files: dict, *, has_weights: bool = False,
                   source: dict | None = None, typed: dict | None = None) -> dict:
    """The manifest of a partition directory (the single-process and distributed writers share
    it, so both write the same file for the same partition); ``typed``: its
    :func:`typed_section`, for a graph with named types (format version 2)."""
    return {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION if typed is None else TYPED_FORMAT_VERSION,
        "graph_name": name,
        "num_nodes": int(num_nodes),
        "num_edges": int(num_edges),
        "num_parts": len(boundaries) - 1,
        "boundaries": [int(b) for b in boundaries],
        "has_x": bool(has_x),
        "has_y": bool(has_y),
        "has_weights": bool(has_weights),
        "masks": masks,
        "stats": stats,
        **({"source": source} if source is not None else {}),
        **({"typed": typed} if typed is not None else {}),
        "parts": parts_meta,
        "files": files,
    }


def typed_section(node_types, edge_types, node_type_offset, num_edges: dict, weighted,
                  x: dict[str, tuple[str, tuple]], y: dict[str, str], masks: dict[str, list],
                  part_type_nodes, time_attr: str | None) -> dict:
    """The manifest's ``typed`` section: types, relations, offsets, node data (``x``: dtype
    and row shape, ``y``: dtype, ``masks``: split names, per type) and nodes per part and type."""
    return {
        "node_types": list(node_types),
        "edge_types": [list(et) for et in edge_types],
        "node_type_offset": [int(v) for v in node_type_offset],
        "num_edges": {"__".join(et): int(c) for et, c in num_edges.items()},
        "weighted": [int(v) for v in weighted],
        "x": {t: {"dtype": d, "shape": [int(v) for v in sh]} for t, (d, sh) in x.items()},
        "y": dict(y),
        "masks": {t: sorted(m) for t, m in masks.items() if m},
        "part_type_nodes": [[int(v) for v in row] for row in part_type_nodes],
        "time_attr": time_attr,
    }


def _typed_manifest_section(g: TypedGraph, plan: PartitionPlan) -> dict:
    """The manifest's ``typed`` section of ``g`` partitioned by ``plan``."""
    counts = np.stack([np.bincount(plan.assignment[g.node_type_offset[t]:
                                                   g.node_type_offset[t + 1]],
                                   minlength=plan.parts)
                       for t in range(len(g.node_types))], axis=1) if g.node_types else \
        np.zeros((plan.parts, 0), np.int64)
    timed = g.edge_time is not None or g.node_time is not None
    return typed_section(
        g.node_types, g.edge_types, g.node_type_offset, g.num_edges_dict(), g.weighted,
        {t: (np.dtype(np.asarray(a).dtype).str, np.asarray(a).shape[1:]) for t, a in g.x.items()},
        {t: np.dtype(np.asarray(a).dtype).str for t, a in g.y.items()}, g.masks, counts,
        g.time_attr if timed else None)


def install_directory(tmp: Path, out: Path) -> None:
    """Rename the complete directory ``tmp`` to ``out``, replacing an existing ``out`` only once
    ``tmp`` is complete and putting it back if the rename fails."""
    old: Path | None = None
    try:
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}old-{out.name}-", dir=out.parent))
            os.replace(out, old / "old")  # a directory cannot replace a non-empty one
        os.replace(tmp, out)
    except BaseException:
        if old is not None and (old / "old").exists() and not out.exists():
            os.replace(old / "old", out)
        raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


def _write_all(graph: CSRGraph | TypedGraph, plan: PartitionPlan, tmp: Path,
               source: dict | None, weights: np.ndarray | None) -> None:
    named = isinstance(graph, TypedGraph)
    g = graph if named else TypedGraph.from_csr(graph, weights)
    files: dict[str, dict] = {}
    _save(tmp, "new_to_orig.npy", plan.new_to_orig, files)
    _save(tmp, "orig_to_new.npy", plan.orig_to_new, files)
    if not named and graph.node_ids is not None:  # renumbered: the input's ids, for n_id
        _save(tmp, "node_ids.npy", graph.node_ids, files)
    parts_meta = []
    for r in range(plan.parts):
        names = {}
        for key, arr in part_arrays(g, plan, r, named=named).items():
            rel = f"part{r}/{key}.npy"
            _save(tmp, rel, arr, files)
            names[key] = rel
        parts_meta.append({"rank": r, "num_nodes": int(plan.part_nodes[r]),
                           "num_edges": int(plan.part_edges[r]), "files": names})
    masks = [] if named else sorted(str(k) for k in (graph.masks or {}))
    manifest = build_manifest(
        g.name, g.num_nodes, g.num_edges, plan.boundaries, not named and graph.x is not None,
        not named and graph.y is not None, masks, plan.summary(), parts_meta, files,
        has_weights=bool(g.weighted.any()), source=source,
        typed=_typed_manifest_section(g, plan) if named else None)
    write_manifest(tmp, manifest)  # last: a directory without it never loads


def write_partitions(
    graph: CSRGraph | TypedGraph, plan: PartitionPlan, out_dir: str | os.PathLike, *,
    overwrite: bool = False, source: dict | None = None, weights: np.ndarray | None = None,
) -> Path:
    """Write every part of ``plan`` to ``out_dir`` atomically and return its path.

    The parts are built in a hidden ``.mnmg-partial-*`` directory beside ``out_dir`` (which
    :func:`load_partition` refuses), the manifest written last, then renamed into place: a
    failed run leaves no ``out_dir``. An existing ``out_dir`` is replaced only with
    ``overwrite=True``, only if it is empty or ours, and only once the new one is complete.
    ``source`` is recorded in the manifest. ``weights`` (a :class:`CSRGraph`'s, one per CSR
    entry; a typed graph carries its own) are checked (``EdgeWeightError``) and stored as
    float32.
    """
    out = Path(out_dir).absolute()
    if plan.num_nodes != graph.num_nodes:
        raise PartitionError(
            f"the plan covers {plan.num_nodes} nodes but graph '{graph.name}' has "
            f"{graph.num_nodes}",
            "it was made for another graph",
            "call partition_graph on this graph",
        )
    _check_node_data(graph)
    if weights is not None:
        weights = check_weights(weights, graph.num_edges, f"edge weights of '{graph.name}'")
    if out.exists() and not overwrite:
        raise PartitionError(
            f"output directory {out} already exists",
            "it is left untouched",
            "choose another --out, or pass --overwrite (overwrite=True) to replace it",
        )
    check_replaceable(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{out.name}-", dir=out.parent))
    try:
        _write_all(graph, plan, tmp, source, weights)
        install_directory(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log.info("wrote %d %sparts to %s (%s)", plan.parts,
             "typed " if isinstance(graph, TypedGraph) else "", out, MANIFEST)
    return out


def partition(
    graph, parts: int, method: str, out_dir: str | os.PathLike, seed: int = 0,
    *, overwrite: bool = False, source: dict | None = None,
    metis_max_edges: int | None = None, weights: np.ndarray | None = None,
) -> Path:
    """:func:`partition_graph` then :func:`write_partitions`; returns the output directory.

    ``graph``: a :class:`CSRGraph`, a :class:`~.typed.TypedGraph`, or anything
    :func:`~mnmg_sampler.graph.datasets.load_graph` reads. ``weights``: one float per CSR entry
    of a homogeneous graph, validated before any partitioning work.
    """
    if not isinstance(graph, (CSRGraph, TypedGraph)):
        graph = load_graph(graph)
    if weights is not None:  # a bad weight fails before any partitioning work
        weights = check_weights(weights, graph.num_edges, f"edge weights of '{graph.name}'")
    plan = partition_graph(graph, parts, method, seed, metis_max_edges=metis_max_edges)
    return write_partitions(graph, plan, out_dir, overwrite=overwrite, source=source,
                            weights=weights)
