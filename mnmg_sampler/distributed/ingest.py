"""Distributed ingest and partitioning: every rank reads 1/W of the input and writes its own part.

Collective; the world size is the number of parts. Each rank reads its share of the input in
input order (so every edge keeps a single process's edge id), sends each CSR entry and node row to
the owner of its target (``all_to_all_single`` in bounded rounds, counts before payloads; no
pickle), and as the owner relabels, builds its rows in canonical order and writes its files; rank
0 writes the manifest last. For :data:`~mnmg_sampler.graph.partition.DISTRIBUTED_METHODS` the
files are the single-process partitioner's bytes. Peak memory per rank: about its part plus its
share of the input. See docs/partitioning.md#distributed-partitioning.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from ..errors import GraphFormatError, PartitionError
from ..graph.build import RENUMBER_FLOOR, ReadOptions, should_renumber
from ..graph.datasets import _DEFAULT_UNDIRECTED, BUILTINS, _parse_rmat, read_share
from ..graph.formats import is_ogb_hetero_dir
from ..graph.partition import (
    DISTRIBUTED_METHODS,
    _even_boundaries,
    _save,
    assign_nodes,
    build_manifest,
    check_type_names,
    install_directory,
    part_node_ids,
    part_stats,
    typed_section,
)
from ..graph.partition_io import (
    MANIFEST,
    SAMPLE_BLOCKS,
    TMP_PREFIX,
    TYPED_FORMAT_VERSION,
    check_replaceable,
    file_entry,
    write_manifest,
)
from ..graph.permute import node_features, node_labels
from ..graph.sources import NODE_DTYPES as _DTYPES
from ..graph.sources import EdgeShare, node_rows_file
from ..graph.typed import typed_layout
from ..graph.typed_io import read_ogb_hetero_share, read_typed_torch_share
from ..graph.unique import sorted_unique
from ..system.host_limits import check_allocation
from .collective import Exchanger, agree

__all__ = ["partition_distributed", "partition_typed_distributed", "DEFAULT_CHUNK"]

log = logging.getLogger(__name__)

DEFAULT_CHUNK = 1 << 20
"""Rows each rank sends per all-to-all round (bounds the exchange buffers)."""



# -- collectives --------------------------------------------------------------------------------
def _gather(values, group) -> np.ndarray:
    """All-gather a short int64 vector from every rank: ``[world, len]``."""
    t = torch.as_tensor(np.asarray(values, np.int64).ravel())
    out = [torch.empty_like(t) for _ in range(dist.get_world_size(group))]
    dist.all_gather(out, t, group=group)
    return torch.stack(out).numpy()


def _allreduce(value: int, op, group) -> int:
    t = torch.tensor([int(value)], dtype=torch.int64)
    dist.all_reduce(t, op=op, group=group)
    return int(t.item())


def _rounds(rows: int, chunk: int, group) -> int:
    return _allreduce(-(-rows // chunk), dist.ReduceOp.MAX, group)


def _as_bytes(a: np.ndarray) -> torch.Tensor:
    """Rows of any dtype as a uint8 tensor ``[k, row bytes]`` (exchanged without conversion)."""
    a = np.ascontiguousarray(a)
    row = a.dtype.itemsize * int(np.prod(a.shape[1:], dtype=np.int64))
    return torch.from_numpy(a.reshape(-1).view(np.uint8).reshape(a.shape[0], row))


def shuffle(ex: Exchanger, cols: np.ndarray, dest: np.ndarray, chunk: int,
            rows: np.ndarray | None = None):
    """Send row ``i`` of ``cols`` (int64 ``[k, c]``, and of ``rows`` if given) to rank
    ``dest[i]``, ``chunk`` rows per rank per round; returns what this rank received, in order of
    source rank and round (``(cols, rows)``)."""
    def make(i: int):
        sl = slice(i * chunk, (i + 1) * chunk)
        return cols[sl], dest[sl], None if rows is None else rows[sl]

    return shuffle_stream(ex, -(-dest.shape[0] // chunk), make, cols.shape[1], rows)


def shuffle_stream(ex: Exchanger, n_chunks: int, make, width: int, rows_like=None):
    """Like :func:`shuffle`, for rows made chunk by chunk: ``make(i) -> (cols [k, width],
    dest [k], rows [k, ...] or None)`` builds this rank's chunk ``i`` (called twice: once to
    count, once to send), so the rows never exist all at once on the sending side.
    ``rows_like``: an array of the rows' dtype and row shape, when there are rows."""
    w = ex.world_size
    totals = np.zeros(w, np.int64)
    for i in range(n_chunks):
        totals += np.bincount(make(i)[1], minlength=w)
    recv_total = ex.counts(torch.from_numpy(totals)).numpy()
    out = np.empty((int(recv_total.sum()), width), np.int64)
    out_rows = None
    if rows_like is not None:
        out_rows = np.empty((out.shape[0], *rows_like.shape[1:]), rows_like.dtype)
    filled = 0
    for i in range(_allreduce(n_chunks, dist.ReduceOp.MAX, ex.group)):
        if i < n_chunks:
            cols, d, rows = make(i)
        else:
            cols, d, rows = np.zeros((0, width), np.int64), np.zeros(0, np.int64), rows_like
        order = np.argsort(d, kind="stable")
        send = np.bincount(d, minlength=w).astype(np.int64)
        recv = ex.counts(torch.from_numpy(send)).numpy()
        got = ex.payload(torch.from_numpy(np.ascontiguousarray(cols[order])), send, recv)
        k = got.shape[0]
        out[filled:filled + k] = got.numpy()
        if rows_like is not None:
            gb = ex.payload(_as_bytes(rows[order]), send, recv).numpy()
            out_rows[filled:filled + k] = gb.view(rows_like.dtype).reshape(k,
                                                                          *rows_like.shape[1:])
        filled += k
    return out, out_rows


