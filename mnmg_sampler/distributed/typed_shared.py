"""Shared topology of typed parts: ranks on one host map each other's typed parts and sample
every hop, translate ids and read ``x``/``y`` of every node type themselves, off the wire.

The decision is the homogeneous one (:func:`~.shared_topology.open_shared_topology`: the same
``shared_topology`` values, every rank on one host, a partition loaded from a
directory, the CPU kernel); its :class:`~.shared_topology.SharedTopology`
already maps every part's ``indptr``, ``indices``, ``edge_ids`` and ``orig_ids`` (internal ids,
ascending per part) and translates ids in place. :class:`TypedSharedTopology` adds each part's
typed tables (``type_offset``, ``seg_base``) and its per-type ``x``/``y`` files, mapped
read-only. A hop is one call of :func:`~mnmg_sampler.ops.typed_parts.sample_typed_parts` over
every part (every relation, every merged request, each node with its time bound when the round
has time); the RNG is keyed on internal ids and each part keeps the canonical (time-sorted)
neighbor order, so results equal the wire path's and
:class:`~mnmg_sampler.sampling.sampler.HeteroSampler`'s bit for bit.

Time: each part's edge times are mapped with its CSR; with node time only, the kernel reads the
neighbors' node times by new id, so :attr:`TypedSharedTopology.node_time` concatenates the
mapped parts' node times (8 bytes per node, the array the wire path exchanges; the sampler takes
it instead of that exchange).
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError, MnmgError
from ..graph.partition_io import load_partition
from ..ops.typed_parts import sample_typed_parts
from ..system.host_limits import check_allocation
from .collective import Exchanger, agree
from .shared_topology import SharedTopology, _gather_rows, _rows_of, open_shared_topology

__all__ = ["TypedSharedTopology", "open_typed_shared"]

_I64 = np.int64


def _readonly(a: np.ndarray, dtype) -> np.ndarray:
    v = np.ascontiguousarray(a, dtype).view()  # a mapped file is contiguous: no copy
    v.flags.writeable = False
    return v


def _per_type(mapped: list, attr: str, name: str) -> tuple | None:
    """Every part's ``typed.<attr>[name]`` as read-only ``uint8 [rows, row bytes]`` views (one
    numba type whatever the dtype, e.g. float16), then the dtype and row shape; ``None`` when
    no part holds it. Parts that disagree in presence, dtype or row shape are an error."""
    views = _rows_of([getattr(p.typed, attr).get(name) for p in mapped], f"{attr}.{name}")
    if views is None:
        return None
    first = views[0]
    width = first.dtype.itemsize * int(np.prod(first.shape[1:], dtype=np.int64))
    return tuple(v.view(np.uint8).reshape(v.shape[0], width) for v in views), first.dtype, \
        first.shape[1:]


class TypedSharedTopology:
    """Every typed part on this rank, memory-mapped (see the module docstring).

    Attributes:
        base: the :class:`~.shared_topology.SharedTopology` of the same parts (ids, CSRs).
        x, y: per node type name, ``(one read-only byte view per part, dtype, row shape)``
            (types without them are absent).
        node_time: int64 node time of every node by new id (read-only), or ``None``.
        peer_nodes, peer_edges: frontier nodes of other ranks sampled here, and their edges.
    """

    whole = True  # every part of the graph (typed parts have no host groups)

    def __init__(self, base: SharedTopology, part) -> None:
        W = len(base.parts)
        if not getattr(base, "whole", True):
            raise ConfigError("the shared topology of typed parts needs every rank's part",
                              "hops of other hosts' nodes would need the wire",
                              "pass shared_topology='auto' or False")
        self.base = base
        self.rank = base.rank
        self.bounds = base.bounds
        mapped = [part if r == base.rank else load_partition(part.path, r, W, verify="off")
                  for r in range(W)]
        if any(p.typed is None for p in mapped):
            raise ConfigError("the partition mixes typed and homogeneous parts",
                              "the shared topology cannot sample them alike",
                              "partition the graph again")
        tp = part.typed
        self.node_types = tp.node_types
        self.rel_offset = np.ascontiguousarray(tp.rel_offset, _I64)
        self.weighted = np.ascontiguousarray(tp.weighted, np.uint8)
        self._type_offs = np.ascontiguousarray(np.stack([p.typed.type_offset for p in mapped]),
                                               _I64)
        self._seg_bases = np.ascontiguousarray(np.stack([p.typed.seg_base for p in mapped]),
                                               _I64)
        self._indptrs, self._indices, self._eids = base._csrs
        self._origs = base._origs
        empty = np.zeros(0, np.float32)
        self._weights = tuple(_readonly(empty if w is None else w, np.float32)
                              for _, w in base.parts)
        self.x = {t: v for t in tp.node_types if (v := _per_type(mapped, "x", t)) is not None}
        self.y = {t: v for t in tp.node_types if (v := _per_type(mapped, "y", t)) is not None}
        self._edge_times = None
        if tp.edge_time is not None:  # every part of a timed graph has it (the manifest's)
            self._edge_times = tuple(_readonly(p.typed.edge_time, _I64) for p in mapped)
        self.node_time = None
        if tp.node_time is not None:
            n = int(self.bounds[-1])
            check_allocation(f"the node time of all {n:,} nodes", 8 * n,
                             "use a machine with more memory, or edge time instead of node "
                             "time")
            self.node_time = _readonly(np.concatenate([p.typed.node_time for p in mapped]),
                                       _I64)
        self.peer_nodes = 0
        self.peer_edges = 0

    def stats(self) -> dict:
        return {"enabled": True, "parts": len(self.base.parts), "peer_nodes": self.peer_nodes,
                "peer_edges": self.peer_edges}

    # -- ids ---------------------------------------------------------------------------------
    def to_new(self, internal: np.ndarray) -> np.ndarray:
        """New ids of internal ids (no collective)."""
        return self.base.to_new(internal)

    def to_orig(self, new_ids: np.ndarray) -> np.ndarray:
        """Internal ids of new ids (no collective)."""
        return self.base.to_orig(new_ids)

    # -- one hop -----------------------------------------------------------------------------
    def hop(self, nodes, keys, req, fan, rep, seed: int, hop: int, bounds=None, last=None):
        """The typed kernel's four arrays for frontier ``nodes`` (new ids), in frontier order:
        one call over every part (``bounds``, ``last``: each node's time bound and each
        request's strategy, as :func:`~mnmg_sampler.ops.typed.sample_typed_neighbors`)."""
        nodes = np.ascontiguousarray(nodes, _I64)
        out = sample_typed_parts(self.bounds, self._type_offs, self._seg_bases, self.rel_offset,
                                 self.weighted, self._indptrs, self._indices, self._eids,
                                 self._origs, self._weights, nodes, keys, req, fan, rep, seed,
                                 hop, time_bounds=bounds, last=last,
                                 edge_times=self._edge_times, node_time=self.node_time)
        lo, hi = self.bounds[self.rank], self.bounds[self.rank + 1]
        peer = (nodes < lo) | (nodes >= hi)
        self.peer_nodes += int(peer.sum())
        self.peer_edges += int(out[0][peer].sum())
        return out

    # -- node data ---------------------------------------------------------------------------
    def rows(self, name: str, t: int, new_ids: np.ndarray) -> dict[str, np.ndarray]:
        """``x`` / ``y`` rows of new ids of type ``name`` (index ``t``), read in place from
        every part's mapped files, in ``new_ids`` order (no collective)."""
        starts = np.ascontiguousarray(self.bounds[:-1] + self._type_offs[:, t], _I64)
        starts = np.append(starts, self.bounds[-1])  # _gather's bounds: one start per part
        ids = np.ascontiguousarray(new_ids, _I64)
        out = {}
        for key, src in (("x", self.x), ("y", self.y)):
            if name not in src:
                continue
            arrays, dtype, shape = src[name]
            raw = _gather_rows(ids, starts, arrays, np.empty((ids.shape[0], arrays[0].shape[1]),
                                                             np.uint8))
            out[key] = raw.view(dtype).reshape(ids.shape[0], *shape)
        return out


def open_typed_shared(part, ex: Exchanger, enabled: bool | str, kernel: str = "cpu"
                      ) -> TypedSharedTopology | None:
    """Collective: the typed shared topology when every rank gets the homogeneous one (same
    rules and errors, :func:`~.shared_topology.open_shared_topology`), else ``None``."""
    base = open_shared_topology(part, ex, enabled, kernel)
    if base is None:
        return None
    try:
        return agree(lambda: TypedSharedTopology(base, part), ex.group,
                     "opening the other ranks' typed parts for the shared topology")
    except (MnmgError, OSError):  # raised on every rank alike
        if enabled is True:
            raise
        return None
