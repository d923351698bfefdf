"""DistLinkNeighborLoader: minibatches of seed *edges* (link prediction), PyG's conventions.

Seed edges are split across ranks exactly like node seeds (``loader.global_batches`` over
positions of ``edge_label_index``): the same batch count on every rank, every edge used
once per epoch without ``drop_last``. For global batch ``g`` of epoch ``e``:

1. negatives are drawn (:mod:`mnmg_sampler.ops.negative`), keyed on
   ``(seed, request_key(seed, e, g), positive index, draw)``; with ``reject_known`` the owner
   rank of each candidate's destination tells whether it is an edge (one collective exchange
   per attempt, on the loader's own group);
2. the endpoints of positives and negatives, de-duplicated and sorted, are the seed nodes of one
   :class:`~mnmg_sampler.sampler.SampleRequest` with key ``request_key(seed, e, g)``, submitted
   to the :class:`~mnmg_sampler.distributed.service.SamplingService` like any node batch (so it
   is merged into the same rounds);
3. the sampled subgraph comes back; ``edge_label_index`` and the triplet indices are local ids
   into ``n_id``; with ``exclude_seed_edges`` the positive seed edges (and their reverses with
   ``exclude_reverse_edges``) are removed from ``edge_index`` / ``e_id``, as GraphBolt's
   ``exclude_seed_edges`` does after sampling.

Every step is a function of ``(seed, epoch, g)`` and the graph, so a batch is bit-identical for
any world size, partitioning and merge pattern.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from .batch import MiniBatch
from .epoch_cursor import EpochCursor
from .errors import SamplingInputError
from .loader import check_batching, global_batches
from .ops.negative import KnownFn, NegativeSampling, sample_negatives
from .ops.rng import request_key
from .sampler import SampleRequest, check_fanouts

__all__ = ["LinkMiniBatch", "DistLinkNeighborLoader", "build_link_request", "finish_link_batch",
           "LinkPlan"]


@dataclass
class LinkMiniBatch(MiniBatch):
    """A sampled subgraph around a batch of seed edges (PyG's ``LinkNeighborLoader`` output).

    Beyond :class:`~mnmg_sampler.batch.MiniBatch` (``n_id`` starts with the ``batch_size``
    distinct, ascending endpoints of the batch's positive and negative edges; ``input_id`` holds
    the positions of the positive edges in ``edge_label_index``):

    Attributes:
        edge_label_index: ``[2, L]`` local ids into ``n_id``; positives first, then (binary mode)
            ``amount`` negatives per positive, positive by positive.
        edge_label: ``[L]`` labels (binary: positives' labels, or 1, then 0 for negatives;
            ``None`` without labels and negatives).
        src_index, dst_pos_index: triplet mode, ``[P]`` local ids of each positive's endpoints.
        dst_neg_index: triplet mode, ``[P, amount]`` (``[P]`` when ``amount == 1``).
    """

    edge_label_index: torch.Tensor | None = None
    edge_label: torch.Tensor | None = None
    src_index: torch.Tensor | None = None
    dst_pos_index: torch.Tensor | None = None
    dst_neg_index: torch.Tensor | None = None

    def to_pyg(self):
        """Convert to ``torch_geometric.data.Data`` with the link fields (needs the pyg extra)."""
        data = super().to_pyg()
        for name in ("edge_label_index", "edge_label", "src_index", "dst_pos_index",
                     "dst_neg_index"):
            v = getattr(self, name)
            if v is not None:
                setattr(data, name, v)
        return data


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


def _as_numpy(a, what: str, dtype) -> np.ndarray:
    if torch.is_tensor(a):
        a = a.detach().cpu().numpy()
    try:
        return np.ascontiguousarray(np.asarray(a), dtype=dtype)
    except (TypeError, ValueError) as e:
        raise SamplingInputError(f"{what} cannot be read as {np.dtype(dtype).name} ({e})",
                                 "the loader cannot be built", f"pass {what} as a tensor") from e


class DistLinkNeighborLoader(EpochCursor):
    """Iterates this rank's minibatches of seed edges, sampled by a service (PyG arguments).

    Args:
        service: this rank's :class:`~mnmg_sampler.distributed.service.SamplingService`.
        num_neighbors: fanouts per hop, hop 1 first; ``-1`` = all neighbors.
        edge_label_index: ``[2, E]`` seed edges ``src -> dst`` (original ids), the same on
            every rank.
        edge_label: optional ``[E]`` labels (binary mode: incremented by one when their minimum
            is 0, so that 0 means "negative", as PyG does; not allowed in triplet mode).
        batch_size: positive seed edges per minibatch (at most).
        shuffle, drop_last: as :class:`~mnmg_sampler.loader.DistNeighborLoader`.
        neg_sampling: ``None``, ``"binary"``, ``"triplet"``, a dict of
            :class:`~mnmg_sampler.ops.negative.NegativeSampling` fields or an instance.
        neg_sampling_ratio: PyG's older spelling of binary negatives with that amount.
        exclude_seed_edges: remove the positive seed edges from ``edge_index`` / ``e_id``.
        exclude_reverse_edges: also remove their reverses (for undirected graphs).
        part: this rank's partition; needed for ``reject_known`` (membership is asked of the
            rank owning each candidate's destination).
        membership_group: process group of the membership exchange; default a new group made
            here (then the constructor is collective: every rank builds its loader together).
        seed, prefetch, replace, rank, world_size, edge_ids: as ``DistNeighborLoader``
            (``edge_ids=False``: ``e_id`` empty, no edge id fetched).

    Each item is a :class:`LinkMiniBatch`: ``n_id``, ``e_id``, ``edge_index``,
    ``edge_label_index``, ``edge_label``, ``input_id``, ``num_sampled_nodes``,
    ``num_sampled_edges``, ``x``, ``y`` and, in triplet mode, ``src_index``, ``dst_pos_index``,
    ``dst_neg_index``.

    Example::

        loader = DistLinkNeighborLoader(service, [10, 5], edge_label_index=train_edges,
                                        batch_size=256, shuffle=True, neg_sampling="binary",
                                        exclude_seed_edges=True)
        for batch in loader:
            h = encoder(batch.x, batch.edge_index)
            s, d = batch.edge_label_index
            loss = F.binary_cross_entropy_with_logits((h[s] * h[d]).sum(-1), batch.edge_label)
    """

    _seeds_word = _seeds_fix = "seed edges"

    def __init__(self, service, num_neighbors: Sequence[int], edge_label_index,
                 edge_label=None, batch_size: int = 1, shuffle: bool = False,
                 drop_last: bool = False, neg_sampling=None,
                 neg_sampling_ratio: float | None = None, exclude_seed_edges: bool = False,
                 exclude_reverse_edges: bool = False, part=None,
                 membership_group=None, seed: int = 0, prefetch: int = 2,
                 replace: bool = False, rank: int | None = None,
                 world_size: int | None = None, edge_ids: bool = True) -> None:
        import torch.distributed as dist

        self.service = service
        self.edge_ids = bool(edge_ids)
        self.num_nodes = int(service.num_nodes)
        eli = _as_numpy(edge_label_index, "edge_label_index", np.int64)
        if eli.ndim != 2 or eli.shape[0] != 2:
            raise SamplingInputError(f"edge_label_index has shape {list(eli.shape)}",
                                     "seed edges are columns (src, dst)", "pass a [2, E] array")
        if eli.size and (int(eli.min()) < 0 or int(eli.max()) >= self.num_nodes):
            bad = int(eli.min()) if int(eli.min()) < 0 else int(eli.max())
            raise SamplingInputError(f"edge_label_index holds node id {bad}, out of range for "
                                     f"{self.num_nodes} nodes", "its edges cannot be sampled",
                                     f"pass original node ids in [0, {self.num_nodes})")
        self.edge_label_index = eli
        if neg_sampling is None and neg_sampling_ratio is not None and neg_sampling_ratio > 0:
            neg_sampling = NegativeSampling("binary", neg_sampling_ratio)
        self.neg = NegativeSampling.cast(neg_sampling)
        self.edge_label = None
        if edge_label is not None:
            lab = edge_label.detach().cpu().numpy() if torch.is_tensor(edge_label) else \
                np.asarray(edge_label)
            if lab.shape != (eli.shape[1],):
                raise SamplingInputError(f"edge_label has shape {list(lab.shape)} for "
                                         f"{eli.shape[1]} seed edges", "",
                                         "pass one label per column of edge_label_index")
            if self.neg is not None and self.neg.mode == "triplet":
                raise SamplingInputError("edge_label was given in triplet mode",
                                         "triplet batches have no edge labels (PyG's rule)",
                                         "drop edge_label or use binary negatives")
            if self.neg is not None and lab.size and lab.min() == 0:
                lab = lab + 1  # 0 now means "negative"
            self.edge_label = np.ascontiguousarray(lab)
        check_batching(batch_size, prefetch)
        reject = self.neg is not None and self.neg.reject_known
        if reject and part is None:
            raise SamplingInputError("reject_known needs this rank's partition (part=...)",
                                     "known edges cannot be looked up",
                                     "pass part=load_partition(dir, rank)")
        self.num_neighbors = check_fanouts(num_neighbors)
        self.batch_size = int(batch_size)
        self.shuffle, self.drop_last = bool(shuffle), bool(drop_last)
        self.exclude_seed_edges = bool(exclude_seed_edges)
        self.exclude_reverse_edges = bool(exclude_reverse_edges)
        self.seed, self.prefetch, self.replace = int(seed), max(1, int(prefetch)), bool(replace)
        self.rank = dist.get_rank(service.group) if rank is None else rank
        self.world_size = dist.get_world_size(service.group) if world_size is None else world_size
        self.membership = None
        if reject:
            from .distributed.membership import EdgeMembership

            if membership_group is None:
                membership_group = dist.new_group(backend=dist.get_backend())
            # the sampler's id map shards, shared (no second copy, no second build)
            self.membership = EdgeMembership(part, membership_group,
                                             getattr(service.sampler, "ids", None))
        self._init_cursor()

    @property
    def num_edges(self) -> int:
        return int(self.edge_label_index.shape[1])

    def __len__(self) -> int:
        n, per = self.num_edges, self.batch_size * self.world_size
        return n // per if self.drop_last else max(1, -(-n // per))

    def _my_batches(self) -> list[tuple[int, np.ndarray]]:
        allb = global_batches(self.num_edges, self.batch_size, self.world_size,
                              shuffle=self.shuffle, drop_last=self.drop_last, seed=self.seed,
                              epoch=self.epoch)
        return [(g, allb[g]) for g in range(self.rank, len(allb), self.world_size)]

    def plan(self, g: int, pos: np.ndarray) -> LinkPlan:
        """Negatives and node request of global batch ``g`` (collective with reject_known)."""
        m = self.membership
        return build_link_request(self.edge_label_index, self.edge_label, pos, g=g,
                                  epoch=self.epoch, seed=self.seed,
                                  num_neighbors=self.num_neighbors, replace=self.replace,
                                  num_nodes=self.num_nodes, neg=self.neg,
                                  known=None if m is None else m.known,
                                  more=None if m is None else m.any, edge_ids=self.edge_ids)

    def _num_seeds(self) -> int:
        return self.num_edges

    def __iter__(self) -> Iterator[LinkMiniBatch]:
        def plan(g: int, pos: np.ndarray) -> tuple[SampleRequest, LinkPlan]:
            p = self.plan(g, pos)
            return p.request, p

        return self._iterate(plan, lambda mb, p: finish_link_batch(
            mb, p, num_nodes=self.num_nodes, exclude_seed_edges=self.exclude_seed_edges,
            exclude_reverse_edges=self.exclude_reverse_edges))
