"""Sampling around seed edges (PyG's ``sample_from_edges``): negatives, the node request, the
link fields of the result.

The link loader (:mod:`mnmg_sampler.loaders.link`) only chooses which seed edges form global batch
``g``; everything below is a function of ``(seed, epoch, g)``, those edges and the graph, so a
batch is bit-identical for any world size, partitioning and merge pattern:

1. :func:`build_link_request` draws the negatives (:mod:`mnmg_sampler.ops.negative`), keyed on
   ``(seed, request_key(seed, e, g), positive index, draw)``; with ``reject_known`` the caller's
   membership test (in a distributed loader, the owner rank of each candidate's destination)
   tells whether a candidate is an edge, and it is drawn again. The endpoints of positives and
   negatives, de-duplicated and sorted, are the seeds of one
   :class:`~mnmg_sampler.sampling.sampler.SampleRequest` with key ``request_key(seed, e, g)``,
   sampled
   like any node batch (so a service merges it into the same rounds).
2. :func:`finish_link_batch` turns the sampled subgraph into a
   :class:`~mnmg_sampler.sampling.batch.LinkMiniBatch`: ``edge_label_index`` and the triplet
   indices are
   local ids into ``n_id``; with ``exclude_seed_edges`` the positive seed edges (and their
   reverses with ``exclude_reverse_edges``) are removed from ``edge_index`` / ``e_id``, as
   GraphBolt's ``exclude_seed_edges`` does after sampling.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..ops.negative import KnownFn, NegativeSampling, sample_negatives
from .batch import LinkMiniBatch, MiniBatch
from .sampler import SampleRequest, request_key

__all__ = ["KnownFn", "LinkPlan", "NegativeSampling", "build_link_request", "finish_link_batch"]


@dataclass
class LinkPlan:
    """What a link batch needs after sampling: the request and how to read its result."""

    request: SampleRequest
    pos: np.ndarray  # positions of the positives in edge_label_index
    src: np.ndarray  # positives' endpoints (original ids)
    dst: np.ndarray
    inverse: np.ndarray  # local id of every endpoint, in the order they were concatenated
    label: np.ndarray | None
    neg: NegativeSampling | None

    def pos_local(self) -> tuple[np.ndarray, np.ndarray]:
        """Local ids (into ``n_id``) of the positives' sources and destinations."""
        P = self.pos.size
        if self.neg is None or self.neg.mode == "triplet":  # [src, dst, (negatives)]
            return self.inverse[:P], self.inverse[P:2 * P]
        L = P * (1 + self.neg.amount)  # binary: [src of all L pairs, dst of all L pairs]
        return self.inverse[:P], self.inverse[L:L + P]


def build_link_request(edge_label_index: np.ndarray, edge_label: np.ndarray | None,
                       pos: np.ndarray, *, g: int, epoch: int, seed: int,
                       num_neighbors: Sequence[int], replace: bool, num_nodes: int,
                       neg: NegativeSampling | None, known: KnownFn | None = None,
                       more=None, edge_ids: bool = True) -> LinkPlan:
    """Draw the negatives of global batch ``g`` and form its node request (step 1 and 2)."""
    key = request_key(seed, epoch, g)
    src = edge_label_index[0, pos]
    dst = edge_label_index[1, pos]
    parts = [src, dst]
    if neg is not None:
        negs = sample_negatives(src, pos, seed=seed, key=key, amount=neg.amount,
                                num_nodes=num_nodes, known=known if neg.reject_known else None,
                                more=more, max_attempts=neg.max_attempts)
        if neg.mode == "binary":
            parts = [np.concatenate([src, np.repeat(src, neg.amount)]),
                     np.concatenate([dst, negs.ravel()])]
        else:
            parts.append(negs.ravel())
    seeds, inverse = np.unique(np.concatenate(parts), return_inverse=True)
    label = None if edge_label is None else edge_label[pos]
    return LinkPlan(SampleRequest(seeds, num_neighbors, key, replace, input_id=pos,
                                  edge_ids=edge_ids), pos, src, dst,
                    inverse.astype(np.int64).ravel(), label, neg)


def finish_link_batch(mb: MiniBatch, plan: LinkPlan, *, num_nodes: int,
                      exclude_seed_edges: bool = False,
                      exclude_reverse_edges: bool = False) -> LinkMiniBatch:
    """Turn the sampled node minibatch of ``plan`` into a :class:`LinkMiniBatch` (step 3)."""
    edge_index, e_id = mb.edge_index, mb.e_id
    n_edges = list(mb.num_sampled_edges)
    if exclude_seed_edges and n_edges and n_edges[0] and plan.src.size:
        # A seed edge s -> d ends at a seed node, and seeds are expanded at hop 1 only, so only
        # hop-1 edges can be seed edges (or their reverses); compare local-id pairs there.
        P = plan.pos.size
        ei = edge_index.numpy()
        h1 = n_edges[0]
        n_loc = np.int64(mb.n_id.numel())
        s_loc, d_loc = plan.pos_local()
        seeds = [d_loc * n_loc + s_loc]
        if exclude_reverse_edges:
            seeds.append(s_loc * n_loc + d_loc)
        bad = np.isin(ei[1, :h1] * n_loc + ei[0, :h1], np.concatenate(seeds))
        if bad.any():
            keep = np.ones(ei.shape[1], bool)
            keep[:h1] = ~bad
            n_edges[0] = h1 - int(bad.sum())
            edge_index = torch.from_numpy(np.ascontiguousarray(ei[:, keep]))
            if e_id.numel():  # empty when the request asked for no edge ids
                e_id = torch.from_numpy(e_id.numpy()[keep])
    out = LinkMiniBatch(n_id=mb.n_id, edge_index=edge_index, e_id=e_id, input_id=mb.input_id,
                        batch_size=mb.batch_size, num_sampled_nodes=list(mb.num_sampled_nodes),
                        num_sampled_edges=n_edges, x=mb.x, y=mb.y, key=mb.key, meta=mb.meta)
    inv = plan.inverse
    P = plan.pos.size
    neg = plan.neg
    label = None if plan.label is None else torch.from_numpy(np.ascontiguousarray(plan.label))
    if neg is None or neg.mode == "triplet":
        out.edge_label_index = torch.from_numpy(inv[:2 * P].reshape(2, P))
        out.edge_label = label
        if neg is not None:
            out.src_index = torch.from_numpy(inv[:P])
            out.dst_pos_index = torch.from_numpy(inv[P:2 * P])
            d = inv[2 * P:].reshape(P, neg.amount)
            out.dst_neg_index = torch.from_numpy(np.ascontiguousarray(d[:, 0]) if neg.amount == 1
                                                 else d)
        return out
    L = P * (1 + neg.amount)
    out.edge_label_index = torch.from_numpy(inv.reshape(2, L))
    if label is None:
        label = torch.ones(P, dtype=torch.float32)
    out.edge_label = torch.cat([label, label.new_zeros(P * neg.amount)])
    return out
