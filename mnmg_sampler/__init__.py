"""mnmg-sampler: multi-node, multi-GPU neighbor sampling for GNN training on torch.distributed.

The public API is importable from the top::

    from mnmg_sampler import (DistNeighborLoader, SamplingService, load_partition,
                              partition_graph)

===========================  ==================================================================
graph and partitions         ``load_graph``, ``partition_graph``, ``partition``,
                             ``plan_partitions``, ``PartitionPlan``, ``write_partitions``,
                             ``load_partition``, ``Partition``, ``PartitionBook``,
                             ``CSRGraph``, ``supported_formats``
sampling                     ``SamplingService``, ``DistNeighborLoader``, ``SampleRequest``,
                             ``MiniBatch``, ``MultiHopSampler``, ``sample``, ``request_key``
seed sets                    ``random_node_split``, ``SeedSet``, ``AllNodes``, ``NodeIds``,
                             ``NodeSplit``, ``NodeBits`` (read batch by batch: no array of
                             ``num_nodes``)
typed graphs                 ``TypedGraph``, ``typed_graph``, ``load_typed_graph``,
                             ``HeteroSampler``, ``HeteroSampleRequest``, ``HeteroMiniBatch``,
                             ``sample_hetero``; ``partition_graph``, ``SamplingService`` and
                             ``DistNeighborLoader`` take typed graphs too (docs/hetero.md);
                             with time ``load_temporal_graph``, ``temporal_graph_from_data``
                             (docs/temporal.md)
link prediction              ``DistLinkNeighborLoader``, ``LinkMiniBatch``, ``NegativeSampling``
training                     ``init_distributed``, ``set_threads``, ``GraphSAGE``,
                             ``num_correct``, ``accuracy``, ``DistEmbedding`` (learned rows
                             partitioned by owner, sparse Adam: docs/hetero.md)
config                       ``load_config``, ``JobConfig``
errors                       ``MnmgError`` and its subclasses
PyG integration              :mod:`mnmg_sampler.pyg` (needs the ``pyg`` extra)
===========================  ==================================================================

``import mnmg_sampler`` is light: the names above load on first use, and it imports neither
CUDA libraries (cupy, numba.cuda) nor the numba kernels.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from .errors import (
    ConfigError,
    GraphFormatError,
    MissingDependencyError,
    MnmgError,
    PartitionError,
    SamplingInputError,
    ServiceError,
    WorldSizeError,
)

__version__ = "0.1.0"

_LAZY = {
    # graph and partitions
    "CSRGraph": "mnmg_sampler.graph.csr",
    "load_graph": "mnmg_sampler.graph.datasets",
    "supported_formats": "mnmg_sampler.graph.datasets",
    "partition_graph": "mnmg_sampler.graph.api",
    "partition": "mnmg_sampler.graph.partition",
    "plan_partitions": "mnmg_sampler.graph.partition:partition_graph",
    "PartitionPlan": "mnmg_sampler.graph.partition",
    "write_partitions": "mnmg_sampler.graph.partition",
    "load_partition": "mnmg_sampler.graph.partition_io",
    "Partition": "mnmg_sampler.graph.partition_io",
    # typed (heterogeneous) graphs
    "TypedGraph": "mnmg_sampler.graph.typed",
    "typed_graph": "mnmg_sampler.graph.typed",
    "load_typed_graph": "mnmg_sampler.graph.typed_io",
    "HeteroSampler": "mnmg_sampler.sampling.sampler",
    "HeteroSampleRequest": "mnmg_sampler.sampling.sampler",
    "sample_hetero": "mnmg_sampler.sampling.sampler",
    "HeteroMiniBatch": "mnmg_sampler.sampling.batch",
    "load_temporal_graph": "mnmg_sampler.graph.temporal",
    "temporal_graph_from_data": "mnmg_sampler.graph.temporal",
    "PartitionBook": "mnmg_sampler.distributed.partition_book",
    # sampling
    "SamplingService": "mnmg_sampler.distributed.service",
    "DistNeighborLoader": "mnmg_sampler.loaders.neighbor",
    "DistLinkNeighborLoader": "mnmg_sampler.loaders.link",
    "LinkMiniBatch": "mnmg_sampler.loaders.link",
    "NegativeSampling": "mnmg_sampler.ops.negative",
    "MiniBatch": "mnmg_sampler.sampling.batch",
    "MultiHopSampler": "mnmg_sampler.sampling.sampler",
    "SampleRequest": "mnmg_sampler.sampling.sampler",
    "sample": "mnmg_sampler.sampling.sampler",
    "request_key": "mnmg_sampler.ops.rng",
    # seed sets (read batch by batch, no array of num_nodes)
    "SeedSet": "mnmg_sampler.loaders.seeds",
    "AllNodes": "mnmg_sampler.loaders.seeds",
    "NodeIds": "mnmg_sampler.loaders.seeds",
    "NodeBits": "mnmg_sampler.loaders.seeds",
    "NodeSplit": "mnmg_sampler.loaders.seeds",
    "random_node_split": "mnmg_sampler.loaders.seeds",
    # training
    "init_distributed": "mnmg_sampler.system.runtime",
    "set_threads": "mnmg_sampler.system.runtime",
    "GraphSAGE": "mnmg_sampler.train.model",
    "DistEmbedding": "mnmg_sampler.distributed.embeddings",
    "num_correct": "mnmg_sampler.train.model",
    "accuracy": "mnmg_sampler.train.model",
    # config
    "load_config": "mnmg_sampler.config",
    "JobConfig": "mnmg_sampler.config",
}

__all__ = [
    "ConfigError",
    "GraphFormatError",
    "MissingDependencyError",
    "MnmgError",
    "PartitionError",
    "SamplingInputError",
    "ServiceError",
    "WorldSizeError",
    "__version__",
    *_LAZY,
]

if TYPE_CHECKING:  # pragma: no cover
    from .config import JobConfig, load_config  # noqa: F401
    from .distributed.embeddings import DistEmbedding  # noqa: F401
    from .distributed.partition_book import PartitionBook  # noqa: F401
    from .distributed.service import SamplingService  # noqa: F401
    from .graph.api import partition_graph  # noqa: F401
    from .graph.csr import CSRGraph  # noqa: F401
    from .graph.datasets import load_graph, supported_formats  # noqa: F401
    from .graph.partition import PartitionPlan, partition, write_partitions  # noqa: F401
    from .graph.partition import partition_graph as plan_partitions  # noqa: F401
    from .graph.partition_io import Partition, load_partition  # noqa: F401
    from .graph.temporal import load_temporal_graph, temporal_graph_from_data  # noqa: F401
    from .graph.typed import TypedGraph, typed_graph  # noqa: F401
    from .graph.typed_io import load_typed_graph  # noqa: F401
    from .loaders.link import DistLinkNeighborLoader, LinkMiniBatch  # noqa: F401
    from .loaders.neighbor import DistNeighborLoader  # noqa: F401
    from .loaders.seeds import (  # noqa: F401
        AllNodes,
        NodeBits,
        NodeIds,
        NodeSplit,
        SeedSet,
        random_node_split,
    )
    from .ops.negative import NegativeSampling  # noqa: F401
    from .ops.rng import request_key  # noqa: F401
    from .sampling.batch import HeteroMiniBatch, MiniBatch  # noqa: F401
    from .sampling.sampler import (  # noqa: F401
        HeteroSampler,
        HeteroSampleRequest,
        MultiHopSampler,
        SampleRequest,
        sample,
        sample_hetero,
    )
    from .system.runtime import init_distributed, set_threads  # noqa: F401
    from .train.model import GraphSAGE, accuracy, num_correct  # noqa: F401


def __getattr__(name: str):
    if name in _LAZY:  # "module" (same name there) or "module:attribute"
        module, _, attr = _LAZY[name].partition(":")
        value = getattr(importlib.import_module(module), attr or name)
        globals()[name] = value  # later lookups skip __getattr__
        return value
    raise AttributeError(f"module 'mnmg_sampler' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
