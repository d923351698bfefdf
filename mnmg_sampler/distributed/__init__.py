"""Distributed sampling over torch.distributed: one process per GPU, one part of the graph each.

Every rank owns a contiguous range of (relabelled) node ids, so finding the owner of a node is a
``torch.searchsorted`` over the part boundaries (:mod:`.partition_book`), on whatever device the
ids live. Sampling a hop buckets the frontier by owner, exchanges ids with every other rank
(counts then payload all-to-alls; opt-in on gloo, one point-to-point message per peer; every
rank in every round), runs one kernel call over everything a rank received and sends the neighbors
back. Draws are keyed on original node ids, so results do not
depend on the world size or the partitioning.

Import the submodules directly; this package exports nothing so that importing it stays cheap.
"""

__all__: list[str] = []
