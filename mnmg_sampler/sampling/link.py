"""Sampling around seed edges (PyG's ``sample_from_edges``) of any graph: negatives, the node
request, the link fields of the result. A one-type graph is the case of one relation.

The link loader (:mod:`mnmg_sampler.loaders.link`) only chooses which seed edges form global batch
``g``; everything here is a function of ``(seed, epoch, g)``, those edges and the graph, so a
batch is bit-identical for any world size, partitioning and merge pattern:

1. :func:`build_link_request` draws the negatives of relation ``(S, rel, D)`` with the
   counter-based RNG (:mod:`mnmg_sampler.ops.negative`), redrawing those the caller's membership
   test calls edges (``reject_known``), and sorts the de-duplicated endpoints into the seeds of
   one node request keyed ``request_key(seed, epoch, g)``, sampled (and merged into rounds) like
   any node batch. With time every endpoint grows its own tree bounded by its positive's time.
2. :func:`finish_link_batch` makes the :class:`~mnmg_sampler.sampling.batch.LinkMiniBatch` (local
   ``edge_label_index``, triplet indices) and, with ``exclude_seed_edges``, removes the seed edges
   and their reverses by node pair after sampling, as GraphBolt does (only hop-1 edges can be
   either: both end at a seed, and seeds are expanded at hop 1 only).

See docs/link.md#negative-sampling-mnmg_sampleropsnegative-called-by-mnmg_samplersamplinglink.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace

import numpy as np
import torch

from ..errors import GraphFormatError, SamplingInputError
from ..ops.negative import (
    NEG_SRC_HOP,
    AdmissibleNodes,
    KnownFn,
    NegativeSampling,
    sample_negatives,
)
from .batch import EdgeType, LinkMiniBatch, MiniBatch
from .sampler import SampleRequest, request_key

__all__ = ["KnownFn", "LinkPlan", "NegativeSampling", "build_link_request", "finish_link_batch",
           "max_degrees", "reverse_relation", "seed_edge_array", "tree_node_bound",
           "tree_request", "typed_link_input"]


@dataclass
class LinkPlan:
    """What a link batch needs after sampling: the request and how to read its result."""

    request: SampleRequest
    pos: np.ndarray  # positions of the positives in edge_label_index
    src_local: np.ndarray  # local id (in n_id[S]) of every source: positives', then negatives'
    dst_local: np.ndarray  # local id (in n_id[D]) of every destination, in the same order
    label: np.ndarray | None
    neg: NegativeSampling | None
    edge_type: EdgeType | None = None  # typed: the seed edges' relation
    edge_label_time: np.ndarray | None = None  # the positives' times (temporal)
    trees: int = 0  # disjoint: positives per batch (PyG's batch % num_pos); 0 = not disjoint


def build_link_request(edge_label_index: np.ndarray, edge_label: np.ndarray | None,
                       pos: np.ndarray, *, g: int, epoch: int, seed: int,
                       num_neighbors: Sequence[int] | Mapping, replace: bool,
                       num_nodes: int | tuple[int, int], neg: NegativeSampling | None,
                       known: KnownFn | None = None, more=None, edge_ids: bool = True,
                       edge_type: EdgeType | None = None,
                       edge_label_time: np.ndarray | None = None, time_attr: str | None = None,
                       temporal_strategy: str = "uniform", disjoint: bool = False,
                       neg_times: tuple[AdmissibleNodes, AdmissibleNodes] | None = None,
                       batch_columns: bool = False) -> LinkPlan:
    """Draw the negatives of global batch ``g`` and form its node request (step 1).

    ``edge_type`` names the relation of a typed graph (``None``: a homogeneous part's graph);
    ``num_nodes`` is the node count, or for a relation ``(source count, destination count)``.
    With ``reject_known``, ``known(src ids, dst ids)`` (per-type ids; in a distributed loader a
    collective exchange, ``more`` its agreement) tells which candidates are edges; a rejected
    destination is drawn again (a binary negative's drawn source is kept).

    ``disjoint`` (implied by ``time_attr``, which requires ``edge_label_time`` ``[E]``): as
    PyG's ``edge_sample``, every endpoint is a seed of its own, not de-duplicated (sources, then
    destinations), negatives ordered by draw then positive, so that tree ``b`` belongs to
    positive ``b % P`` and is bounded by its time. ``neg_times`` (the source and destination
    types' :class:`~mnmg_sampler.ops.negative.AdmissibleNodes`): every drawn negative endpoint
    has node time <= its positive's time (PyG's rule).

    ``batch_columns``: ``edge_label_index``, ``edge_label`` and ``edge_label_time`` hold only
    the batch's columns, column ``i`` being the positive at position ``pos[i]`` (PyG's
    ``EdgeSamplerInput``); the batch is the same as from the whole arrays."""
    key = request_key(seed, epoch, g)
    n_src, n_dst = (num_nodes, num_nodes) if np.isscalar(num_nodes) else num_nodes
    disjoint = bool(disjoint) or time_attr is not None  # temporal sampling is disjoint
    cols = np.arange(pos.size) if batch_columns else pos  # the positives' columns
    src = edge_label_index[0, cols]
    dst = edge_label_index[1, cols]
    srcs, dsts = src, dst
    if neg is not None:
        neg_src = None
        a_src = a_dst = t_pos = None
        if neg_times is not None:
            a_src, a_dst = neg_times
            t_pos = edge_label_time[cols]
        if neg.mode == "binary" and edge_type is None:  # one type: the positive's source
            srcs = np.concatenate([src, np.repeat(src, neg.amount)])
        elif neg.mode == "binary":
            neg_src = sample_negatives(src, pos, seed=seed, key=key, amount=neg.amount,
                                       num_nodes=n_src, hop=NEG_SRC_HOP, admissible=a_src,
                                       time=t_pos)
            srcs = np.concatenate([src, neg_src.ravel()])
        negs = sample_negatives(src, pos, seed=seed, key=key, amount=neg.amount,
                                num_nodes=n_dst, known=known if neg.reject_known else None,
                                more=more, max_attempts=neg.max_attempts, draw_src=neg_src,
                                admissible=a_dst, time=t_pos)
        if disjoint:  # draw-major: negative a of positive i at P + a * P + i
            negs = negs.T
            neg_src = None if neg_src is None else neg_src.T
            srcs = srcs if neg_src is None else np.concatenate([src, neg_src.ravel()])
        dsts = np.concatenate([dst, negs.ravel()])
    label = None if edge_label is None else edge_label[cols]
    if disjoint and edge_type is None:
        raise SamplingInputError("disjoint link batches of a one-type graph given as a CSR",
                                 "its sampler grows no trees",
                                 "read the graph as a typed graph of one type "
                                 "(load_temporal_graph, docs/temporal.md)")
    two = edge_type is not None and edge_type[0] != edge_type[2]
    t_pos, trees = None, {}
    if disjoint:  # one tree per endpoint, bounded by its positive's time; local ids: positions
        s_seeds = srcs if two else np.concatenate([srcs, dsts])
        d_seeds = dsts
        s_loc = np.arange(srcs.size, dtype=np.int64)
        d_loc = np.arange(dsts.size, dtype=np.int64) + (0 if two else srcs.size)
        t_pos = None if edge_label_time is None else edge_label_time[cols]
        trees = {"input_time": None if t_pos is None else np.tile(
                     t_pos, (srcs.size + dsts.size) // max(pos.size, 1)),
                 "time_attr": time_attr, "temporal_strategy": temporal_strategy,
                 "disjoint": True}
    elif two:
        s_seeds, s_loc = np.unique(srcs, return_inverse=True)
        d_seeds, d_loc = np.unique(dsts, return_inverse=True)
    else:  # one node type: sources and destinations are one seed list
        s_seeds, inv = np.unique(np.concatenate([srcs, dsts]), return_inverse=True)
        s_loc, d_loc = inv[:srcs.size], inv[srcs.size:]
    request = SampleRequest(s_seeds, num_neighbors, key, replace, input_id=pos,
                            edge_ids=edge_ids, other_seeds={edge_type[2]: d_seeds} if two else None,
                            input_type=None if edge_type is None else edge_type[0], **trees)
    return LinkPlan(request, pos, s_loc.astype(np.int64).ravel(),
                    d_loc.astype(np.int64).ravel(), label, neg, edge_type, t_pos,
                    pos.size if disjoint else 0)


def max_degrees(graph) -> np.ndarray:
    """``[R]`` int64: the largest number of neighbors one node has along each relation (of the
    nodes this graph, or part, holds the segments of)."""
    seg = np.diff(np.asarray(graph.indptr))
    out = np.zeros(len(graph.edge_types), np.int64)
    for t in range(len(graph.node_types)):
        lo, hi = int(graph.rel_offset[t]), int(graph.rel_offset[t + 1])
        n = int(graph.node_type_offset[t + 1] - graph.node_type_offset[t])
        if hi > lo and n:
            per = seg[graph.seg_base[t]:graph.seg_base[t] + n * (hi - lo)]
            if per.size:
                out[lo:hi] = per.reshape(-1, hi - lo).max(axis=0)
    return out


def tree_node_bound(graph, num_neighbors, root_types: Sequence[str],
                    max_degree: np.ndarray | None = None) -> int:
    """The most nodes one disjoint tree rooted at a node of any of ``root_types`` can hold:
    every hop draws at most the relation's fanout (``-1``: ``max_degree[r]``, then required)
    neighbors for each node of the relation's destination type; dedup within a tree and time
    bounds only lower the count."""
    from .sampler import fanout_table

    table = fanout_table(graph, num_neighbors)
    T = len(graph.node_types)
    best = 1.0
    for root in root_types:
        count = np.zeros(T, np.float64)
        count[graph.node_types.index(root)] = 1.0
        total = 1.0
        for h in range(table.shape[0]):
            nxt = np.zeros(T, np.float64)
            for r in range(len(graph.edge_types)):
                f = int(table[h, r])
                if f < 0:
                    if max_degree is None:
                        raise SamplingInputError("a fanout of -1 without max_degree",
                                                 "the tree size has no bound",
                                                 "pass the relations' largest degrees")
                    f = int(max_degree[r])
                nxt[int(graph.rel_src[r])] += count[int(graph.rel_dst[r])] * f
            count = nxt
            total += float(count.sum())
        best = max(best, total)
    return int(min(best, 2**62))


def tree_request(plan: LinkPlan, lo: int, hi: int) -> SampleRequest:
    """The request of trees ``lo .. hi - 1`` of a disjoint ``plan`` (trees numbered in its seed
    order: sources, then destinations of another type): the same key and times, so each tree
    equals its tree in ``plan.request`` (draws are keyed on the node, not on the tree)."""
    req = plan.request
    groups, off = [], 0
    for t, ids in req.seed_groups():
        a, b = max(lo - off, 0), min(hi - off, ids.size)
        if b > a:
            groups.append((t, ids[a:b]))
        off += ids.size
    if not groups:
        raise SamplingInputError(f"trees {lo}..{hi - 1} of a batch of {off} trees", "",
                                 "ask for trees the batch has")
    times = None if req.input_time is None else req.input_time[lo:hi]
    return replace(req, input_type=groups[0][0], seeds=groups[0][1], input_time=times,
                   other_seeds=dict(groups[1:]) or None)


def _drop_pairs(edges: dict, eids: dict, n_edges: dict, et, row_nid: np.ndarray,
                rows: np.ndarray, cols: np.ndarray, n_cols: int) -> None:
    """Remove the hop-1 edges of relation ``et`` from a node of original id ``rows[i]``
    (``row_nid``: ``n_id`` of the row type) into local node ``cols[i]``, in place. By original
    source id, so that in a disjoint tree the source's own copy matches too."""
    h1 = n_edges[et][0] if n_edges[et] else 0
    if not h1 or not rows.size:
        return
    ei = edges[et].numpy()
    n = np.int64(max(n_cols, 1))
    bad = np.isin(row_nid[ei[0, :h1]] * n + ei[1, :h1], rows * n + cols)
    if not bad.any():
        return
    keep = np.ones(ei.shape[1], bool)
    keep[:h1] = ~bad
    n_edges[et][0] = h1 - int(bad.sum())
    edges[et] = torch.from_numpy(np.ascontiguousarray(ei[:, keep]))
    if eids[et].numel():  # empty when the request asked for no edge ids
        eids[et] = torch.from_numpy(eids[et].numpy()[keep])