def lookup(ex: Exchanger, keys: np.ndarray, owner_of, answer, chunk: int) -> np.ndarray:
    """Ask rank ``owner_of(k)`` for ``answer(k)`` of every key (int64 in, int64 out), ``chunk``
    keys per round, each distinct key of a round asked once; answers in the order of ``keys``."""
    w = ex.world_size
    out = np.empty(keys.shape[0], np.int64)
    for r in range(_rounds(keys.shape[0], chunk, ex.group)):
        lo = r * chunk
        uq, inv = np.unique(keys[lo:lo + chunk], return_inverse=True)
        d = np.asarray(owner_of(uq), np.int64)
        order = np.argsort(d, kind="stable")
        send = np.bincount(d, minlength=w).astype(np.int64)
        recv = ex.counts(torch.from_numpy(send)).numpy()
        asked = ex.payload(torch.from_numpy(np.ascontiguousarray(uq[order])), send, recv).numpy()
        told = np.ascontiguousarray(answer(asked), dtype=np.int64)
        back = ex.payload(torch.from_numpy(told), recv, send).numpy()
        got = np.empty(uq.shape[0], np.int64)
        got[order] = back
        out[lo:lo + inv.shape[0]] = got[inv.reshape(-1)]
    return out


# -- steps --------------------------------------------------------------------------------------
def _check_args(spec, out: Path, method: str, overwrite: bool, world: int) -> None:
    if method not in DISTRIBUTED_METHODS:
        raise PartitionError(
            f"partition method {method!r} cannot run distributed",
            "only " + ", ".join(DISTRIBUTED_METHODS) + " decide a node's part from its id; "
            "METIS needs the whole graph in one process",
            "use --method random, hash or range, or run metis as a single process "
            "(`mnmg-sampler partition ... --method metis` without torchrun)",
        )
    if out.exists() and not overwrite:
        raise PartitionError(f"output directory {out} already exists", "it is left untouched",
                             "choose another --out, or pass --overwrite to replace it")
    if overwrite:
        check_replaceable(out)


def _node_rows(path: str | None, n: int, rank: int, world: int, what: str):
    """This rank's slice ``[lo, hi)`` of a ``.npy`` of node rows, memory-mapped."""
    if path is None:
        return None
    lo, hi = (int(v) for v in _even_boundaries(n, world)[rank:rank + 2])
    return node_rows_file(path, n, what)[lo:hi], lo, hi


