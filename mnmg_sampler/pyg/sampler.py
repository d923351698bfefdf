"""Our sampling service as a PyG ``BaseSampler``: ``sample_from_nodes`` -> ``SamplerOutput``
(``HeteroSamplerOutput`` on typed parts), and on typed parts ``sample_from_edges``.

Request keys follow :class:`~mnmg_sampler.loaders.neighbor.DistNeighborLoader` without shuffling:
batch
``j`` of epoch ``e`` on rank ``r`` of ``W`` uses ``request_key(seed, e, r + W * j)``. So when each
rank's ``NodeLoader`` (``shuffle=False``) walks the seeds our loader would give that rank, the
minibatches are bit-identical to our loader's. Call :meth:`ServiceSampler.set_epoch` before
each epoch (as with a ``DistributedSampler``) to restart ``j``. Link batches count ``j`` the same
way and draw their negatives as :class:`~mnmg_sampler.loaders.link.DistLinkNeighborLoader` does,
keyed on each positive's ``input_id`` (its position in the ``LinkLoader``'s
``edge_label_index``): a rank whose ``LinkLoader`` walks the seed edges our loader gives it gets
our loader's batches.
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
from ..sampling.sampler import SampleRequest, check_fanouts
from .stores import PartitionFeatureStore, PartitionGraphStore, typed_part

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

    ``sampler.data`` is the ``(FeatureStore, GraphStore)`` pair to hand ``NodeLoader`` or
    ``LinkLoader`` as ``data``; features of each sampled batch come with it from the service.
    Use ``num_workers=0`` (the default): the service already samples in its own thread.

    On a typed part, construction is collective on the default group (as our loaders' on typed
    parts): ``num_neighbors`` that name a relation the graph lacks or miss one raise the same
    :class:`~mnmg_sampler.errors.SamplingInputError` on every rank. ``NodeLoader`` then takes
    ``input_nodes=(node type, ids)`` and gives ``HeteroData`` batches; ``LinkLoader`` takes
    ``edge_label_index=(edge type, [2, E] per-type ids)``, ``edge_label`` and PyG's
    ``NegativeSampling`` (``binary`` or ``triplet``, an integer ``amount``). A node type or
    edge type the graph lacks is refused by each rank before it sends the batch.
    """

    def __init__(self, service, num_neighbors: Sequence[int] | Mapping, replace: bool = False,
                 seed: int = 0, rank: int | None = None, world_size: int | None = None) -> None:
        self.service = service
        self.typed = typed_part(service)
        if self.typed is None:
            self.num_neighbors = check_fanouts(num_neighbors)
        else:
            from ..distributed.collective import agree

            self.num_neighbors = agree(lambda: _typed_fanouts(service, num_neighbors),
                                       step="ServiceSampler's argument checks")
        self.replace, self.seed = bool(replace), int(seed)
        self.rank = dist.get_rank(service.group) if rank is None else int(rank)
        self.world_size = (dist.get_world_size(service.group) if world_size is None
                           else int(world_size))
        self.feature_store = PartitionFeatureStore(service, seed=self.seed)
        self.graph_store = PartitionGraphStore(service)
        self.epoch, self._j = 0, 0

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

    def _next_key(self) -> int:
        return request_key(self.seed, self.epoch, self._next_batch())

    def sample_from_nodes(self, index: NodeSamplerInput,
                          **kwargs) -> SamplerOutput | HeteroSamplerOutput:
        if self.typed is not None:
            return self._typed_nodes(index)
        if index.time is not None or index.input_type is not None:
            raise SamplingInputError(
                "temporal or heterogeneous node input", "the service samples homogeneous, "
                "static graphs", "pass node ids only (no input_time, no node type)")
        input_id = index.input_id if index.input_id is not None else \
            torch.arange(index.node.numel())
        req = SampleRequest(index.node, self.num_neighbors, self._next_key(), self.replace,
                            input_id=input_id.numpy())
        b = self.service.result(self.service.submit(req))
        self.feature_store.remember(b.n_id, b)
        return SamplerOutput(node=b.n_id, row=b.edge_index[0], col=b.edge_index[1], edge=b.e_id,
                             batch=None, num_sampled_nodes=list(b.num_sampled_nodes),
                             num_sampled_edges=list(b.num_sampled_edges),
                             metadata=(input_id, None))

    def _typed_nodes(self, index: NodeSamplerInput) -> HeteroSamplerOutput:
        from ..sampling.sampler import HeteroSampleRequest

        tp = self.typed
        if index.time is not None:
            raise _no_time("input_time")
        if index.input_type not in tp.node_types:
            raise SamplingInputError(
                f"the loader's input node type is {index.input_type!r}, not a node type of the "
                "graph", "its seeds cannot be sampled; this rank sends no request",
                f"pass input_nodes=(type, ids) with type one of {list(tp.node_types)}")
        input_id = index.input_id if index.input_id is not None else \
            torch.arange(index.node.numel())
        req = HeteroSampleRequest(index.input_type, index.node, self.num_neighbors,
                                  self._next_key(), self.replace, input_id=input_id.numpy())
        b = self.service.result(self.service.submit(req))
        return self._output(b, (input_id, None))

    def _output(self, b, metadata: tuple) -> HeteroSamplerOutput:
        self.feature_store.remember(b.n_id, b)
        return HeteroSamplerOutput(
            node=b.n_id, row={et: ei[0] for et, ei in b.edge_index.items()},
            col={et: ei[1] for et, ei in b.edge_index.items()}, edge=b.e_id, batch=None,
            num_sampled_nodes={t: list(v) for t, v in b.num_sampled_nodes.items()},
            num_sampled_edges={et: list(v) for et, v in b.num_sampled_edges.items()},
            metadata=metadata)

    def sample_from_edges(self, index: EdgeSamplerInput,
                          neg_sampling=None) -> HeteroSamplerOutput:
        if self.typed is None:
            raise SamplingInputError(
                "link sampling (sample_from_edges) on a homogeneous part",
                "the PyG adapter samples seed edges of typed parts only",
                "use NodeLoader, or DistLinkNeighborLoader for links of a homogeneous graph")
        from ..sampling.link import build_link_request, finish_link_batch, typed_link_input

        if index.time is not None:
            raise _no_time("edge_label_time")
        neg = _negatives(neg_sampling)
        try:
            et, eli, counts, _, _ = typed_link_input(
                self.service.sampler, (index.input_type, torch.stack([index.row, index.col])),
                self.num_neighbors, reverse_edge_type=None)
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
            replace=self.replace, num_nodes=counts, neg=neg, edge_type=et, batch_columns=True)
        b = finish_link_batch(self.service.result(self.service.submit(plan.request)), plan)
        if neg is not None and neg.mode == "triplet":
            meta = (input_id, b.src_index, b.dst_pos_index, b.dst_neg_index, None)
        else:
            meta = (input_id, b.edge_label_index, b.edge_label, None)
        return self._output(b, meta)

    @property
    def edge_permutation(self):
        return None


def _typed_fanouts(service, num_neighbors):
    """``num_neighbors`` of a typed part, checked against its relations: a list, or a dict
    keyed by ``(src, rel, dst)`` tuples."""
    from ..graph.typed import edge_type_of
    from ..sampling.sampler import fanout_table

    fanout_table(service.sampler.graph, num_neighbors)
    if isinstance(num_neighbors, Mapping):
        return {edge_type_of(k, "num_neighbors"): check_fanouts(v)
                for k, v in num_neighbors.items()}
    return check_fanouts(num_neighbors)


def _no_time(what: str) -> SamplingInputError:
    return SamplingInputError(f"{what} was given to ServiceSampler",
                              "its sampling has no time; this rank sends no request",
                              "drop it, or use DistNeighborLoader / DistLinkNeighborLoader with "
                              "time_attr on typed parts (docs/temporal.md)")


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
