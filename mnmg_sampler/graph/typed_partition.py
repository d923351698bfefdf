"""Typed partitions: one part per rank holding every relation, every node type split.

A typed graph is partitioned in its internal id space (:mod:`.typed`: id = type offset +
per-type id). Every node type is split on its own (``range``, ``random`` and ``hash`` assign a
node from its per-type id, as :func:`~.partition.assign_nodes` does for a homogeneous graph, so
each type is balanced over the parts); ``metis`` runs on the homogeneous view (all relations as
one graph). Then, exactly as for a homogeneous graph, nodes are relabelled so part ``r`` owns the
new ids ``[boundaries[r], boundaries[r+1])``, internal-id order within a part, so a part's nodes
come grouped by type.

A part is a typed CSR over its owned nodes (:class:`~.typed.TypedGraph`'s layout with local
rows): ``indptr`` over (node, relation) segments, ``indices`` (new global ids), ``edge_ids``
(per relation), ``orig_ids`` (the *internal* ids, on which the RNG is keyed: fixed by the
graph, not by the partitioning, so a minibatch is the same for every world size and method),
``type_offset`` (first local row of each type), ``edge_time`` / ``node_time`` where the graph
has times (read by the typed sampler over ranks, ``docs/temporal.md``) and,
per node type, ``x.<type>``, ``y.<type>`` and ``mask.<type>.<split>`` with their own width and
dtype. The manifest, checksums and atomic
write are the homogeneous ones (:func:`~.partition.write_partitions`); the manifest's ``typed``
section names the types and relations. With one node type and one relation the part's
``indptr``, ``indices``, ``edge_ids`` and ``orig_ids`` are byte-identical to the homogeneous
partition of the same graph.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from ..errors import PartitionError
from .csr import CSRGraph
from .partition import (
    _MASK_NAME,
    PartitionPlan,
    _assign_metis,
    _check_args,
    _entry_positions,
    _even_boundaries,
    _save,
    assign_nodes,
    build_manifest,
    install_directory,
    plan_from_assignment,
)
from .partition_io import TMP_PREFIX, TYPED_FORMAT_VERSION, check_replaceable, write_manifest
from .typed import TypedGraph

__all__ = ["check_type_names", "homogeneous_view", "part_graph", "partition_typed", "typed_plan",
           "typed_part_arrays", "typed_section", "write_typed_partitions"]

log = logging.getLogger(__name__)


def _seg_start(g: TypedGraph) -> np.ndarray:
    """First segment of every internal id (its ``R_t`` segments follow)."""
    per_type = np.diff(g.rel_offset)
    n_t = np.diff(g.node_type_offset)
    t = np.repeat(np.arange(len(g.node_types)), n_t)
    i = np.arange(g.num_nodes, dtype=np.int64) - g.node_type_offset[t]
    return g.seg_base[t] + i * per_type[t]


def homogeneous_view(g: TypedGraph) -> CSRGraph:
    """Every relation as one graph over the internal ids (row ``v`` = all its segments)."""
    start = _seg_start(g)
    indptr = np.append(g.indptr[start], g.indptr[-1]).astype(np.int64)
    return CSRGraph(indptr, g.indices, np.arange(g.num_edges, dtype=np.int64), name=g.name)


def typed_plan(g: TypedGraph, parts: int, method: str, seed: int = 0, *,
               metis_max_edges: int | None = None) -> PartitionPlan:
    """Assign every node of every type to a part and relabel (a plan over internal ids)."""
    view = homogeneous_view(g)
    _check_args(view, parts, method)
    parts = int(parts)
    if method == "metis" and parts > 1:
        assignment = _assign_metis(view, parts, seed, metis_max_edges)
    else:
        chunks = []
        for t in range(len(g.node_types)):
            nt = int(g.node_type_offset[t + 1] - g.node_type_offset[t])
            ids = np.arange(nt, dtype=np.int64)
            if method == "range" or parts == 1:
                chunks.append(np.repeat(np.arange(parts, dtype=np.int64),
                                        np.diff(_even_boundaries(nt, parts))))
            else:
                chunks.append(assign_nodes(ids, nt, parts, method, seed))
        assignment = np.concatenate(chunks) if chunks else np.zeros(0, np.int64)
    return plan_from_assignment(view, assignment, method, seed, parts)


def typed_part_arrays(g: TypedGraph, plan: PartitionPlan, rank: int) -> dict[str, np.ndarray]:
    """The arrays of part ``rank`` (layout in the module docstring)."""
    lo, hi = int(plan.boundaries[rank]), int(plan.boundaries[rank + 1])
    owned = np.ascontiguousarray(plan.new_to_orig[lo:hi])  # ascending internal ids
    type_offset = np.searchsorted(owned, g.node_type_offset).astype(np.int64)
    per_type = np.diff(g.rel_offset)
    # every owned node's segments, in local order: node by node, relation by relation
    seg = (_seg_start(g)[owned][:, None] + np.arange(int(per_type.max(initial=0)))[None, :])
    t_of = np.repeat(np.arange(len(g.node_types)), np.diff(type_offset))
    seg = seg[np.arange(seg.shape[1])[None, :] < per_type[t_of][:, None]]
    indptr, pos = _entry_positions(g, seg)  # segments play the rows
    out = {"indptr": indptr, "indices": plan.orig_to_new[g.indices[pos]],
           "edge_ids": np.asarray(g.edge_ids[pos], np.int64), "orig_ids": owned,
           "type_offset": type_offset}
    if g.weighted.any():
        out["weights"] = np.ascontiguousarray(g.weights[pos], np.float32)
    if g.edge_time is not None:  # per entry, in the (time-sorted) segment order
        out["edge_time"] = np.ascontiguousarray(g.edge_time[pos], np.int64)
    if g.node_time is not None:
        out["node_time"] = np.ascontiguousarray(g.node_time[owned], np.int64)
    for t, name in enumerate(g.node_types):
        ids = owned[type_offset[t]:type_offset[t + 1]] - g.node_type_offset[t]
        if name in g.x:
            out[f"x.{name}"] = np.ascontiguousarray(np.asarray(g.x[name])[ids])
        if name in g.y:
            out[f"y.{name}"] = np.ascontiguousarray(np.asarray(g.y[name])[ids])
        for split, m in g.masks.get(name, {}).items():
            out[f"mask.{name}.{split}"] = np.ascontiguousarray(np.asarray(m, bool)[ids])
    return out


def check_type_names(name: str, node_types) -> None:
    """Node type names become file names (``x.<type>.npy``): refuse the others."""
    for t in node_types:
        if not _MASK_NAME.match(t):
            raise PartitionError(
                f"typed graph '{name}': node type {t!r} cannot be used in a file name",
                "its features, labels and masks cannot be stored",
                "name node types with letters, digits, '_', '-' or '.'")


def _check_names(g: TypedGraph) -> None:
    check_type_names(g.name, g.node_types)
    for name, arr in g.x.items():
        if np.asarray(arr).dtype.hasobject:
            raise PartitionError(f"typed graph '{g.name}': x[{name!r}] has dtype object",
                                 "it cannot be stored", "give features a numeric dtype")


def typed_section(node_types, edge_types, node_type_offset, num_edges: dict, weighted,
                  x: dict[str, tuple[str, tuple]], y: dict[str, str], masks: dict[str, list],
                  part_type_nodes, time_attr: str | None) -> dict:
    """The manifest's ``typed`` section: types, relations, offsets, node data (``x``: dtype
    and row shape, ``y``: dtype, ``masks``: split names, per type) and nodes per part and type
    (the single-process and distributed writers share it)."""
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


def typed_manifest_section(g: TypedGraph, plan: PartitionPlan) -> dict:
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


def write_typed_partitions(g: TypedGraph, plan: PartitionPlan, out_dir: str | os.PathLike, *,
                           overwrite: bool = False, source: dict | None = None) -> Path:
    """Write every part of ``plan`` atomically (as :func:`~.partition.write_partitions`)."""
    out = Path(out_dir).absolute()
    if plan.num_nodes != g.num_nodes:
        raise PartitionError(f"the plan covers {plan.num_nodes} nodes but typed graph "
                             f"'{g.name}' has {g.num_nodes}", "it was made for another graph",
                             "call partition_typed on this graph")
    _check_names(g)
    if out.exists() and not overwrite:
        raise PartitionError(f"output directory {out} already exists", "it is left untouched",
                             "choose another --out, or pass --overwrite (overwrite=True) to "
                             "replace it")
    check_replaceable(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{out.name}-", dir=out.parent))
    try:
        files: dict[str, dict] = {}
        _save(tmp, "new_to_orig.npy", plan.new_to_orig, files)
        _save(tmp, "orig_to_new.npy", plan.orig_to_new, files)
        parts_meta = []
        for r in range(plan.parts):
            names = {}
            for key, arr in typed_part_arrays(g, plan, r).items():
                rel = f"part{r}/{key}.npy"
                _save(tmp, rel, arr, files)
                names[key] = rel
            parts_meta.append({"rank": r, "num_nodes": int(plan.part_nodes[r]),
                               "num_edges": int(plan.part_edges[r]), "files": names})
        manifest = build_manifest(g.name, g.num_nodes, g.num_edges, plan.boundaries, False,
                                  False, [], plan.summary(), parts_meta, files,
                                  has_weights=bool(g.weighted.any()), source=source)
        manifest["typed"] = typed_manifest_section(g, plan)
        manifest["format_version"] = TYPED_FORMAT_VERSION  # a homogeneous-only reader refuses it
        write_manifest(tmp, manifest)  # last: a directory without it never loads
        install_directory(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log.info("wrote %d typed parts to %s", plan.parts, out)
    return out


def partition_typed(g: TypedGraph, parts: int, method: str, out_dir: str | os.PathLike,
                    seed: int = 0, *, overwrite: bool = False, source: dict | None = None,
                    metis_max_edges: int | None = None) -> tuple[Path, PartitionPlan]:
    """:func:`typed_plan` then :func:`write_typed_partitions`."""
    plan = typed_plan(g, parts, method, seed, metis_max_edges=metis_max_edges)
    return write_typed_partitions(g, plan, out_dir, overwrite=overwrite, source=source), plan


def part_graph(part) -> TypedGraph:
    """A typed part as the :class:`~.typed.TypedGraph` the typed kernel reads: rows are the
    part's local rows (``type_offset`` in place of the internal offsets), ``indices`` new
    global ids; key the RNG on ``part.orig_ids[rows]`` (internal ids)."""
    tp = part.typed
    if tp is None:
        raise PartitionError(f"part {part.rank} of {part.path} is homogeneous",
                             "it has no node types or relations",
                             "partition a typed graph (HeteroData, the dict form, a .pt or an "
                             "OGB hetero directory)")
    weights = None if part.weights is None else np.asarray(part.weights)
    return TypedGraph(tp.node_types, tp.edge_types, tp.type_offset, tp.rel_offset, tp.seg_base,
                      np.asarray(part.indptr), np.asarray(part.indices),
                      np.asarray(part.edge_ids), tp.rel_src, tp.rel_dst, weights, tp.weighted,
                      name=str(part.path))