def _record_maker(share: EdgeShare, off: int, m: int, undirected: bool, drop_self_loops: bool,
                  dedup: bool, kept_before_rank: int, kept_total: int, owner_of, chunk: int):
    """``(n_chunks, make)`` for :func:`shuffle_stream`: the (target, source, id) row of every
    CSR entry this rank read, to the owner of the target. Originals come first, then reverses.

    Without duplicate removal the id is final (the entry's position among kept entries, which
    counts give); with it, the id is the position before removal (resolved in :func:`_dedup`).
    """
    k = share.src.shape[0]
    nc = -(-k // chunk)
    kept_in = np.zeros(nc + 1, np.int64)  # kept originals before each chunk, within this share
    for i in range(nc):
        a, b = i * chunk, min(k, (i + 1) * chunk)
        kept_in[i + 1] = kept_in[i] + (np.count_nonzero(share.src[a:b] != share.dst[a:b])
                                       if drop_self_loops else b - a)

    def make(j: int):
        rev, i = divmod(j, nc)
        a, b = i * chunk, min(k, (i + 1) * chunk)
        src, dst = share.src[a:b], share.dst[a:b]
        if dedup:
            e = np.arange(off + a, off + b, dtype=np.int64) + (m if rev else 0)
        if drop_self_loops:
            keep = src != dst
            src, dst = src[keep], dst[keep]
            if dedup:
                e = e[keep]
        if not dedup:
            e = kept_before_rank + int(kept_in[i]) + np.arange(src.shape[0], dtype=np.int64)
            if rev:
                e += kept_total
        cols = np.empty((src.shape[0], 3), np.int64)
        cols[:, 0], cols[:, 1] = (src, dst) if rev else (dst, src)
        cols[:, 2] = e
        return cols, owner_of(cols[:, 0]), None

    return nc * (2 if undirected else 1), make, int(kept_in[-1])


def partition_distributed(
    spec: str | os.PathLike,
    out_dir: str | os.PathLike,
    method: str = "random",
    seed: int = 0,
    *,
    undirected: bool | None = None,
    drop_self_loops: bool = False,
    drop_duplicates: bool = False,
    features: str | None = None,
    labels: str | None = None,
    feature_dim: int = 0,
    num_classes: int = 0,
    data_seed: int = 0,
    graph_seed: int | None = None,
    overwrite: bool = False,
    source: dict | None = None,
    chunk: int = DEFAULT_CHUNK,
    group: dist.ProcessGroup | None = None,
    renumber: str | bool = "auto",
) -> dict:
    """Partition graph ``spec`` into one part per rank of ``group`` and write ``out_dir``.

    Collective. ``method`` is ``random``, ``range`` or ``hash``; ``seed`` seeds it (and R-MAT
    generation unless ``graph_seed`` is given); ``undirected=None`` keeps the input's
    convention. ``features``/``labels`` are ``.npy`` files of node rows (memory-mapped);
    without them ``feature_dim`` / ``num_classes`` give synthetic rows seeded by
    ``data_seed``. ``source`` is recorded in the manifest. ``renumber`` numbers sparse ids
    ``0..N-1`` as ``build_graph`` does, without any array sized by the largest id.
    Returns the partition statistics (as in the manifest) plus ``out``, ``seconds``,
    ``num_nodes``, ``num_edges``, ``graph_name`` and ``renumbered``.

    Raises the same typed error on every rank (bad method, existing output, unreadable input).
    """
    t0 = time.perf_counter()
    if undirected is None:
        undirected = _DEFAULT_UNDIRECTED.get(str(spec).strip().lower(), False)
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    out = Path(out_dir).absolute()
    ex = Exchanger(group, torch.device("cpu"))
    agree(lambda: _check_args(spec, out, method, overwrite, world), group)

    def read() -> EdgeShare:
        sh = read_share(spec, rank, world, seed if graph_seed is None else graph_seed,
                        renumber=renumber)
        if sh.src.size and min(int(sh.src.min()), int(sh.dst.min())) < 0:
            raise GraphFormatError(f"{sh.name}: negative node id",
                                   "node ids index arrays and must be >= 0",
                                   "relabel the nodes to 0..N-1")
        return sh

    share = agree(read, group)
    local_max = max(int(share.src.max()), int(share.dst.max())) if share.src.size else -1
    head = _gather([share.src.shape[0], local_max, share.num_nodes or -1,
                    share.x is not None, share.y is not None], group)
    counts = head[:, 0]
    m = int(counts.sum())
    off = int(counts[:rank].sum())
    max_id, declared = int(head[:, 1].max()), int(head[:, 2].max())
    mode = ReadOptions(renumber=renumber).renumber
    node_ids = None
    if mode == "true" or (mode == "auto" and declared < 0 and max_id + 1 > RENUMBER_FLOOR):
        node_ids = _renumber(ex, share, max_id, mode == "true", chunk, group)
        if node_ids is not None:  # rank 0's whole input (x, y) is already in node order
            max_id, declared = int(node_ids[2]) - 1, -1
    n = declared if declared >= 0 else max_id + 1
    if max_id >= n:
        raise GraphFormatError(f"{share.name}: node id {max_id} is out of range for {n} nodes",
                               "every id must be < num_nodes", "fix the edge list")
    if world > max(n, 1):
        raise PartitionError(f"{world} parts requested for graph '{share.name}' with {n} nodes",
                             "some parts would own no node", f"use at most {n} ranks")
    # node data sources: files, rank 0's whole input, or synthetic
    x_src = agree(lambda: _node_rows(features, n, rank, world, "features"), group)
    y_src = agree(lambda: _node_rows(labels, n, rank, world, "labels"), group)
    if x_src is None and share.x is not None:
        x_src = (np.asarray(share.x), 0, n)
    if y_src is None and share.y is not None:
        y_src = (np.asarray(share.y), 0, n)
    has_x = x_src is not None or bool(head[0, 3]) or feature_dim > 0
    has_y = y_src is not None or bool(head[0, 4]) or num_classes > 0
    x_meta = _agreed_meta(x_src, features is not None or bool(head[0, 3]), "features", group)
    y_meta = _agreed_meta(y_src, labels is not None or bool(head[0, 4]), "labels", group)

    # 1-2. every CSR entry to the owner of its target, with its edge id
    def owner_of(ids: np.ndarray) -> np.ndarray:
        return assign_nodes(ids, n, world, method, seed)

    kept_here = (int(np.count_nonzero(share.src != share.dst)) if drop_self_loops
                 else share.src.shape[0])
    kept = _gather([kept_here], group)[:, 0]
    n_chunks, make, _ = _record_maker(share, off, m, undirected, drop_self_loops,
                                      drop_duplicates, int(kept[:rank].sum()), int(kept.sum()),
                                      owner_of, chunk)
    rec, _ = shuffle_stream(ex, n_chunks, make, 3)
    del share, make
    if drop_duplicates:
        rec = _dedup(ex, rec, counts, m, n, chunk, group)
    # 3. relabel and build the CSR (freeing each input as soon as it is used: peak ~ 2x part)
    check_allocation(f"{share_name(spec)}: the node arrays of part {rank} ({n:,} nodes, "
                     f"{world} parts)", 40 * (n // world + 1),
                     "use more ranks, or renumber sparse ids (--renumber true, "
                     "dataset.renumber: true)")
    orig_ids = part_node_ids(rank, n, world, method, seed)
    box = [rec]
    del rec
    arrays, bounds, stats = _part_csr(ex, box, orig_ids, owner_of, chunk, 2 * m, n, method,
                                      seed, keep_ids=method == "range" or world == 1)
    if has_x:
        arrays["x"] = _place_rows(ex, x_src, x_meta, orig_ids, n, method, seed, chunk,
                                  lambda ids: node_features(ids, feature_dim, data_seed,
                                                            num_classes))
    if has_y:
        arrays["y"] = _place_rows(ex, y_src, y_meta, orig_ids, n, method, seed, chunk,
                                  lambda ids: node_labels(ids, num_classes, data_seed))
    # 4. write
    _write(ex, out, arrays, bounds, n, chunk, stats, share_name(spec),
           has_x, has_y, overwrite, source, group, node_ids)
    stats.update(out=str(out), seconds=time.perf_counter() - t0, num_nodes=n,
                 num_edges=sum(stats["part_edges"]), graph_name=share_name(spec),
                 renumbered=node_ids is not None)
    return stats


def partition_typed_distributed(
    path: str | os.PathLike,
    out_dir: str | os.PathLike,
    method: str = "random",
    seed: int = 0,
    *,
    overwrite: bool = False,
    source: dict | None = None,
    chunk: int = DEFAULT_CHUNK,
    group: dist.ProcessGroup | None = None,
) -> dict:
    """Partition the typed graph at ``path`` (an OGB hetero directory, or a ``.pt`` of a
    ``HeteroData``, its ``to_dict()`` or the dict form) into one typed part per rank.

    Collective, the steps of :func:`partition_distributed` over the internal ids, each rank
    reading the ``r``-th of ``W`` slices of every relation and type's node rows (a ``.pt`` is
    memory-mapped). The files are those of :func:`~mnmg_sampler.graph.partition.partition` for
    the same input, ``method`` and ``seed``. Returns the partition statistics plus ``out``,
    ``seconds``, ``num_nodes``, ``num_edges``, ``graph_name`` and ``node_types``.
    """
    t0 = time.perf_counter()
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    out = Path(out_dir).absolute()
    ex = Exchanger(group, torch.device("cpu"))
    agree(lambda: _check_args(path, out, method, overwrite, world), group)

    def read():
        reader = read_ogb_hetero_share if is_ogb_hetero_dir(path) else read_typed_torch_share
        got = reader(path, rank, world)
        check_type_names(got.name, got.num_nodes)
        return got

    sh = agree(read, group)
    lay = typed_layout(sh.num_nodes, sh.edges)
    off, types = lay.node_type_offset, range(len(lay.node_types))
    n = int(off[-1])
    if world > max(n, 1):
        raise PartitionError(f"{world} parts requested for graph '{sh.name}' with {n} nodes",
                             "some parts would own no node", f"use at most {n} parts")

    def owner_of(v: np.ndarray) -> np.ndarray:  # per type, from the per-type id
        t = np.searchsorted(off, v, side="right") - 1
        d = np.empty(v.shape, np.int64)
        for i in types:
            m = t == i
            d[m] = assign_nodes(v[m] - off[i], int(off[i + 1] - off[i]), world, method, seed)
        return d

    # 1-2. every CSR entry to the owner of its target: (target, source, edge id, relation
    # [, float32 weight bits])
    rel_edges = [sh.edges[et][1] for et in lay.edge_types]
    weighted = np.array([et in sh.weights for et in lay.edge_types], np.uint8)
    width = 5 if weighted.any() else 4
    pieces = [(r, a, min(len(sh.edges[et][2]), a + chunk)) for r, et in enumerate(lay.edge_types)
              for a in range(0, len(sh.edges[et][2]), chunk)]

    def make(i: int):
        r, a, b = pieces[i]
        first, _, src, dst = sh.edges[lay.edge_types[r]]
        cols = np.empty((b - a, width), np.int64)
        cols[:, 0] = dst[a:b] + off[lay.rel_dst[r]]
        cols[:, 1] = src[a:b] + off[lay.rel_src[r]]
        cols[:, 2] = np.arange(first + a, first + b, dtype=np.int64)
        cols[:, 3] = r
        if width == 5:
            w = sh.weights.get(lay.edge_types[r], np.ones(len(src), np.float32))
            cols[:, 4] = w[a:b].view(np.int32)
        return cols, owner_of(cols[:, 0]), None

    rec, _ = shuffle_stream(ex, len(pieces), make, width)
    sh.edges.clear()
    sh.weights.clear()
    # 3. relabel; rows are the owned nodes' (node, relation) segments, entries by edge id
    per_type = [part_node_ids(rank, int(off[t + 1] - off[t]), world, method, seed) for t in types]
    owned = np.concatenate([ids + off[t] for t, ids in zip(types, per_type, strict=True)])
    box = [rec]
    del rec
    arrays, bounds, stats = _part_csr(ex, box, owned, owner_of, chunk, max([0, *rel_edges]), n,
                                      method, seed, layout=lay)
    type_offset = arrays["type_offset"]
    # node rows of every type: sent by the ranks that read them
    meta: dict[str, tuple[str, tuple]] = {}
    masks = {t: [*sh.mask_rows.get(t, {}), *sh.masks.get(t, {})] for t in lay.node_types}
    for t, name in enumerate(lay.node_types):
        rows = [(f"x.{name}", sh.x.pop(name, None)), (f"y.{name}", sh.y.pop(name, None))]
        rows += [(f"mask.{name}.{k}", v) for k, v in sh.mask_rows.pop(name, {}).items()]
        for key, got in rows:
            if got is not None:
                lo, a = got
                meta[key] = _agreed_meta((a, lo), True, f"{path}: {key}", group)
                a = a if a.shape[0] else np.zeros((0, *meta[key][1]), meta[key][0])
                arrays[key] = _place_rows(ex, (a, lo, lo + a.shape[0]), meta[key], per_type[t],
                                          int(off[t + 1] - off[t]), method, seed, chunk, None)
        for split, ids in sh.masks.get(name, {}).items():
            arrays[f"mask.{name}.{split}"] = np.isin(per_type[t], ids)
    type_nodes = _gather(np.diff(type_offset), group)
    typed = typed_section(lay.node_types, lay.edge_types, off,
                          dict(zip(lay.edge_types, rel_edges, strict=True)), weighted,
                          {t: meta[f"x.{t}"] for t in lay.node_types if f"x.{t}" in meta},
                          {t: meta[f"y.{t}"][0] for t in lay.node_types if f"y.{t}" in meta},
                          masks, type_nodes, None)
    # 4. write
    _write(ex, out, arrays, bounds, n, chunk, stats, sh.name, False, False, overwrite, source,
           group, extra={"typed": typed, "format_version": TYPED_FORMAT_VERSION,
                         "has_weights": bool(weighted.any())})
    stats.update(out=str(out), seconds=time.perf_counter() - t0, num_nodes=n,
                 num_edges=sum(stats["part_edges"]), graph_name=sh.name,
                 node_types=len(lay.node_types), edge_types=len(lay.edge_types))
    return stats


def _agreed_meta(src, given: bool, what: str, group) -> tuple[str, tuple] | None:
    """(dtype, row shape) of node rows read in slices (``src``: ``(rows, lo, hi)`` or ``None``
    on a rank without rows), the same on every rank: a rank without rows (a CSV slice without a
    type, the ranks other than 0 of a whole input) takes the others'; an error on every rank
    where they differ. ``None`` where no rank was ``given`` rows (the rows are then made)."""
    if not given:
        return None
    a = np.zeros(0) if src is None else src[0]
    v = np.full(5, -1, np.int64)
    if a.shape[0]:
        v[0] = _DTYPES.index(a.dtype.str) if a.dtype.str in _DTYPES and a.ndim < 5 else -2
        if v[0] >= 0:
            v[1:a.ndim] = a.shape[1:]
    known = {tuple(int(c) for c in r) for r in _gather(v, group) if r[0] != -1}
    if len(known) > 1 or any(r[0] == -2 for r in known):
        raise GraphFormatError(f"{what}: the ranks read rows of different or unsupported dtypes "
                               "or widths", "they cannot be stored as one array",
                               "give every row the same width, in a plain numeric dtype")
    if not known:
        return a.dtype.str, tuple(a.shape[1:])
    r = known.pop()
    return _DTYPES[r[0]], tuple(c for c in r[1:] if c >= 0)


def _part_csr(ex, box: list, owned, owner_of, chunk: int, max_eid: int, n: int, method: str,
              seed: int, keep_ids: bool = False, layout=None):
    """``(arrays, boundaries, stats)`` of this part once every rank knows its ``owned`` nodes
    (ascending) and received its entries (``box``: ``[rec]``, handed over so that they are freed
    here), rows (target, source, edge id[, relation[, float32 weight bits]]). ``keep_ids``: new
    ids are the ids (``range`` or one part of a one-type graph); ``layout``: a typed graph's
    :class:`~mnmg_sampler.graph.typed.TypedLayout`, whose rows are (node, relation) segments."""
    rec = box.pop()
    rank = ex.rank
    sizes = _gather([owned.shape[0]], ex.group)[:, 0]
    bounds = np.zeros(ex.world_size + 1, np.int64)
    np.cumsum(sizes, out=bounds[1:])
    cut = sum(int(np.count_nonzero(owner_of(rec[a:a + chunk, 1]) != rank))
              for a in range(0, rec.shape[0], chunk))
    totals = _gather([rec.shape[0], cut], ex.group)
    num_edges = int(totals[:, 0].sum())
    stats = part_stats(method, seed, n, num_edges, sizes, totals[:, 0],
                       int(totals[:, 1].sum()) / num_edges if num_edges else 0.0)
    start = int(bounds[rank])
    if keep_ids:
        new_src = rec[:, 1].copy()
    else:
        new_src = lookup(ex, rec[:, 1], owner_of, lambda q: start + np.searchsorted(owned, q),
                         chunk)
    seg, rows = np.searchsorted(owned, rec[:, 0]), owned.shape[0]
    if layout is not None:  # the first segment of every owned node, plus the relation's place
        type_offset = np.searchsorted(owned, layout.node_type_offset).astype(np.int64)
        seg0 = np.zeros(rows + 1, np.int64)
        np.cumsum(np.repeat(np.diff(layout.rel_offset), np.diff(type_offset)), out=seg0[1:])
        seg = seg0[seg]
        seg += (np.arange(len(layout.edge_types)) - layout.rel_offset[layout.rel_dst])[rec[:, 3]]
        rows = int(seg0[-1])
    eid = rec[:, 2].copy()
    w = rec[:, 4].astype(np.int32).view(np.float32) if rec.shape[1] == 5 else None
    del rec
    arrays = {"indptr": _indptr(seg, rows)}
    order = _entry_order(seg, eid, rows, max_eid)
    del seg
    arrays["indices"] = new_src[order]
    del new_src
    arrays["edge_ids"] = eid[order]
    del eid
    arrays["orig_ids"] = owned
    if layout is not None:
        arrays["type_offset"] = type_offset
    if w is not None:
        arrays["weights"] = w[order]
    return arrays, bounds, stats


def _indptr(row: np.ndarray, rows: int) -> np.ndarray:
    out = np.zeros(rows + 1, np.int64)
    np.cumsum(np.bincount(row, minlength=rows), out=out[1:])
    return out


def _entry_order(row: np.ndarray, eid: np.ndarray, rows: int, max_id: int) -> np.ndarray:
    """The order of entries by (row, edge id), distinct pairs with ids below ``max_id``;
    ``row`` is overwritten (packed with the id into one int64 key where that fits)."""
    m_ids = max(1, max_id)
    if rows * m_ids >= 2**62:
        return np.lexsort((eid, row))
    row *= m_ids
    row += eid
    return np.argsort(row)  # keys are distinct: no stability needed


def _renumber(ex: Exchanger, share: EdgeShare, max_id: int, force: bool, chunk: int,
              group) -> tuple[np.ndarray, int, int] | None:
    """Collective: number the distinct ids of every rank's edges ``0..N-1`` in ascending order
    and rewrite ``share``'s edges in them, when forced or :func:`should_renumber` says so.

    The id range ``[0, max_id]`` is cut into ``W`` equal value ranges; rank ``r`` receives the
    distinct ids of its range (the sorted slice ``node_ids[first:first + len]`` of the whole
    graph) and answers the new id of each, so memory follows the edges and the distinct ids,
    never the largest id. Returns ``(this rank's sorted slice, first, N)`` or ``None``.
    """
    world = ex.world_size
    top = max_id + 1
    cuts = np.array([top * r // world for r in range(1, world)], np.int64)
    check_allocation(f"{share.name}: renumbering {share.src.size:,} edges", 48 * share.src.size,
                     "use more ranks, or split the input into more files")
    here = sorted_unique(np.concatenate([share.src, share.dst]))
    got, _ = shuffle(ex, here[:, None], np.searchsorted(cuts, here, side="right"), chunk)
    del here
    mine = sorted_unique(got[:, 0])
    del got
    sizes = _gather([mine.size], group)[:, 0]
    total = int(sizes.sum())
    if not force and not should_renumber(max_id, total):
        return None
    first = int(sizes[:ex.rank].sum())

    def owner(q: np.ndarray) -> np.ndarray:
        return np.searchsorted(cuts, q, side="right")

    def answer(q: np.ndarray) -> np.ndarray:
        return first + np.searchsorted(mine, q)

    share.src = lookup(ex, share.src, owner, answer, chunk)
    share.dst = lookup(ex, share.dst, owner, answer, chunk)
    if ex.rank == 0:
        log.info("%s: renumbered %d distinct node ids (largest %d) to 0..%d", share.name, total,
                 max_id, total - 1)
    return mine, first, total


def share_name(spec) -> str:
    """The graph's name as :func:`mnmg_sampler.graph.datasets.load_graph` names it."""
    s = str(spec)
    key = s.strip().lower()
    if key.startswith("rmat:"):
        scale, ef = _parse_rmat(key)
        return f"rmat:{scale}:{ef}"
    if key in BUILTINS:
        return key
    return str(Path(s).expanduser())


def _place_rows(ex, src, meta, orig_ids, n, method, seed, chunk, synth) -> np.ndarray:
    """This part's node rows: generated here, or sent by the ranks that read them (``src``:
    ``(rows, lo, hi)``, the input's rows ``[lo, hi)``)."""
    if meta is None:
        return np.ascontiguousarray(synth(orig_ids))
    dtype, shape = meta
    out = np.empty((orig_ids.shape[0], *shape), np.dtype(dtype))
    a, lo, hi = src if src is not None else (np.zeros((0, *shape), np.dtype(dtype)), 0, 0)
    ids = np.arange(lo, hi, dtype=np.int64)
    dest = assign_nodes(ids, n, ex.world_size, method, seed)
    got_ids, got_rows = shuffle(ex, ids[:, None], dest, chunk, rows=np.asarray(a))
    out[np.searchsorted(orig_ids, got_ids[:, 0])] = got_rows
    return out


def _dedup(ex, rec, counts, m, n, chunk, group) -> np.ndarray:
    """Keep the first copy of each (target, source) and give kept edges their final ids.

    Sorted and compacted in place, a column at a time: memory beyond ``rec`` is a few columns.
    """
    if n * n < 2**63:
        key = rec[:, 0] * n + rec[:, 1]
        order = np.lexsort((rec[:, 2], key))
        del key
    else:
        order = np.lexsort((rec[:, 2], rec[:, 1], rec[:, 0]))
    for c in range(3):
        rec[:, c] = rec[order, c]
    del order
    first = np.ones(rec.shape[0], bool)
    first[1:] = (rec[1:, 0] != rec[:-1, 0]) | (rec[1:, 1] != rec[:-1, 1])
    keep = np.flatnonzero(first)
    del first
    for c in range(3):
        rec[:keep.shape[0], c] = rec[keep, c]
    rec = rec[:keep.shape[0]]
    del keep
    # the rank that read a position hands out its compacted id
    off = np.zeros(ex.world_size + 1, np.int64)
    np.cumsum(counts, out=off[1:])
    rank = ex.rank
    lo, hi = int(off[rank]), int(off[rank + 1])
    pos = rec[:, 2]

    def reader_of(p: np.ndarray) -> np.ndarray:
        return np.searchsorted(off, p % m if m else p, side="right") - 1

    got, _ = shuffle(ex, pos[:, None], reader_of(pos), chunk)
    kept = np.zeros(2 * (hi - lo), bool)  # originals, then reverses, of this rank's range
    p = got[:, 0]
    kept[np.where(p < m, p - lo, p - m - lo + (hi - lo))] = True
    del got, p
    k_orig = np.cumsum(kept[:hi - lo]) - 1
    k_rev = np.cumsum(kept[hi - lo:]) - 1
    both = _gather([int(kept[:hi - lo].sum()), int(kept[hi - lo:].sum())], group)
    base_o = int(both[:rank, 0].sum())
    base_r = int(both[:, 0].sum()) + int(both[:rank, 1].sum())

    def answer(q: np.ndarray) -> np.ndarray:
        a = np.empty(q.shape[0], np.int64)
        o = q < m
        a[o] = base_o + k_orig[q[o] - lo]
        a[~o] = base_r + k_rev[q[~o] - m - lo]
        return a

    rec[:, 2] = lookup(ex, pos, reader_of, answer, chunk)
    return rec


def _write_map_slice(path: Path, header: int, first: int, values: np.ndarray) -> None:
    with open(path, "r+b") as f:
        f.seek(header + 8 * first)
        f.write(np.ascontiguousarray(values, dtype="<i8").tobytes())
        f.flush()
        os.fsync(f.fileno())


def _crc_int(checksum: str) -> int:
    return int(checksum.split(":")[1], 16)


def _write_error(rank: int, tmp: Path, e: OSError) -> PartitionError:
    return PartitionError(f"rank {rank} cannot write its part under {tmp} ({e})",
                          "the partition directory is not created",
                          "give --out on a file system every rank can write, with enough space")


def _write(ex, out, arrays, bounds, n, chunk, stats, name, has_x, has_y,
           overwrite, source, group, node_ids=None, extra=None) -> None:
    """Write every rank's part into a shared temporary directory; rank 0 installs it. On any
    failure the temporary directory is removed and every rank raises. ``arrays`` has the same
    keys, in the same order, on every rank; ``extra`` entries are added to the manifest."""
    nonce = torch.tensor([secrets.randbits(62) if ex.rank == 0 else 0], dtype=torch.int64)
    dist.broadcast(nonce, 0, group=group)
    tmp = out.parent / f"{TMP_PREFIX}{out.name}-{int(nonce.item()):x}"
    try:
        _write_parts(ex, tmp, out, arrays, bounds, n, chunk, stats, name, has_x, has_y,
                     overwrite, source, group, node_ids, extra)
    except BaseException:
        if ex.rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        raise


def _write_parts(ex, tmp, out, arrays, bounds, n, chunk, stats, name, has_x, has_y,
                 overwrite, source, group, node_ids, extra) -> None:
    rank, world = ex.rank, ex.world_size
    # the global maps; node_ids.npy (a renumbered graph's input ids) is written slice by slice
    maps = ("new_to_orig.npy", "orig_to_new.npy") + (("node_ids.npy",) if node_ids else ())

    def create() -> None:
        if rank != 0:
            return
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            tmp.mkdir()
            for rel in maps:  # the header np.save writes, then each rank writes a slice
                del_ = np.lib.format.open_memmap(tmp / rel, mode="w+", dtype=np.int64, shape=(n,))
                del del_
        except OSError as e:
            raise _write_error(rank, tmp, e) from e

    agree(create, group)
    with open(tmp / maps[0], "rb") as f:
        np.lib.format.read_magic(f)
        np.lib.format.read_array_header_1_0(f)
        hdr = f.tell()
    files: dict[str, dict] = {}
    orig_ids = arrays["orig_ids"]

    def write_own() -> None:
        try:
            for key, arr in arrays.items():
                _save(tmp, f"part{rank}/{key}.npy", arr, files)
            _write_map_slice(tmp / maps[0], hdr, int(bounds[rank]), orig_ids)
            if node_ids:
                _write_map_slice(tmp / maps[2], hdr, node_ids[1], node_ids[0])
        except OSError as e:
            raise _write_error(rank, tmp, e) from e

    agree(write_own, group)
    # orig_to_new: the slice of original ids [even[q], even[q+1]) is written by rank q
    even = _even_boundaries(n, world)
    new = np.arange(bounds[rank], bounds[rank + 1], dtype=np.int64)
    got, _ = shuffle(ex, np.stack([orig_ids, new], axis=1),
                     np.searchsorted(even, orig_ids, side="right") - 1, chunk)
    inv = np.empty(int(even[rank + 1] - even[rank]), np.int64)
    inv[got[:, 0] - even[rank]] = got[:, 1]
    del got

    def write_inv() -> None:
        try:
            _write_map_slice(tmp / maps[1], hdr, int(even[rank]), inv)
        except OSError as e:
            raise _write_error(rank, tmp, e) from e

    agree(write_inv, group)
    # every part's file entries to rank 0: (len, bytes, crc) per key, in a fixed order
    keys = tuple(arrays)
    width = 3 + SAMPLE_BLOCKS  # length, bytes, crc, sampled-block crcs
    mine = np.full((len(keys), width), -1, np.int64)
    for i, key in enumerate(keys):
        e = files.get(f"part{rank}/{key}.npy")
        if e is not None:
            mine[i, :3] = (e["shape"][0], e["bytes"], _crc_int(e["checksum"]))
            for j, c in enumerate(e.get("samples", [])):
                mine[i, 3 + j] = _crc_int(c)
    table = _gather(mine, group).reshape(world, len(keys), width)

    def finish() -> None:
        if rank != 0:
            return
        all_files: dict[str, dict] = {}
        for rel in maps:
            arr = np.load(tmp / rel, mmap_mode="r", allow_pickle=False)
            all_files[rel] = file_entry(tmp / rel, arr)
        parts_meta = []
        for r in range(world):
            pnames = {}
            for i, key in enumerate(keys):
                length, nbytes, crc = (int(v) for v in table[r, i, :3])
                if length < 0:
                    continue
                rel = f"part{r}/{key}.npy"
                own = files.get(f"part0/{key}.npy")  # rank 0's entry: dtype and row shape
                shape = [length, *own["shape"][1:]] if own else [length]
                dtype = own["dtype"] if own else "<i8"
                all_files[rel] = {"dtype": dtype, "shape": shape, "bytes": nbytes,
                                  "checksum": f"crc32:{crc:08x}"}
                samples = [f"crc32:{int(c):08x}" for c in table[r, i, 3:] if c >= 0]
                if samples:
                    all_files[rel]["samples"] = samples
                pnames[key] = rel
            parts_meta.append({"rank": r, "num_nodes": int(stats["part_nodes"][r]),
                               "num_edges": int(stats["part_edges"][r]), "files": pnames})
        manifest = build_manifest(name, n, sum(stats["part_edges"]), bounds, has_x, has_y,
                                  [], stats, parts_meta, dict(sorted(all_files.items())),
                                  source=source)
        manifest.update(extra or {})
        write_manifest(tmp, manifest)  # last: a directory without it never loads
        if out.exists() and not overwrite:
            raise PartitionError(f"output directory {out} appeared while partitioning",
                                 "it is left untouched", "choose another --out")
        install_directory(tmp, out)
        log.info("wrote %d parts to %s (%s)", world, out, MANIFEST)

    agree(finish, group)

