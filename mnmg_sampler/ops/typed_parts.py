"""Moved to :mod:`mnmg_sampler.ops.typed`; this name stays until ``distributed.shared_topology``
imports from there."""

from .typed import part_of, sample_typed_parts  # noqa: F401
