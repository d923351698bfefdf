"""Our sampling service as a PyG ``BaseSampler``: ``sample_from_nodes`` -> ``SamplerOutput``.

Request keys follow :class:`~mnmg_sampler.loader.DistNeighborLoader` without shuffling: batch
``j`` of epoch ``e`` on rank ``r`` of ``W`` uses ``request_key(seed, e, r + W * j)``. So when each
rank's ``NodeLoader`` (``shuffle=False``) walks the seeds our loader would give that rank, the
minibatches are bit-identical to our loader's. Call :meth:`ServiceSampler.set_epoch` before
each epoch (as with a ``DistributedSampler``) to restart ``j``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch_geometric.sampler import BaseSampler, NodeSamplerInput, SamplerOutput

from ..errors import SamplingInputError
from ..ops.rng import request_key
from ..sampler import SampleRequest, check_fanouts
from .stores import PartitionFeatureStore, PartitionGraphStore

__all__ = ["ServiceSampler"]


class ServiceSampler(BaseSampler):
    """A PyG node sampler that sends each batch of seeds to a ``SamplingService``.

    Args:
        service: this rank's :class:`~mnmg_sampler.distributed.service.SamplingService`.
        num_neighbors: fanouts per hop, hop 1 first; ``-1`` = all, ``0`` = none.
        replace: sample with replacement.
        seed: seed of the request keys.
        rank, world_size: default: those of the service's process group.

    ``sampler.data`` is the ``(FeatureStore, GraphStore)`` pair to hand ``NodeLoader`` as
    ``data``; features of each sampled batch come with it from the service. Use
    ``num_workers=0`` (the default): the service already samples in its own thread.
    """

    def __init__(self, service, num_neighbors: Sequence[int], replace: bool = False,
                 seed: int = 0, rank: int | None = None, world_size: int | None = None) -> None:
        self.service = service
        self.num_neighbors = check_fanouts(num_neighbors)
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

    def sample_from_nodes(self, index: NodeSamplerInput, **kwargs) -> SamplerOutput:
        if index.time is not None or index.input_type is not None:
            raise SamplingInputError(
                "temporal or heterogeneous node input", "the service samples homogeneous, "
                "static graphs", "pass node ids only (no input_time, no node type)")
        g = self.rank + self.world_size * self._j
        self._j += 1
        input_id = index.input_id if index.input_id is not None else \
            torch.arange(index.node.numel())
        req = SampleRequest(index.node, self.num_neighbors, request_key(self.seed, self.epoch, g),
                            self.replace, input_id=input_id.numpy())
        b = self.service.result(self.service.submit(req))
        self.feature_store.remember(b.n_id, b)
        return SamplerOutput(node=b.n_id, row=b.edge_index[0], col=b.edge_index[1], edge=b.e_id,
                             batch=None, num_sampled_nodes=list(b.num_sampled_nodes),
                             num_sampled_edges=list(b.num_sampled_edges),
                             metadata=(input_id, None))

    def sample_from_edges(self, index, neg_sampling=None):
        raise SamplingInputError("link sampling (sample_from_edges)",
                                 "the service samples from seed nodes only",
                                 "use NodeLoader, or sample both endpoints as seed nodes")

    @property
    def edge_permutation(self):
        return None
