"""PyG ``FeatureStore`` / ``GraphStore`` views of one rank's partition, served by the service.

Node ids are original ids, as everywhere in the public API. The feature store answers any
``index`` (rows owned by other ranks included): rows of a batch the :class:`ServiceSampler` just
sampled are taken from that batch (the service fetched them with it); any other index is fetched
through the service with a fanout-0 request, so no collective runs outside the service. Like
PyG's own ``LocalGraphStore`` in ``torch_geometric.distributed``, the graph store holds this
rank's part: the in-edges of the nodes it owns, their sources translated to original ids by
their owners through one service request (with the features of those nodes when the service
fetches features).
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import torch
from torch_geometric.data import EdgeAttr, FeatureStore, GraphStore, TensorAttr
from torch_geometric.data.graph_store import EdgeLayout

from ..errors import SamplingInputError
from ..ops.rng import request_key
from ..sampler import SampleRequest

__all__ = ["PartitionFeatureStore", "PartitionGraphStore"]

_ATTRS = ("x", "y")
_CACHE = 8  # recent batches whose rows are served without another request


def _read_only(what: str) -> SamplingInputError:
    return SamplingInputError(f"{what} is read-only", "the partition on disk is the source",
                              "re-partition the graph to change its data")


def _check_not_renumbered(service) -> None:
    """The stores index nodes by the partition's ids; a renumbered graph's ``n_id`` speaks the
    input's ids instead, so the two would not meet."""
    if getattr(service, "node_ids", None) is not None:
        raise SamplingInputError(
            "the PyG stores do not support a renumbered graph (its n_id holds the input's ids)",
            "the PyG loaders cannot be built on it",
            "use DistNeighborLoader, or partition with --renumber false after relabelling the "
            "nodes to 0..N-1")


class PartitionFeatureStore(FeatureStore):
    """``x`` and ``y`` of a partitioned graph, for any original node ids (read-only)."""

    def __init__(self, service, seed: int = 0) -> None:
        super().__init__()
        _check_not_renumbered(service)
        self.service = service
        part = service.sampler.part
        self._shapes = {k: getattr(part, k).shape[1:] for k in _ATTRS
                        if getattr(part, k) is not None}
        self.num_nodes = int(service.num_nodes)
        self._recent: OrderedDict[int, tuple[torch.Tensor, dict]] = OrderedDict()
        self._seed, self._fetches = int(seed), 0

    def remember(self, n_id: torch.Tensor, batch) -> None:
        """Keep the rows a sampled batch carries, for the ``index=n_id`` lookups that follow."""
        self._recent[id(n_id)] = (n_id, {"x": batch.x, "y": batch.y})
        while len(self._recent) > _CACHE:
            self._recent.popitem(last=False)

    def _fetch(self, index: torch.Tensor) -> dict:
        ids, inverse = torch.unique(index.to(torch.int64).cpu(), return_inverse=True)
        # A fanout-0 request samples nothing and returns the rows of its seeds.
        key = request_key(self._seed, 1 << 20, self._fetches)
        self._fetches += 1
        b = self.service.result(self.service.submit(SampleRequest(ids.numpy(), [0], key)))
        return {k: (None if v is None else v[inverse]) for k, v in (("x", b.x), ("y", b.y))}

    def _get_tensor(self, attr: TensorAttr):
        name = attr.attr_name
        if name not in self._shapes:
            return None
        index = attr.index
        if index is None or isinstance(index, slice):
            index = torch.arange(self.num_nodes)[index if isinstance(index, slice) else slice(None)]
        elif not torch.is_tensor(index):
            index = torch.as_tensor(np.asarray(index), dtype=torch.int64)
        hit = self._recent.get(id(index))
        if hit is not None and hit[0] is index and hit[1].get(name) is not None:
            return hit[1][name]
        if self.service.features is None:
            raise SamplingInputError(
                "the sampling service was built with features=False",
                "the feature store cannot fetch rows", "construct it with features=True")
        return self._fetch(index)[name]

    def _get_tensor_size(self, attr: TensorAttr):
        shape = self._shapes.get(attr.attr_name)
        return None if shape is None else (self.num_nodes, *shape)

    def get_all_tensor_attrs(self) -> list[TensorAttr]:
        return [TensorAttr(group_name=None, attr_name=k) for k in self._shapes]

    def _put_tensor(self, tensor, attr: TensorAttr) -> bool:
        raise _read_only("PartitionFeatureStore")

    def _remove_tensor(self, attr: TensorAttr) -> bool:
        raise _read_only("PartitionFeatureStore")


class PartitionGraphStore(GraphStore):
    """This rank's part as a PyG ``GraphStore``: the in-edges of its owned nodes (COO, original
    ids, ``edge_index[0]`` = source)."""

    def __init__(self, service) -> None:
        super().__init__()
        _check_not_renumbered(service)
        self.service = service
        self._fetches = 0
        self.part = service.sampler.part
        n = int(self.part.num_nodes)
        self._attr = EdgeAttr(edge_type=None, layout=EdgeLayout.COO, is_sorted=False,
                              size=(n, n))

    def _get_edge_index(self, edge_attr: EdgeAttr):
        # The neighbors' original ids are known to their owners only (no rank holds a global
        # id map): one request through the service for every neighbor of this part's nodes
        # (fanout -1 keeps each row whole and in CSR order) returns them as its n_id.
        own = np.asarray(self.part.orig_ids)
        key = request_key(0, 1 << 21, self._fetches)
        self._fetches += 1
        b = self.service.result(self.service.submit(
            SampleRequest(own, [-1], key, edge_ids=False)))
        n_id = b.n_id
        return n_id[b.edge_index[0]], n_id[b.edge_index[1]]

    def get_all_edge_attrs(self) -> list[EdgeAttr]:
        return [self._attr]

    def _put_edge_index(self, edge_index, edge_attr: EdgeAttr) -> bool:
        raise _read_only("PartitionGraphStore")

    def _remove_edge_index(self, edge_attr: EdgeAttr) -> bool:
        raise _read_only("PartitionGraphStore")
