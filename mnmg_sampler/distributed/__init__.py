"""Distributed sampling over torch.distributed: one process per GPU, one part of the graph each.

Every rank owns a contiguous range of (relabelled) node ids, so a node's owner is a search
over the part boundaries (:mod:`.partition_book`). Draws are keyed on original node ids, so
results do not depend on the world size or the partitioning (:mod:`.sampler`).

Import the submodules directly; this package exports nothing so that importing it stays cheap.
"""

__all__: list[str] = []
