"""Edge membership over a partitioned graph: "is ``src -> dst`` an edge?" asked of the owner.

The in-edge CSR row of ``dst`` lives on the rank that owns ``dst``: each query travels there in
one all-to-all (after its original ids became new ids, :mod:`.id_maps`), is answered by a scan
of that row, and the answer comes back in a second. Calls are collective: every rank calls
:meth:`EdgeMembership.known` the same number of times, with any number of queries, even none.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist

from ..ops.negative import typed_has_edges
from .collective import Exchanger
from .id_maps import IdMaps


class EdgeMembership:
    """Collective membership test for original-id pairs over this rank's partition.

    Args:
        part: this rank's :class:`~mnmg_sampler.graph.partition_io.Partition`.
        group: process group of the exchange (its own: it never interleaves with another
            thread's collectives).
        ids: the sampler's :class:`~mnmg_sampler.distributed.id_maps.IdMaps` to share (its
            arrays, over this group); ``None`` builds this rank's share here (collective).
        relation: on a typed part, the relation (index in its edge types) to test; pairs are
            then internal ids (type offset + per-type id).
    """

    def __init__(self, part, group: dist.ProcessGroup | None = None,
                 ids: IdMaps | None = None, relation: int | None = None) -> None:
        from ..graph.partition_io import part_graph

        self.relation = relation or 0  # a homogeneous part: its one relation
        self.graph = part_graph(part)
        self.lo = int(part.boundaries[part.rank])
        self.group = group
        self.ex = Exchanger(group)
        self.ids = IdMaps(part, self.ex) if ids is None else ids.with_exchanger(self.ex)
        self.calls = 0

    def known(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Collective: bool per pair, True when ``src -> dst`` (original ids) is an edge."""
        src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
        s, d = self.ids.to_new_many([src, dst])
        owner = self.ids.owner(d)
        perm = np.argsort(owner, kind="stable")
        send_counts = torch.from_numpy(np.bincount(owner, minlength=self.ex.world_size)
                                       .astype(np.int64))
        payload = torch.from_numpy(np.stack([d[perm], s[perm]], 1))
        recv, recv_counts = self.ex.exchange(payload, send_counts)
        recv = recv.numpy()
        flags = typed_has_edges(self.graph, self.relation, recv[:, 0] - self.lo, recv[:, 1])
        back = self.ex.payload(torch.from_numpy(flags.astype(np.uint8)), recv_counts.tolist(),
                               send_counts.tolist()).numpy()
        out = np.empty(d.size, bool)
        out[perm] = back.astype(bool)
        self.calls += 1
        return out

    def any(self, flag: bool) -> bool:
        """Collective: True when ``flag`` is True on any rank."""
        return self.ex.agree_max([int(bool(flag))])[0] > 0
