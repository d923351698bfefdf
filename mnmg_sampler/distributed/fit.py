"""Place by fit: what each host keeps of the other hosts' data, decided once by every rank.

Each host has a memory budget for data beyond its own parts (``features.host_memory_mb``).
It takes the other hosts' topology first (every part's CSR, memory-mapped: one copy in the
host's page cache), then their feature rows: all mapped in place when they fit, else the rows
its ranks read most, copied once into the host's row cache (:mod:`.row_cache`). Results never
depend on the placement (docs/loader.md#host-groups-ranks-on-several-hosts).

The decision (:func:`decide`) is a pure function of what every rank put in one agreement (its
host, budget, and its part's topology and row bytes), so every rank computes the same one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..system.host_limits import available_bytes

__all__ = ["DEFAULT_SHARE", "HostPlacement", "Placement", "decide", "default_budget",
           "part_bytes"]

DEFAULT_SHARE = 0.5
"""Share of the memory a host can see (``MemAvailable``) that the default budget takes."""


def default_budget() -> int:
    """The budget when none is given: :data:`DEFAULT_SHARE` of the bytes this host can
    allocate now."""
    return int(DEFAULT_SHARE * available_bytes())


def part_bytes(part) -> tuple[int, int]:
    """``(topology bytes, row bytes)`` of one part: its CSR arrays (indptr, indices, edge
    ids, original ids, weights; a typed part's times too) and its feature rows and labels
    (a typed part's of every type), as their files hold them."""
    def size(a) -> int:
        return 0 if a is None else int(np.asarray(a).nbytes)

    topo = sum(size(getattr(part, k, None)) for k in ("indptr", "indices", "edge_ids",
                                                       "orig_ids", "weights"))
    rows = size(part.x) + size(part.y)
    tp = getattr(part, "typed", None)
    if tp is not None:
        topo += size(tp.edge_time) + size(tp.node_time)
        rows += sum(size(a) for src in (tp.x, tp.y) for a in src.values())
    return topo, rows


@dataclass(frozen=True)
class HostPlacement:
    """What one host holds beyond its own parts.

    Attributes:
        ranks: the host's ranks (their parts are the host's own).
        budget: bytes for data of other hosts (the smallest its ranks were given).
        topology: every other host's CSR is mapped here (hops are sampled here).
        topology_bytes, row_bytes: what the other hosts' CSR and feature rows take.
        rows: every other host's feature rows are mapped here (none crosses the wire).
        left: bytes the row cache may take (0 when ``rows``).
    """

    ranks: tuple[int, ...]
    budget: int
    topology: bool
    topology_bytes: int
    rows: bool
    row_bytes: int
    left: int

    def cache_rows(self, row_bytes: int, far_rows: int) -> int:
        """Rows of ``row_bytes`` each the row cache keeps, of ``far_rows`` rows of other hosts
        (any table: feature rows, embedding rows)."""
        return 0 if self.rows or row_bytes <= 0 else min(self.left // row_bytes, far_rows)


@dataclass(frozen=True)
class Placement:
    """Every host's :class:`HostPlacement`, the same on every rank.

    Attributes:
        hosts: per host (0, 1, ... in order of each host's first rank).
        host_of: host index per rank.
    """

    hosts: tuple[HostPlacement, ...]
    host_of: tuple[int, ...]

    def of(self, rank: int) -> HostPlacement:
        return self.hosts[self.host_of[rank]]

    @property
    def hops_local(self) -> bool:
        """Every host samples every hop itself: no hop exchanges ids."""
        return all(h.topology for h in self.hosts)

    @property
    def rows_local(self) -> bool:
        """Every host reads every row itself: no fetch exchanges rows."""
        return all(h.rows for h in self.hosts)

    def report(self, cache_rows: Sequence[int] | None = None, source: str = "decided"
               ) -> list[dict]:
        """JSON-able, per host: its ranks, budget, and what it holds of other hosts
        (``cache_rows``: rows each host's cache took, when known; ``source``: ``file`` when
        read from the files beside the parts, :mod:`.placement_files`)."""
        out = []
        for i, h in enumerate(self.hosts):
            rows = "all" if h.rows else ("cache" if cache_rows and cache_rows[i] else "none")
            out.append({"host": i, "ranks": list(h.ranks), "budget_bytes": h.budget,
                        "topology": "all" if h.topology else "own",
                        "topology_bytes": h.topology_bytes if h.topology else 0,
                        "rows": rows, "other_rows_bytes": h.row_bytes,
                        "cache_rows": int(cache_rows[i]) if cache_rows else 0,
                        "from": source})
        return out


def decide(host_of: Sequence[int], budgets: Sequence[int], topo: Sequence[int],
           rows: Sequence[int], can_map: bool | Sequence[bool]) -> Placement:
    """The placement from every rank's host index, budget, and its part's topology and row
    bytes. ``can_map`` (for all ranks, or per rank): the rank can map every other part (it
    opens every part of the partition directory, the CPU kernel); a host whose ranks cannot
    maps no other host's data and its whole budget goes to the row cache."""
    host_of = tuple(int(h) for h in host_of)
    can = [bool(can_map)] * len(host_of) if isinstance(can_map, bool) else list(can_map)
    out = []
    for k in range(max(host_of) + 1):
        mine = [r for r, h in enumerate(host_of) if h == k]
        budget = max(0, min(int(budgets[r]) for r in mine))
        t = sum(int(topo[r]) for r, h in enumerate(host_of) if h != k)
        x = sum(int(rows[r]) for r, h in enumerate(host_of) if h != k)
        has_topo = all(can[r] for r in mine) and budget >= t
        left = budget - t if has_topo else budget
        has_rows = has_topo and left >= x
        out.append(HostPlacement(tuple(mine), budget, has_topo, t, has_rows, x,
                                 0 if has_rows else left))
    return Placement(tuple(out), host_of)
