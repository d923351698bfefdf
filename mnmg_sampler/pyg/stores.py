"""PyG ``FeatureStore`` / ``GraphStore`` views of one rank's partition, served by the service.

Node ids are original ids (per-type ids on a typed part). The feature store answers any
``index``: rows of the batch the :class:`ServiceSampler` just sampled come from that batch, any
other index through the service with a fanout-0 request, so no collective runs outside the
service. Like PyG's ``LocalGraphStore``, the graph store holds this rank's part: its nodes'
in-edges, sources translated to original ids by their owners in one service request. On a typed
part they are PyG's hetero stores (tensors keyed by node type, one COO ``EdgeAttr`` per relation);
a part of one type and relation is shown as homogeneous, as its ``Data`` was.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import torch
from torch_geometric.data import EdgeAttr, FeatureStore, GraphStore, TensorAttr
from torch_geometric.data.graph_store import EdgeLayout

from ..errors import SamplingInputError
from ..ops.rng import request_key
from ..sampling.sampler import SampleRequest


def typed_part(service):
    """The service's :class:`~mnmg_sampler.graph.partition_io.TypedPart`, or ``None`` on a
    homogeneous part."""
    return getattr(getattr(service, "sampler", None), "tp", None)


def flat_type(tp) -> str | None:
    """The one node type of a typed part of one type and one relation (shown to PyG as a
    homogeneous graph), else ``None``."""
    return tp.node_types[0] if tp is not None and len(tp.edge_types) == 1 \
        and len(tp.node_types) == 1 else None


def type_count(tp, name: str) -> int:
    """Nodes of type ``name`` in the whole graph."""
    t = tp.node_types.index(name)
    return int(tp.node_type_offset[t + 1] - tp.node_type_offset[t])

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
    """``x`` and ``y`` of a partitioned graph, for any original node ids (read-only); on a
    typed part per node type (``group_name``), for per-type ids."""

    def __init__(self, service, seed: int = 0) -> None:
        super().__init__()
        _check_not_renumbered(service)
        self.service = service
        tp = typed_part(service)
        self.flat = flat_type(tp)
        self.typed = None if self.flat else tp
        # every part holds every type's files (maybe of 0 rows): the same on every rank; one
        # type is group None (a homogeneous part is its one type)
        lay = service.sampler.part.layout
        group = {t: (t if self.typed is not None else None) for t in lay.node_types}
        self._shapes = {(group[t], k): getattr(lay, k)[t].shape[1:]
                        for t in lay.node_types for k in _ATTRS if t in getattr(lay, k)}
        self._counts = {group[t]: type_count(lay, t) for t in lay.node_types}
        self.num_nodes = int(service.num_nodes)
        self._recent: OrderedDict[int, tuple[torch.Tensor, dict]] = OrderedDict()
        self._seed, self._fetches = int(seed), 0

    def remember(self, n_id, batch) -> None:
        """Keep the rows a sampled batch carries, for the ``index=n_id`` lookups that follow
        (``n_id`` and ``batch.x`` / ``batch.y`` per node type on a typed part)."""
        if not batch.typed:
            self._keep(n_id, {"x": batch.x, "y": batch.y})
        else:
            for t, ids in n_id.items():
                self._keep(ids, {"x": batch.x.get(t), "y": batch.y.get(t)})

    def _keep(self, n_id: torch.Tensor, rows: dict) -> None:
        self._recent[id(n_id)] = (n_id, rows)
        limit = _CACHE * len(self._counts)
        while len(self._recent) > limit:
            self._recent.popitem(last=False)

    def _fetch(self, group, index: torch.Tensor) -> dict:
        ids, inverse = torch.unique(index.to(torch.int64).cpu(), return_inverse=True)
        # A fanout-0 request samples nothing and returns the rows of its seeds.
        key = request_key(self._seed, 1 << 20, self._fetches)
        self._fetches += 1
        t = group if self.typed is not None else self.flat
        b = self.service.result(self.service.submit(
            SampleRequest(ids.numpy(), [0], key, input_type=t)))
        got = (("x", b.x), ("y", b.y)) if t is None else \
            (("x", b.x.get(t)), ("y", b.y.get(t)))
        return {k: (None if v is None else v[inverse]) for k, v in got}

    def _get_tensor(self, attr: TensorAttr):
        group, name = attr.group_name, attr.attr_name
        if (group, name) not in self._shapes:
            return None
        index = attr.index
        if index is None or isinstance(index, slice):
            everything = torch.arange(self._counts[group])
            index = everything[index if isinstance(index, slice) else slice(None)]
        elif not torch.is_tensor(index):
            index = torch.as_tensor(np.asarray(index), dtype=torch.int64)
        hit = self._recent.get(id(index))
        if hit is not None and hit[0] is index and hit[1].get(name) is not None:
            return hit[1][name]
        if self.service.features is None:
            raise SamplingInputError(
                "the sampling service was built with features=False",
                "the feature store cannot fetch rows", "construct it with features=True")
        return self._fetch(group, index)[name]

    def _get_tensor_size(self, attr: TensorAttr):
        shape = self._shapes.get((attr.group_name, attr.attr_name))
        return None if shape is None else (self._counts[attr.group_name], *shape)

    def get_all_tensor_attrs(self) -> list[TensorAttr]:
        return [TensorAttr(group_name=t, attr_name=k) for t, k in self._shapes]

    def _put_tensor(self, tensor, attr: TensorAttr) -> bool:
        raise _read_only("PartitionFeatureStore")

    def _remove_tensor(self, attr: TensorAttr) -> bool:
        raise _read_only("PartitionFeatureStore")


class PartitionGraphStore(GraphStore):
    """This rank's part as a PyG ``GraphStore``: the in-edges of its owned nodes (COO, original
    ids, ``edge_index[0]`` = source); on a typed part one edge set per relation (per-type ids),
    the in-edges of the owned nodes of its destination type."""

    def __init__(self, service) -> None:
        super().__init__()
        _check_not_renumbered(service)
        self.service = service
        self._fetches = 0
        self.part = service.sampler.part
        tp = typed_part(service)
        self.flat = flat_type(tp)
        self.typed = None if self.flat else tp
        self.layout = lay = self.part.layout  # a homogeneous part: its one type and relation
        self._attrs = {et: EdgeAttr(edge_type=None if self.typed is None else et,
                                    layout=EdgeLayout.COO, is_sorted=False,
                                    size=(type_count(lay, et[0]), type_count(lay, et[2])))
                       for et in lay.edge_types}

    def _get_edge_index(self, edge_attr: EdgeAttr):
        # The neighbors' original ids are known to their owners only (no rank holds a global
        # id map): one request through the service for every neighbor of this part's nodes
        # (fanout -1 keeps each row whole and in CSR order) returns them as its n_id.
        key = request_key(0, 1 << 21, self._fetches)
        self._fetches += 1
        lay = self.layout
        et = lay.edge_types[0] if self.typed is None else edge_attr.edge_type
        if et not in self._attrs:
            raise SamplingInputError(f"edge type {et} is not a relation of the graph",
                                     "the graph store holds no edges of it",
                                     f"use one of {list(self._attrs)}")
        s, _, d = et
        t = lay.node_types.index(d)  # the part's rows are grouped by type, ids internal
        own = np.asarray(self.part.orig_ids)[lay.type_offset[t]:lay.type_offset[t + 1]] \
            - lay.node_type_offset[t]
        typed = self.part.typed is not None
        fanouts = {r: ([-1] if r == et else [0]) for r in lay.edge_types} if typed else [-1]
        b = self.service.result(self.service.submit(SampleRequest(
            own, fanouts, key, edge_ids=False, input_type=d if typed else None)))
        if not typed:
            return b.n_id[b.edge_index[0]], b.n_id[b.edge_index[1]]
        ei = b.edge_index[et]
        return b.n_id[s][ei[0]], b.n_id[d][ei[1]]

    def get_all_edge_attrs(self) -> list[EdgeAttr]:
        return list(self._attrs.values())

    def _put_edge_index(self, edge_index, edge_attr: EdgeAttr) -> bool:
        raise _read_only("PartitionGraphStore")

    def _remove_edge_index(self, edge_attr: EdgeAttr) -> bool:
        raise _read_only("PartitionGraphStore")
