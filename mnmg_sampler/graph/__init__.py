"""Graphs: the in-memory CSR, readers, generators, built-in datasets and the partitioner."""

from .csr import CSRGraph

__all__ = ["CSRGraph"]
