"""DistLinkNeighborLoader: minibatches of seed *edges* (link prediction), PyG's conventions.

Seed edges are split across ranks exactly like node seeds (``batch_positions``). The loader
only chooses global batch ``g``'s edges; :mod:`mnmg_sampler.sampling.link` does the rest, as a
function of ``(seed, epoch, g)`` and the graph (bit-identical for any world size).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..distributed.collective import agree
from ..errors import SamplingInputError
from ..sampling.batch import LinkMiniBatch
from ..sampling.link import (
    NegativeSampling,
    build_link_request,
    finish_link_batch,
    max_degrees,
    seed_edge_array,
    tree_node_bound,
    tree_request,
    typed_link_input,
)
from ..sampling.sampler import check_fanouts
from ..sampling.temporal import link_time_options
from .epoch_cursor import PREFETCH, EpochCursor
from .neighbor import batch_positions, check_batching, num_global_batches

__all__ = ["LinkMiniBatch", "DistLinkNeighborLoader", "TreeChunk"]


@dataclass
class TreeChunk:
    """Trees ``lo .. hi - 1`` of one disjoint triplet link batch, sampled as one request
    (:meth:`DistLinkNeighborLoader.tree_chunks`).

    Trees are numbered in the batch's seed order: every source endpoint, then every destination
    (positives', then negatives' draw by draw). ``roots`` says where the chunk's trees start:
    ``(node type, first tree, count)`` per type, the roots being the first ``count`` rows of
    ``subgraph.n_id[type]`` in tree order. ``src_tree`` ``[P]``, ``dst_pos_tree`` ``[P]`` and
    ``dst_neg_tree`` ``[P, amount]`` are the batch's edges as tree numbers (the same object in
    every chunk of a batch); ``last`` marks the batch's last chunk.
    """

    subgraph: object  # a HeteroMiniBatch of the chunk's trees
    lo: int
    hi: int
    roots: list[tuple[str, int, int]]
    num_trees: int
    src_tree: torch.Tensor
    dst_pos_tree: torch.Tensor
    dst_neg_tree: torch.Tensor
    last: bool


class DistLinkNeighborLoader(EpochCursor):
    """Iterates this rank's minibatches of seed edges, sampled by a service (PyG arguments).

    Args:
        service: this rank's :class:`~mnmg_sampler.distributed.service.SamplingService`.
        num_neighbors: fanouts per hop, hop 1 first; ``-1`` = all neighbors.
        edge_label_index: ``[2, E]`` seed edges ``src -> dst`` (original ids: the input's own
            for a renumbered graph, translated here as ``input_nodes`` is), the same on every
            rank. ``n_id`` holds original ids; ``edge_label_index`` of a batch is local.
        edge_label: optional ``[E]`` labels (binary mode: incremented by one when their minimum
            is 0, so that 0 means "negative", as PyG does; not allowed in triplet mode).
        batch_size: positive seed edges per minibatch (at most).
        shuffle, drop_last: as :class:`~mnmg_sampler.loaders.neighbor.DistNeighborLoader`.
        neg_sampling: ``None``, ``"binary"``, ``"triplet"``, a dict of
            :class:`~mnmg_sampler.sampling.link.NegativeSampling` fields or an instance.
        neg_sampling_ratio: PyG's older spelling of binary negatives with that amount.
        exclude_seed_edges: remove the positive seed edges from ``edge_index`` / ``e_id``.
        exclude_reverse_edges: also remove their reverses (for undirected graphs).
        part: this rank's partition; needed for ``reject_known`` (membership is asked of the
            rank owning each candidate's destination).
        membership_group: process group of the membership exchange; default a new group made
            here.
        seed, prefetch, replace, rank, world_size, edge_ids: as ``DistNeighborLoader``.
        reverse_edge_type: typed graphs: the relation whose edges ``d -> s`` are removed with
            ``exclude_seed_edges``; ``"auto"`` (default) = PyG's ``rev_`` relation when the
            graph has one, ``None`` = none, or an edge type from ``D`` to ``S``.
        edge_label_time, time_attr, temporal_strategy, disjoint: PyG's temporal link
            sampling: ``edge_label_time`` one int time per seed edge (required with
            ``time_attr``) bounds the trees of its endpoints and negatives. See
            docs/temporal.md#link-prediction-over-time.

    Construction is collective on the default group: a bad argument on any rank raises on
    every rank. On a typed part ``edge_label_index`` is PyG's ``(edge_type, [2, E] per-type
    ids)`` and ``num_neighbors`` a list or a dict per edge type; see
    docs/hetero.md#link-prediction-distlinkneighborloader-on-a-relation.

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

    def __init__(self, service, num_neighbors: Sequence[int] | Mapping, edge_label_index,
                 edge_label=None, batch_size: int = 1, shuffle: bool = False,
                 drop_last: bool = False, neg_sampling=None,
                 neg_sampling_ratio: float | None = None, exclude_seed_edges: bool = False,
                 exclude_reverse_edges: bool = False, part=None,
                 membership_group=None, seed: int = 0, prefetch: int = PREFETCH,
                 replace: bool = False, rank: int | None = None,
                 world_size: int | None = None, edge_ids: bool = True,
                 reverse_edge_type="auto", edge_label_time=None, time_attr: str | None = None,
                 temporal_strategy: str = "uniform", disjoint: bool = False) -> None:
        import torch.distributed as dist

        self.service = service
        self.edge_ids = bool(edge_ids)
        self.num_nodes = int(service.num_nodes)
        self._num_src_dst = self.num_nodes  # a typed relation's: (sources, destinations)
        typed = getattr(getattr(service, "sampler", None), "tp", None)  # a typed part's types
        self._typed = typed is not None
        self.edge_type = self.reverse_edge_type = None
        self._time = {}

        def check():
            if typed is not None:
                (self.edge_type, eli, self._num_src_dst, self.reverse_edge_type,
                 fanouts) = typed_link_input(service.sampler, edge_label_index, num_neighbors,
                                             reverse_edge_type, exclude_reverse_edges)
                self._time = link_time_options(service.sampler.graph, eli.shape[1],
                                               edge_label_time, time_attr,
                                               temporal_strategy, disjoint)
            else:
                if edge_label_time is not None or time_attr is not None or disjoint:
                    raise SamplingInputError(
                        "edge_label_time / time_attr / disjoint on a homogeneous (CSR) part",
                        "the homogeneous link sampler has no time nor disjoint trees",
                        "partition the graph with its time as a typed graph "
                        "(load_temporal_graph, docs/temporal.md)")
                eli = self._homogeneous_index(edge_label_index, reverse_edge_type)
                fanouts = check_fanouts(num_neighbors)
            neg = neg_sampling
            if neg is None and neg_sampling_ratio is not None and neg_sampling_ratio > 0:
                neg = NegativeSampling("binary", neg_sampling_ratio)
            neg = NegativeSampling.cast(neg)
            label = self._labels(edge_label, eli, neg)
            check_batching(batch_size, prefetch)
            reject = neg is not None and neg.reject_known
            if reject and part is None:
                raise SamplingInputError("reject_known needs this rank's partition (part=...)",
                                         "known edges cannot be looked up",
                                         "pass part=load_partition(dir, rank)")
            return eli, label, neg, fanouts

        # collective on the default group, as DistNeighborLoader's, so a bad input on any rank
        # raises on every rank before any sampling round
        self.edge_label_index, self.edge_label, self.neg, self.num_neighbors = agree(
            check, step="DistLinkNeighborLoader's argument checks")
        if self.neg is not None and self._time.get("time_attr") is not None:
            self._negatives_by_time(service)
        reject = self.neg is not None and self.neg.reject_known
        self.batch_size = int(batch_size)
        self.shuffle, self.drop_last = bool(shuffle), bool(drop_last)
        self.exclude_seed_edges = bool(exclude_seed_edges)
        self.exclude_reverse_edges = bool(exclude_reverse_edges)
        self.seed, self.prefetch, self.replace = int(seed), max(1, int(prefetch)), bool(replace)
        self.rank = dist.get_rank(service.group) if rank is None else rank
        self.world_size = dist.get_world_size(service.group) if world_size is None else world_size
        self.membership = None
        if reject:
            from ..distributed.membership import EdgeMembership

            if membership_group is None:
                membership_group = dist.new_group(backend=dist.get_backend())
            # the sampler's id map shards, shared (no second copy, no second build)
            self.membership = EdgeMembership(
                part, membership_group, getattr(service.sampler, "ids", None),
                relation=None if typed is None else list(typed.edge_types).index(self.edge_type))
        self._init_cursor()

    def _negatives_by_time(self, service) -> None:
        """With node time (PyG's rule): negatives are drawn among the nodes no later than their
        positive's time. Collective on the default group when the graph has node time (the same
        on every rank); a seed edge earlier than every node of a drawn type is a
        :class:`SamplingInputError` on every rank."""
        from ..ops.negative import AdmissibleNodes

        sampler = service.sampler
        if sampler.graph.node_time is None:  # edge time only: no node time to respect
            return
        s_t, _, d_t = self.edge_type
        times = sampler.node_time_of_types(sorted({s_t, d_t}))
        adm = {t: AdmissibleNodes.of(v) for t, v in times.items()}
        t_all = self._time["edge_label_time"]

        def check():
            adm[d_t].check(t_all, repr(d_t))
            if self.neg.mode == "binary":  # PyG draws both endpoints of a binary negative
                adm[s_t].check(t_all, repr(s_t))

        agree(check, step="the seed edges' times against the negatives' node times")
        self._time["neg_times"] = (adm[s_t], adm[d_t])

    def _homogeneous_index(self, edge_label_index, reverse_edge_type) -> np.ndarray:
        """``edge_label_index`` of a homogeneous graph, checked (and translated when renumbered)."""
        if reverse_edge_type not in ("auto", None):
            raise SamplingInputError("reverse_edge_type was given for a homogeneous graph",
                                     "it names a relation of a typed graph",
                                     "use exclude_reverse_edges=True for reverses")
        n = self.num_nodes
        return seed_edge_array(edge_label_index, (n, n),
                               node_ids=getattr(self.service, "node_ids", None))

    @staticmethod
    def _labels(edge_label, eli: np.ndarray, neg: NegativeSampling | None) -> np.ndarray | None:
        """The seed edges' labels, checked; incremented when negatives come and 0 is a label."""
        if edge_label is None:
            return None
        lab = edge_label.detach().cpu().numpy() if torch.is_tensor(edge_label) else \
            np.asarray(edge_label)
        if lab.shape != (eli.shape[1],):
            raise SamplingInputError(f"edge_label has shape {list(lab.shape)} for "
                                     f"{eli.shape[1]} seed edges", "",
                                     "pass one label per column of edge_label_index")
        if neg is not None and neg.mode == "triplet":
            raise SamplingInputError("edge_label was given in triplet mode",
                                     "triplet batches have no edge labels (PyG's rule)",
                                     "drop edge_label or use binary negatives")
        if neg is not None and lab.size and lab.min() == 0:
            lab = lab + 1  # 0 now means "negative"
        return np.ascontiguousarray(lab)

    @property
    def num_edges(self) -> int:
        return int(self.edge_label_index.shape[1])

    def __len__(self) -> int:
        n, per = self.num_edges, self.batch_size * self.world_size
        return n // per if self.drop_last else -(-n // per)  # no seed edge: no batch

    def _num_my_batches(self) -> int:
        nb = num_global_batches(self.num_edges, self.batch_size, self.world_size,
                                drop_last=self.drop_last)
        return len(range(self.rank, nb, self.world_size))

    def _my_batch(self, j: int, epoch: int) -> tuple[int, np.ndarray]:
        g = self.rank + j * self.world_size
        return g, batch_positions(g, self.num_edges, self.batch_size, self.world_size,
                                  shuffle=self.shuffle, drop_last=self.drop_last,
                                  seed=self.seed, epoch=epoch)

    def plan(self, g: int, pos: np.ndarray, epoch: int | None = None):
        """Negatives and node request of global batch ``g`` (collective with reject_known): a
        :class:`~mnmg_sampler.sampling.link.LinkPlan`."""
        epoch = self.epoch if epoch is None else epoch
        m = self.membership
        known = None if m is None else m.known
        if self._typed and m is not None:  # per-type ids -> internal ids, asked of the owners
            tp = self.service.sampler.tp
            off_s, off_d = (int(tp.node_type_offset[tp.node_types.index(t)])
                            for t in (self.edge_type[0], self.edge_type[2]))

            def known(s, d):
                return m.known(s + off_s, d + off_d)

        return build_link_request(
            self.edge_label_index, self.edge_label, pos, g=g, epoch=epoch, seed=self.seed,
            num_neighbors=self.num_neighbors, replace=self.replace, num_nodes=self._num_src_dst,
            neg=self.neg, known=known, more=None if m is None else m.any, edge_ids=self.edge_ids,
            edge_type=self.edge_type, **self._time)

    def _num_seeds(self) -> int:
        return self.num_edges

    def tree_bound(self) -> int:
        """The most nodes one tree of this disjoint loader can hold
        (:func:`~mnmg_sampler.sampling.link.tree_node_bound`). With a ``-1`` fanout it
        reads the relations' largest degrees over every rank: collective on the default group
        the first time."""
        if getattr(self, "_tree_bound", None) is None:
            import torch.distributed as dist

            graph = self.service.sampler.graph
            deg = None
            fan = self.num_neighbors
            lists = fan.values() if isinstance(fan, Mapping) else [fan]
            if any(f < 0 for v in lists for f in v):
                d = torch.from_numpy(max_degrees(graph))
                dist.all_reduce(d, op=dist.ReduceOp.MAX)
                deg = d.numpy()
            self._tree_bound = tree_node_bound(graph, fan, sorted({self.edge_type[0],
                                                                   self.edge_type[2]}), deg)
        return self._tree_bound

    def tree_chunks(self, max_nodes: int) -> Iterator[TreeChunk]:
        """This rank's batches of the epoch, each sampled as requests of whole trees holding at
        most ``max_nodes`` nodes together (by :meth:`tree_bound`; one tree per request when a
        tree may hold more): :class:`TreeChunk` items, a batch's chunks in tree order.

        Disjoint (or temporal) triplet loaders only, without ``exclude_seed_edges``. A tree
        depends only on its root, time and the batch's request key, so a batch's trees are
        those of its one-request sampling, and memory in flight is at most ``prefetch`` chunks
        instead of ``prefetch`` whole batches (of ``batch_size * (2 + amount)`` trees)."""
        if not (self._typed and self._time.get("disjoint")) or self.neg is None or \
                self.neg.mode != "triplet" or self.exclude_seed_edges:
            raise SamplingInputError(
                "tree_chunks on a loader that is not a disjoint triplet link loader without "
                "exclude_seed_edges", "its batches are not independent trees of labelled edges",
                "iterate the loader itself")
        per = max(1, int(max_nodes) // self.tree_bound())
        epoch, count = self.epoch, self._num_my_batches()
        s_type, _, d_type = self.edge_type
        two = s_type != d_type

        def units():
            for j in range(count):
                g, pos = self._my_batch(j, epoch)
                p = self.plan(g, pos, epoch)
                P = p.pos.size
                n_src = p.request.seeds.size if two else 0
                dst = torch.from_numpy(p.dst_local + n_src)
                edges = (torch.from_numpy(p.src_local[:P]), dst[:P],
                         dst[P:].reshape(self.neg.amount, P).t())
                n = sum(int(ids.size) for _, ids in p.request.seed_groups())
                for lo in range(0, n, per):
                    hi = min(n, lo + per)
                    req = tree_request(p, lo, hi)
                    roots, first = [], lo
                    for t, ids in req.seed_groups():
                        roots.append((t, first, int(ids.size)))
                        first += int(ids.size)
                    yield req, (lo, hi, roots, n, edges, hi == n)

        for sub, (lo, hi, roots, n, edges, last) in self._prefetched(units()):
            yield TreeChunk(sub, lo, hi, roots, n, *edges, last)

    def __iter__(self) -> Iterator[LinkMiniBatch]:
        def plan(g: int, pos: np.ndarray, epoch: int):
            p = self.plan(g, pos, epoch)
            return p.request, p

        return self._iterate(plan, lambda mb, p: finish_link_batch(
            mb, p, exclude_seed_edges=self.exclude_seed_edges,
            exclude_reverse_edges=self.exclude_reverse_edges,
            reverse_edge_type=self.reverse_edge_type))
