"""PyG integration: our sampling service behind PyG's own loader interfaces.

PyG splits a loader into a *sampler* (``BaseSampler.sample_from_nodes`` -> ``SamplerOutput``)
and the *data* it reads features from (a ``FeatureStore`` / ``GraphStore`` pair). This package
provides both on top of a :class:`~mnmg_sampler.distributed.service.SamplingService`, so
``torch_geometric.loader.NodeLoader`` and any PyG model run on our partitions::

    from torch_geometric.loader import NodeLoader
    from mnmg_sampler.pyg import ServiceSampler

    sampler = ServiceSampler(service, num_neighbors=[10, 5])
    loader = NodeLoader(sampler.data, node_sampler=sampler, input_nodes=my_ids,
                        batch_size=128)
    for data in loader:            # a torch_geometric.data.Data, as NeighborLoader gives
        out = model(data.x, data.edge_index)[: data.batch_size]

On a service over typed parts the same sampler serves PyG's hetero loaders: ``num_neighbors`` a
list or a dict per edge type, ``NodeLoader(..., input_nodes=(node type, ids))`` and
``LinkLoader(..., edge_label_index=(edge type, [2, E] ids), neg_sampling=NegativeSampling(...))``
(``binary`` or ``triplet``) give ``HeteroData`` batches laid out as PyG's ``NeighborLoader`` /
``LinkNeighborLoader`` lay them out, ``x`` and ``y`` per node type. A part of one node type
and one relation (a PyG ``Data`` with time) gives ``Data`` batches, and with
``ServiceSampler(..., time_attr=...)`` the loaders' ``input_time`` / ``edge_label_time`` sample
in time, as PyG's ``NeighborSampler``.

Needs the ``pyg`` extra (``pip install 'mnmg-sampler[pyg]'``).
"""

from __future__ import annotations

from ..errors import MissingDependencyError

try:
    import torch_geometric  # noqa: F401
except ImportError as e:  # pragma: no cover - exercised without the extra
    raise MissingDependencyError(
        "torch_geometric is not installed", "mnmg_sampler.pyg cannot be used",
        "pip install 'mnmg-sampler[pyg]'") from e

from .sampler import ServiceSampler  # noqa: E402
from .stores import PartitionFeatureStore, PartitionGraphStore  # noqa: E402

__all__ = ["ServiceSampler", "PartitionFeatureStore", "PartitionGraphStore"]