def finish_link_batch(mb: MiniBatch, plan: LinkPlan, *, exclude_seed_edges: bool = False,
                      exclude_reverse_edges: bool = False,
                      reverse_edge_type: EdgeType | None = None) -> LinkMiniBatch:
    """Turn the sampled minibatch of ``plan`` into a :class:`LinkMiniBatch` (step 2); the seed
    edges' reverses go too with ``reverse_edge_type`` (typed, ``D -> S``) or, on a one-type
    batch, ``exclude_reverse_edges``."""
    et, P, neg = plan.edge_type, plan.pos.size, plan.neg
    base = {f.name: getattr(mb, f.name) for f in fields(mb)}
    if exclude_seed_edges and P:
        if mb.typed:
            rel, rev = et, reverse_edge_type
            edges, eids = dict(mb.edge_index), dict(mb.e_id)
            n_edges = {k: list(v) for k, v in mb.num_sampled_edges.items()}
            s_nid, d_nid = mb.n_id[et[0]].numpy(), mb.n_id[et[2]].numpy()
        else:  # one type: its one relation, 0
            rel, rev = 0, (0 if exclude_reverse_edges else None)
            edges, eids = {0: mb.edge_index}, {0: mb.e_id}
            n_edges = {0: list(mb.num_sampled_edges)}
            s_nid = d_nid = mb.n_id.numpy()
        s_loc, d_loc = plan.src_local[:P], plan.dst_local[:P]
        _drop_pairs(edges, eids, n_edges, rel, s_nid, s_nid[s_loc], d_loc, d_nid.size)
        if rev is not None:
            _drop_pairs(edges, eids, n_edges, rev, d_nid, d_nid[d_loc], s_loc, s_nid.size)
        if not mb.typed:
            edges, eids, n_edges = edges[0], eids[0], n_edges[0]
        base.update(edge_index=edges, e_id=eids, num_sampled_edges=n_edges)
    if plan.trees:  # PyG: a node's batch is its positive (tree % P)
        base["batch"] = {t: v % plan.trees for t, v in mb.batch.items()}
    out = LinkMiniBatch(**base, edge_type=et)
    if plan.edge_label_time is not None:  # PyG's edge_label_time: one per label edge
        t = torch.from_numpy(np.ascontiguousarray(plan.edge_label_time))
        reps = 1 if neg is None or neg.mode == "triplet" else 1 + neg.amount
        out.edge_label_time = t.repeat(reps)
    label = None if plan.label is None else torch.from_numpy(np.ascontiguousarray(plan.label))
    s_loc, d_loc = torch.from_numpy(plan.src_local), torch.from_numpy(plan.dst_local)
    if neg is not None and neg.mode == "triplet":
        out.edge_label_index = torch.stack([s_loc, d_loc[:P]])
        out.src_index = s_loc
        out.dst_pos_index = d_loc[:P]
        dn = d_loc[P:].reshape(neg.amount, P).t() if plan.trees else \
            d_loc[P:].reshape(P, neg.amount)
        out.dst_neg_index = dn[:, 0].contiguous() if neg.amount == 1 else dn
        return out
    out.edge_label_index = torch.stack([s_loc, d_loc])
    if neg is None:
        out.edge_label = label
        return out
    if label is None:
        label = torch.ones(P, dtype=torch.float32)
    out.edge_label = torch.cat([label, label.new_zeros(P * neg.amount)])
    return out


