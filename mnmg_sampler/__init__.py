"""mnmg-sampler: multi-node, multi-GPU neighbor sampling for GNN training on torch.distributed.

``import mnmg_sampler`` is light: it imports neither CUDA libraries (cupy, pylibraft,
numba.cuda) nor the numba kernels; those load on first use.
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
    "CSRGraph": "mnmg_sampler.graph.csr",
    "MiniBatch": "mnmg_sampler.batch",
    "MultiHopSampler": "mnmg_sampler.sampler",
    "SampleRequest": "mnmg_sampler.sampler",
    "sample": "mnmg_sampler.sampler",
    "load_graph": "mnmg_sampler.graph.datasets",
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
    *_LAZY,
]

if TYPE_CHECKING:  # pragma: no cover
    from .batch import MiniBatch  # noqa: F401
    from .graph.csr import CSRGraph  # noqa: F401
    from .graph.datasets import load_graph  # noqa: F401
    from .sampler import MultiHopSampler, SampleRequest, sample  # noqa: F401


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'mnmg_sampler' has no attribute {name!r}")
