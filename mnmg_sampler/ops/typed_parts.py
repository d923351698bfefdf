"""Moved to :mod:`mnmg_sampler.ops.typed` (and ``part_of`` to :mod:`mnmg_sampler.ops.cpu`);
this name stays until ``distributed.shared_topology`` imports from there."""

from .cpu import part_of  # noqa: F401
from .typed import sample_typed_parts  # noqa: F401