def _edge_type(key, what: str, edge_types: Sequence[EdgeType]) -> EdgeType:
    """``key`` as one of ``edge_types`` (a tuple or ``"src__rel__dst"``), else a typed error."""
    from ..graph.typed import edge_type_of

    try:
        et = edge_type_of(key, what)
    except GraphFormatError as e:
        raise SamplingInputError(str(e), "the loader cannot be built",
                                 f"use one of {list(edge_types)}") from e
    if et not in edge_types:
        raise SamplingInputError(f"{what} names {et}, not a relation of the graph",
                                 "the loader cannot be built", f"use one of {list(edge_types)}")
    return et


def reverse_relation(edge_type: EdgeType, edge_types: Sequence[EdgeType],
                     given="auto") -> EdgeType | None:
    """The relation holding the reverses of ``edge_type``'s edges: ``"auto"`` finds PyG's
    ``ToUndirected`` naming (``(D, "rev_" + rel, S)``, or ``(D, rel[4:], S)`` for a ``rev_``
    relation) and gives ``None`` when the graph has none; ``None`` means none; an edge type must
    be a relation of the graph from ``D`` to ``S`` (``edge_type`` itself for a one-type relation
    stored both ways)."""
    if given is None:
        return None
    s, rel, d = edge_type
    if isinstance(given, str) and given == "auto":
        cand = (d, rel[4:], s) if rel.startswith("rev_") else (d, "rev_" + rel, s)
        return cand if cand in edge_types else None
    rev = _edge_type(given, "reverse_edge_type", edge_types)
    if (rev[0], rev[2]) != (d, s):
        raise SamplingInputError(f"reverse_edge_type {rev} does not go from {d!r} to {s!r}",
                                 f"it cannot hold the reverses of {edge_type}",
                                 f"name a relation ({d!r}, ..., {s!r}), or pass None")
    return rev


