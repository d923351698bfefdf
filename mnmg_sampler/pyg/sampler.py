"""Our sampling service as a PyG ``BaseSampler``: ``sample_from_nodes`` and
``sample_from_edges`` -> ``SamplerOutput`` (``HeteroSamplerOutput`` on typed parts).

Request keys follow :class:`~mnmg_sampler.loaders.neighbor.DistNeighborLoader` without shuffling:
batch ``j`` of epoch ``e`` on rank ``r`` of ``W`` uses ``request_key(seed, e, r + W * j)``. So
when each rank's ``NodeLoader`` (``shuffle=False``) walks the seeds our loader would give that
rank, the minibatches are bit-identical to our loader's. Call :meth:`ServiceSampler.set_epoch`
before each epoch (as with a ``DistributedSampler``) to restart ``j``. Link batches count ``j``
the same way and draw their negatives as
:class:`~mnmg_sampler.loaders.link.DistLinkNeighborLoader` does, keyed on each positive's
``input_id`` (its position in the ``LinkLoader``'s ``edge_label_index``): a rank whose
``LinkLoader`` walks the seed edges our loader gives it gets our loader's batches.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
import torch.distributed as dist
from torch_geometric.sampler import (
    BaseSampler,
    EdgeSamplerInput,
    HeteroSamplerOutput,
    NodeSamplerInput,
    SamplerOutput,
)

from ..errors import SamplingInputError
from ..ops.rng import request_key
from ..sampling.link import (
    build_link_request,
    finish_link_batch,
    seed_edge_array,
    typed_link_input,
)
from ..sampling.sampler import SampleRequest, check_fanouts
from ..sampling.temporal import input_times
from .stores import PartitionFeatureStore, PartitionGraphStore, flat_type, typed_part

__all__ = ["ServiceSampler"]


class ServiceSampler(BaseSampler):
    """A PyG sampler that sends each batch of seeds to a ``SamplingService``.

    Args:
        service: this rank's :class:`~mnmg_sampler.distributed.service.SamplingService`.
        num_neighbors: fanouts per hop, hop 1 first; ``-1`` = all, ``0`` = none. On a typed
            part, PyG's hetero form too: a dict per edge type (``(src, rel, dst)`` or
            ``"src__rel__dst"``) naming every relation, with equally many hops.
        replace: sample with replacement.
        seed: seed of the request keys.
        rank, world_size: default: those of the service's process group.
        time_attr, temporal_strategy, disjoint: PyG's ``NeighborSampler`` options, on parts
            with time (``docs/temporal.md``): the loader's ``input_time`` /
            ``edge_label_time`` then bound every seed's (seed edge's) tree.

    ``sampler.data`` is the ``(FeatureStore, GraphStore)`` pair to hand ``NodeLoader`` or
    ``LinkLoader`` as ``data``; features of each sampled batch come with it from the service.
    Use ``num_workers=0`` (the default): the service already samples in its own thread.
    ``LinkLoader`` takes ``edge_label_index``, ``edge_label`` and PyG's ``NegativeSampling``
    (``binary`` or ``triplet``, an integer ``amount``).

    On a typed part, construction is collective on the default group (as our loaders' on typed
    parts): options that the graph cannot serve (``num_neighbors`` that name a relation the
    graph lacks or miss one, a time it does not hold) raise the same
    :class:`~mnmg_sampler.errors.SamplingInputError` on every rank. ``NodeLoader`` then takes
    ``input_nodes=(node type, ids)``, ``LinkLoader`` ``edge_label_index=(edge type, [2, E]
    per-type ids)``, and both give ``HeteroData`` batches; a part of one node type and one
    relation (a PyG ``Data`` with time) is sampled as a ``Data``. A node type or edge type the
    graph lacks is refused by each rank before it sends the batch.
    """

    def __init__(self, service, num_neighbors: Sequence[int] | Mapping, replace: bool = False,
                 seed: int = 0, rank: int | None = None, world_size: int | None = None, *,
                 time_attr: str | None = None, temporal_strategy: str = "uniform",
                 disjoint: bool = False) -> None:
        self.service = service
        tp = typed_part(service)
        self.flat = flat_type(tp)
        self.typed = None if self.flat else tp
        self.time_attr, self.temporal_strategy = time_attr, temporal_strategy
        self.disjoint = bool(disjoint) or time_attr is not None  # PyG's: temporal is disjoint
        self._adm = None
        if tp is None:
            if time_attr is not None or disjoint:
                raise SamplingInputError(
                    "time_attr / disjoint on a homogeneous part without time",
                    "its sampler has no time nor disjoint trees",
                    "partition the graph with its time (docs/temporal.md)")
            self.num_neighbors = check_fanouts(num_neighbors)
        else:
            from ..distributed.collective import agree

            self.num_neighbors = agree(lambda: self._typed_options(num_neighbors),
                                       step="ServiceSampler's argument checks")
            if time_attr is not None and service.sampler.graph.node_time is not None:
                from ..ops.negative import AdmissibleNodes

                # the negatives' node times (PyG's rule; collective, as the loader's)
                self._adm = {t: AdmissibleNodes.of(v) for t, v in
                             service.sampler.node_time_of_types(tp.node_types).items()}
        self.replace, self.seed = bool(replace), int(seed)
        self.rank = dist.get_rank(service.group) if rank is None else int(rank)
        self.world_size = (dist.get_world_size(service.group) if world_size is None
                           else int(world_size))
        self.feature_store = PartitionFeatureStore(service, seed=self.seed)
        self.graph_store = PartitionGraphStore(service)
        self.epoch, self._j = 0, 0

    def _typed_options(self, num_neighbors):
        """``num_neighbors`` of a typed part, checked against its relations (a list, or a dict
        keyed by ``(src, rel, dst)`` tuples), and the time options against its time."""
        from ..graph.typed import edge_type_of
        from ..sampling.sampler import fanout_table
        from ..sampling.temporal import check_temporal_options

        graph = self.service.sampler.graph
        fanout_table(graph, num_neighbors)
        check_temporal_options(graph, self.time_attr, self.temporal_strategy,
                               self.disjoint or None)
        if isinstance(num_neighbors, Mapping):
            return {edge_type_of(k, "num_neighbors"): check_fanouts(v)
                    for k, v in num_neighbors.items()}
        return check_fanouts(num_neighbors)

    @property
    def data(self) -> tuple[PartitionFeatureStore, PartitionGraphStore]:
        """``(feature_store, graph_store)``: the ``data`` argument of ``NodeLoader``."""
        return self.feature_store, self.graph_store

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch's request keys and restart the batch count."""
        self.epoch, self._j = int(epoch), 0

    def _next_batch(self) -> int:
        """Global batch number of this rank's next batch (``rank + world_size * j``)."""
        g = self.rank + self.world_size * self._j
        self._j += 1
        return g

    def _times(self, time, what: str) -> np.ndarray | None:
        """The loader's times of a batch (``input_time`` / ``edge_label_time``) as int64, or a
        :class:`SamplingInputError` (this rank sends no request) without ``time_attr``."""
        if time is None:
            return None
        if self.time_attr is None:
            raise SamplingInputError(f"{what} was given to a ServiceSampler without time_attr",
                                     "its sampling has no time; this rank sends no request",
                                     "pass time_attr (the graph's time name) to ServiceSampler")
        return input_times(time, time.numel())

    def _node_type(self, given) -> str | None:
        """The request's ``input_type``: ``given`` on a typed part (checked), the one type of a
        one-type part, ``None`` on a homogeneous one."""
        if self.typed is None:
            return self.flat
        if given not in self.typed.node_types:
            raise SamplingInputError(
                f"the loader's input node type is {given!r}, not a node type of the graph",
                "its seeds cannot be sampled; this rank sends no request",
                f"pass input_nodes=(type, ids) with type one of {list(self.typed.node_types)}")
        return given

    def sample_from_nodes(self, index: NodeSamplerInput,
                          **kwargs) -> SamplerOutput | HeteroSamplerOutput:
        input_type = self._node_type(index.input_type)
        time = self._times(index.time, "input_time")
        input_id = index.input_id if index.input_id is not None else \
            torch.arange(index.node.numel())
        req = SampleRequest(index.node, self.num_neighbors,
                            request_key(self.seed, self.epoch, self._next_batch()),
                            self.replace, input_id=input_id.numpy(), input_type=input_type,
                            input_time=time, time_attr=self.time_attr,
                            temporal_strategy=self.temporal_strategy,
                            disjoint=self.disjoint or None)
        b = self.service.result(self.service.submit(req))
        return self._output(b, (input_id, index.time))

    def sample_from_edges(self, index: EdgeSamplerInput,
                          neg_sampling=None) -> SamplerOutput | HeteroSamplerOutput:
        tp = self.service.sampler.tp
        neg = _negatives(neg_sampling)
        time = self._times(index.time, "edge_label_time")
        if self.time_attr is not None and time is None:
            raise SamplingInputError("LinkLoader has no edge_label_time, but time_attr is set",
                                     "its seed edges have no time; this rank sends no request",
                                     "pass edge_label_time to LinkLoader, as to PyG's")
        eli = torch.stack([index.row, index.col])
        et, counts = None, int(self.service.num_nodes)
        try:
            if tp is None:
                eli = seed_edge_array(eli, (counts, counts))
            else:
                et, eli, counts, _, _ = typed_link_input(
                    self.service.sampler, (tp.edge_types[0] if self.flat else index.input_type,
                                           eli), self.num_neighbors, reverse_edge_type=None)
            adm = None if self._adm is None else (self._adm[et[0]], self._adm[et[2]])
            if adm is not None and neg is not None:  # PyG's rule: some node early enough
                adm[1].check(time, repr(et[2]))
                if neg.mode == "binary":
                    adm[0].check(time, repr(et[0]))
        except SamplingInputError as e:  # the loader's checks, met here at its first batch
            raise SamplingInputError(e.what, "its seed edges cannot be sampled; this rank "
                                     "sends no request", e.fix) from e
        input_id = index.input_id if index.input_id is not None else \
            torch.arange(eli.shape[1])
        label = None if index.label is None else index.label.detach().cpu().numpy()
        # negatives keyed on input_id, as DistLinkNeighborLoader keys them on positions
        plan = build_link_request(
            eli, label, input_id.numpy().astype(np.int64), g=self._next_batch(),
            epoch=self.epoch, seed=self.seed, num_neighbors=self.num_neighbors,
            replace=self.replace, num_nodes=counts, neg=neg, edge_type=et, batch_columns=True,
            edge_label_time=time, time_attr=self.time_attr,
            temporal_strategy=self.temporal_strategy, disjoint=self.disjoint,
            neg_times=adm if neg is not None else None)
        b = finish_link_batch(self.service.result(self.service.submit(plan.request)), plan)
        if neg is not None and neg.mode == "triplet":
            meta = (input_id, b.src_index, b.dst_pos_index, b.dst_neg_index, b.edge_label_time)
        else:
            meta = (input_id, b.edge_label_index, b.edge_label, b.edge_label_time)
        return self._output(b, meta)

    def _output(self, b, metadata: tuple) -> SamplerOutput | HeteroSamplerOutput:
        """PyG's output of batch ``b`` (a one-type part's as the homogeneous one)."""
        b = b.to_homogeneous() if self.flat else b
        self.feature_store.remember(b.n_id, b)
        if not b.typed:
            return SamplerOutput(
                node=b.n_id, row=b.edge_index[0], col=b.edge_index[1], edge=b.e_id,
                batch=b.batch, num_sampled_nodes=list(b.num_sampled_nodes),
                num_sampled_edges=list(b.num_sampled_edges), metadata=metadata)
        return HeteroSamplerOutput(
            node=b.n_id, row={et: ei[0] for et, ei in b.edge_index.items()},
            col={et: ei[1] for et, ei in b.edge_index.items()}, edge=b.e_id,
            batch=b.batch or None,
            num_sampled_nodes={t: list(v) for t, v in b.num_sampled_nodes.items()},
            num_sampled_edges={et: list(v) for et, v in b.num_sampled_edges.items()},
            metadata=metadata)

    @property
    def edge_permutation(self):
        return None


def _negatives(neg_sampling):
    """PyG's ``NegativeSampling`` (or ``None``) as ours; weighted or fractional amounts are
    refused."""
    from ..ops.negative import NegativeSampling

    if neg_sampling is None:
        return None
    if isinstance(neg_sampling, NegativeSampling):
        return neg_sampling
    weights = [getattr(neg_sampling, k, None) for k in ("src_weight", "dst_weight", "weight")]
    if any(w is not None for w in weights):
        raise SamplingInputError("NegativeSampling with node weights",
                                 "the service draws negatives uniformly; this rank sends no "
                                 "request", "drop src_weight / dst_weight")
    mode = getattr(neg_sampling.mode, "value", neg_sampling.mode)
    return NegativeSampling(str(mode), neg_sampling.amount)