def seed_edge_array(index, counts: tuple[int, int], names=(None, None),
                    what: str = "edge_label_index", node_ids=None) -> np.ndarray:
    """Seed edges ``index`` as a ``[2, E]`` int64 array, checked: integers, row ``i``'s ids in
    ``[0, counts[i])`` (of type ``names[i]``), or with ``node_ids`` (a renumbered graph's
    original ids, ascending) original ids, translated."""
    if torch.is_tensor(index):
        index = index.detach().cpu().numpy()
    index = np.asarray(index)
    consequence = "the loader cannot be built; every rank raises this before sampling"
    if index.ndim != 2 or index.shape[0] != 2 or (index.size and not np.issubdtype(
            index.dtype, np.integer)):
        raise SamplingInputError(f"{what} has shape {list(index.shape)} and dtype "
                                 f"{index.dtype}", "seed edges are columns (src, dst)",
                                 "pass a [2, E] integer array")
    eli = np.ascontiguousarray(index, np.int64)
    if node_ids is not None:
        from .sampler import renumbered_ids

        return renumbered_ids(eli.ravel(), node_ids, what, consequence).reshape(2, -1)
    for row, (n, name) in enumerate(zip(counts, names, strict=True)):
        ids = eli[row]
        if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= n):
            bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
            t = f"{name} " if name else ""
            raise SamplingInputError(f"{what} holds {t}id {bad}, out of range for {n} {t}nodes",
                                     consequence, f"pass {t}ids in [0, {n}) in row {row}")
    return eli


def typed_link_input(sampler, edge_label_index, num_neighbors, reverse_edge_type="auto",
                     exclude_reverse_edges: bool = False):
    """``(edge type, [2, E] int64 seed edges, (source count, destination count), reverse
    relation, num_neighbors)`` of a link loader on a typed part, checked: ``edge_label_index``
    is PyG's ``(edge type, [2, E] per-type ids)`` (a graph of one relation: the ``[2, E]`` ids
    alone, and ``exclude_reverse_edges`` its own reverses), ids in their types' ranges."""
    from .sampler import check_fanouts, fanout_table

    tp = sampler.tp
    ets = list(tp.edge_types)
    what = "the loader cannot be built; every rank raises this before sampling"
    if len(ets) == 1 and not isinstance(edge_label_index, tuple):  # one type: plain ids
        edge_label_index = (ets[0], edge_label_index)
    if not (isinstance(edge_label_index, tuple) and len(edge_label_index) == 2):
        raise SamplingInputError(
            f"edge_label_index is a {type(edge_label_index).__name__}, not an (edge type, "
            "[2, E] ids) pair", what,
            f"pass edge_label_index=(edge_type, index) with edge_type one of {ets}, as PyG's "
            "LinkNeighborLoader on HeteroData")
    et = _edge_type(edge_label_index[0], "edge_label_index", ets)
    counts = tuple(int(np.diff(tp.node_type_offset)[tp.node_types.index(t)])
                   for t in (et[0], et[2]))
    eli = seed_edge_array(edge_label_index[1], counts, (et[0], et[2]), f"edge_label_index of {et}")
    if exclude_reverse_edges and len(ets) > 1:
        raise SamplingInputError("exclude_reverse_edges is for homogeneous graphs (one relation)",
                                 "on a typed graph the reverses live in their own relation",
                                 "pass reverse_edge_type (default 'auto': PyG's rev_ naming)")
    rev = reverse_relation(et, ets, et if exclude_reverse_edges else reverse_edge_type)
    fanout_table(sampler.graph, num_neighbors)
    fanouts = num_neighbors if isinstance(num_neighbors, Mapping) else \
        check_fanouts(num_neighbors)
    return et, eli, counts, rev, fanouts
