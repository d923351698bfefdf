"""Original <-> new node ids of a partitioned graph, with no num_nodes-sized array on any rank.

Each rank holds its own nodes' original ids (``part.orig_ids``, ascending within a part: new ->
original for its nodes and, by binary search, original -> new) and one shard of original -> new
(``W`` equal ranges of original ids), built once with one all-to-all; anything else is asked of
the rank that knows it, in one exchange. A ``range`` partitioning keeps every id and needs none
of this. Lookups are collective: every rank calls them together, with any number of ids.

``mode="replicated"`` maps both global map files instead (16 bytes per node, one copy in a host's
page cache) and translates locally. ``mode="auto"`` (the default) replicates graphs of at most
:data:`AUTO_REPLICATED_MAX_NODES` nodes whose map files every rank can open, else shards; results
are the same in every mode. See docs/architecture.md#ids-original-outside-relabelled-inside.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import torch.distributed as dist

from ..errors import ConfigError, PartitionError
from ..graph.partition import _even_boundaries
from ..ops import wire
from ..ops.dedup import unique_first
from .collective import Exchanger, backend_device, peer_errors, raise_if_any

__all__ = ["ID_MAP_MODES", "IdMaps", "identity_ids"]

ID_MAP_MODES = ("auto", "sharded", "replicated")

AUTO_REPLICATED_MAX_NODES = 1 << 21
"""Largest graph ``auto`` replicates the maps of (16 bytes per node: 32 MiB). A round over the
wire then costs two collectives fewer; beyond this the sharded maps keep every rank's memory
to its share (``docs/architecture.md``, "Ids")."""

_CHUNK = 1 << 18

TAG = "id_maps"
"""Traffic class of the id translations in :attr:`Exchanger.bytes`."""


def identity_ids(part) -> bool:
    """True when the partitioning kept every node's id (homogeneous ``range``): no id map is
    needed. A typed ``range`` split cuts each type on its own, so it relabels."""
    m = getattr(part, "manifest", None) or {}
    return m.get("stats", {}).get("method") == "range" and "typed" not in m


def wire_dtype(num_nodes: int, num_edges: int = 0) -> np.dtype:
    """int32 when every node id and every per-node count fits, else int64 (once per job)."""
    return np.dtype(np.int32 if max(int(num_nodes), int(num_edges)) < 2**31 else np.int64)


def _cat(arrays: Sequence[np.ndarray]) -> np.ndarray:
    return np.concatenate(arrays).astype(np.int64, copy=False) if len(arrays) else \
        np.empty(0, np.int64)


def _split(flat: np.ndarray, like: Sequence[np.ndarray]) -> list[np.ndarray]:
    return np.split(flat, np.cumsum([int(a.size) for a in like])[:-1]) if len(like) else []


class IdMaps:
    """This rank's share of the id maps of a partitioned graph (see the module docstring).

    ``ex`` is the exchanger lookups run on (its group's ranks are the parts); ``mode`` is
    ``auto``, ``sharded`` or ``replicated``. Construction is collective on ``ex``'s group (the
    ranks agree on ``mode``; one all-to-all builds the shard) unless the group has one rank.
    ``self.mode`` is the mode in use (never ``auto``).
    """

    def __init__(self, part, ex: Exchanger, mode: str = "auto") -> None:
        if mode not in ID_MAP_MODES:
            raise ConfigError(f"unknown id map mode {mode!r}", "ids cannot be translated",
                              f"use one of {', '.join(ID_MAP_MODES)}")
        self.ex = ex
        self.o2n = self.n2o = None
        self.num_nodes = int(part.num_nodes)
        self.identity = identity_ids(part)
        bounds = np.asarray(part.boundaries, np.int64)
        self._inner = np.ascontiguousarray(bounds[1:-1])
        self.lo, self.hi = int(bounds[ex.rank]), int(bounds[ex.rank + 1])
        self.word = wire_dtype(self.num_nodes)
        self._word0 = np.empty(0, self.word)  # tells the packers the word type
        self.orig = None if self.identity else np.asarray(part.orig_ids)
        self.shard = None
        self.even = _even_boundaries(self.num_nodes, ex.world_size)
        self._even_inner = np.ascontiguousarray(np.asarray(self.even, np.int64)[1:-1])
        can = mode == "auto" and _can_replicate(part)
        if ex.world_size > 1:
            can = _agree_on_mode(mode, ex, can)
        self.mode = ("replicated" if can else "sharded") if mode == "auto" else mode
        mode = self.mode
        if self.identity:
            return
        if mode == "replicated":  # both global maps, memory-mapped: local translation only
            self.o2n, self.n2o = np.asarray(part.orig_to_new), np.asarray(part.new_to_orig)
            return
        o = self.orig
        # every partitioner here writes a part's original ids ascending (stable sort by part),
        # so the part's own file is the sorted index of its nodes: no copy
        err = None
        if o.size > 1 and not bool(np.all(o[1:] > o[:-1])):
            err = PartitionError(
                f"part {part.rank}'s original ids (orig_ids.npy) are not in ascending order",
                "this mnmg-sampler translates ids through each part's sorted ids; no rank "
                "samples", "re-partition the graph with this version of `mnmg-sampler partition`")
        if ex.world_size > 1:
            raise_if_any(err, ex.group, "checking the parts' original ids")
            self.shard = self._build_shard(np.asarray(part.boundaries, np.int64))
        elif err is not None:
            raise err

    @property
    def nbytes(self) -> int:
        """Bytes of id-map arrays this rank allocated (its own ids are its part's file)."""
        if self.o2n is not None:
            return int(self.o2n.nbytes + self.n2o.nbytes)
        return 0 if self.shard is None else int(self.shard.nbytes)

    def with_exchanger(self, ex: Exchanger) -> IdMaps:
        """The same maps (shared arrays, no copy) answering lookups over another exchanger of
        the same ranks, e.g. a group of its own for another thread's collectives."""
        other = object.__new__(IdMaps)
        other.__dict__.update(self.__dict__)
        other.ex = ex
        return other

    def _build_shard(self, bounds: np.ndarray) -> np.ndarray:
        """Collective: the new id of every original id in this rank's shard range.

        Rank ``s`` sends rank ``r`` its own original ids inside ``r``'s range (a contiguous run
        of its sorted ids) behind one header word, the run's first row: their new ids are
        ``boundaries[s] + row`` onwards, so they need not travel.
        """
        ex, me, W, o = self.ex, self.ex.rank, self.ex.world_size, self.orig
        cuts = np.searchsorted(o, self.even)
        counts = np.diff(cuts).astype(np.int64) + 1
        buf = np.empty(o.size + W, self.word)
        for r in range(W):
            a, b = int(cuts[r]), int(cuts[r + 1])
            buf[a + r] = a
            buf[a + r + 1:b + r + 1] = o[a:b]
        with peer_errors("building the id map shards"):
            recv, rcounts = ex.exchange(torch.from_numpy(buf), torch.from_numpy(counts), TAG)
        del buf
        got, rcounts = recv.numpy(), rcounts.tolist()
        start, size = int(self.even[me]), int(self.even[me + 1] - self.even[me])
        shard = np.full(size, -1, self.word)
        pos = 0
        for s, c in enumerate(rcounts):
            first = int(bounds[s]) + int(got[pos])
            for a in range(1, int(c), _CHUNK):  # bounded temporaries
                ids = got[pos + a:pos + min(int(c), a + _CHUNK)].astype(np.int64) - start
                shard[ids] = np.arange(first + a - 1, first + a - 1 + ids.size, dtype=self.word)
            pos += int(c)
        err = None
        if pos - W != size or (size and int(shard.min()) < 0):
            err = PartitionError(
                f"the parts' original ids do not cover [{start}, {start + size}) exactly once "
                f"({pos - W} ids received for {size})",
                "original ids could not be translated; no rank samples",
                "re-run `mnmg-sampler partition` and give every rank the same directory")
        raise_if_any(err, ex.group, "building the id map shards")
        return shard

    # -- local ---------------------------------------------------------------------------------
    def rows_of(self, orig_ids: np.ndarray) -> np.ndarray:
        """Local row of each original id this rank owns, ``-1`` for the others (no collective)."""
        orig_ids = np.asarray(orig_ids, np.int64)
        if self.identity or self.o2n is not None:
            new = orig_ids if self.identity else np.asarray(self.o2n[orig_ids], np.int64)
            inside = (new >= self.lo) & (new < self.hi)
            return np.where(inside, new - self.lo, -1)
        o = self.orig
        if o.size == 0:
            return np.full(orig_ids.shape, -1, np.int64)
        pos = np.minimum(np.searchsorted(o, orig_ids), o.size - 1)
        return np.where(o[pos] == orig_ids, pos, -1)

    def owns(self, orig_ids: np.ndarray) -> np.ndarray:
        """bool per original id: does this rank own it (no collective)."""
        return self.rows_of(orig_ids) >= 0

    def owner(self, new_ids: np.ndarray) -> np.ndarray:
        """Owner rank of each new id (int64)."""
        return np.searchsorted(self._inner, new_ids, side="right")

    def to_new_local(self, orig_ids: np.ndarray) -> np.ndarray:
        """New ids of original ids this rank owns (every one of them must be)."""
        orig_ids = np.asarray(orig_ids, np.int64)
        return orig_ids if self.identity else self.lo + self.rows_of(orig_ids)

    # -- collective ----------------------------------------------------------------------------
    def to_new(self, orig_ids: np.ndarray) -> np.ndarray:
        """Collective: new ids of any original ids (each in ``[0, num_nodes)``)."""
        orig_ids = np.asarray(orig_ids, np.int64)
        if self.identity:
            return orig_ids
        if self.o2n is not None:
            return np.asarray(self.o2n[orig_ids], np.int64)
        rows = self.rows_of(orig_ids)
        out = self.lo + rows
        if self.ex.world_size == 1:
            return out
        rest = np.flatnonzero(rows < 0)
        out[rest] = self._lookup(orig_ids[rest], self._even_inner, int(self.even[self.ex.rank]),
                                 self.shard)
        return out

    def to_orig(self, new_ids: np.ndarray, bounds: tuple | None = None) -> np.ndarray:
        """Collective: original ids of any new ids (``bounds``: see :meth:`_lookup`)."""
        new_ids = np.asarray(new_ids, np.int64)
        if self.identity:
            return new_ids
        if self.n2o is not None:
            return np.asarray(self.n2o[new_ids], np.int64)
        if self.ex.world_size == 1:
            return np.asarray(self.orig[new_ids - self.lo], np.int64)
        return self._lookup(new_ids, self._inner, self.lo, self.orig, bounds)

    def to_new_many(self, orig_ids: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Collective: :meth:`to_new` of several arrays in one exchange."""
        return _split(self.to_new(_cat(orig_ids)), orig_ids)

    def to_orig_many(self, new_ids: Sequence[np.ndarray], bounds: tuple | None = None
                     ) -> list[np.ndarray]:
        """Collective: :meth:`to_orig` of several arrays in one exchange. When the ids go to
        their owners (sharded maps), an id in several arrays (the merged requests of a round
        reach many of the same nodes) is asked once."""
        flat = _cat(new_ids)
        if (len(new_ids) > 1 and flat.size and not self.identity and self.n2o is None
                and self.ex.world_size > 1):
            uniq, inv = unique_first(flat)
            if uniq.size < flat.size:
                return _split(self.to_orig(uniq, bounds)[inv], new_ids)
        return _split(self.to_orig(flat, bounds), new_ids)

    def owner_of(self, orig_ids: np.ndarray) -> np.ndarray:
        """Collective (except for ``range``): owner rank of each original id."""
        return self.owner(self.to_new(orig_ids))

    def _lookup(self, keys: np.ndarray, inner: np.ndarray, lo: int, table: np.ndarray,
                bounds: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
        """Collective: ``table[k - lo]`` as known on the rank of ``k``'s bucket of ``inner``,
        for every key. One compiled pass answers this rank's own keys and packs the others by
        rank (a key repeated travels again: cheaper than finding repeats); then counts, keys
        and answers: three collectives. With ``bounds = (send, receive)``, words per rank both
        sides computed beforehand (a count word, then the keys), the keys carry their count and
        the counts need no collective of their own: two."""
        out, send, counts, pos = wire.pack_lookup(keys, inner, self.ex.rank, lo, table,
                                                  self._word0)
        if bounds is None:
            recv, rcounts = self.ex.exchange(torch.from_numpy(send), torch.from_numpy(counts),
                                             TAG)
            ans = wire.answer_lookup(recv.numpy(), lo, table, self._word0)
            rc = rcounts.tolist()
        else:
            me, (sb, rb) = self.ex.rank, bounds
            blocks = with_counts(send, counts, me, self._word0)
            words = counts + 1
            words[me] = 0
            recv = self.ex.bounded(torch.from_numpy(blocks), words, sb, rb, TAG).numpy()
            got, rc = counted_keys(recv, rb)
            ans = wire.answer_lookup(got, lo, table, self._word0)
            rc[me] = 0
        back = self.ex.payload(torch.from_numpy(ans), rc, counts.tolist(), TAG)
        out[pos] = back.numpy()
        return out


def with_counts(keys: np.ndarray, counts: np.ndarray, me: int, like: np.ndarray) -> np.ndarray:
    """The keys of every other rank behind one count word each (rank ``me`` gets nothing)."""
    W = counts.size
    out = np.empty(keys.size + W - 1, like.dtype)
    o = p = 0
    for d in range(W):
        if d == me:
            continue
        c = int(counts[d])
        out[o] = c
        out[o + 1:o + 1 + c] = keys[p:p + c]
        o, p = o + 1 + c, p + c
    return out


def counted_keys(recv: np.ndarray, bounds: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """The keys of every block of ``recv`` (block ``r`` after ``bounds[:r]`` words: a count,
    then that many keys), concatenated, and their count per rank (a bounded exchange's)."""
    parts, counts, p = [], [], 0
    for b in (int(v) for v in bounds):
        c = int(recv[p]) if b > 0 else 0
        if c + 1 > b and b > 0:
            raise RuntimeError(f"a lookup block of {c} keys is longer than its bound {b}")
        parts.append(recv[p + 1:p + 1 + c])
        counts.append(c)
        p += b
    return np.concatenate(parts) if parts else recv[:0], counts


def _can_replicate(part) -> bool:
    """``auto`` on this rank: a graph small enough (:data:`AUTO_REPLICATED_MAX_NODES`) whose
    two global map files this rank can open (a host may hold only its own parts' folders)."""
    if int(part.num_nodes) > AUTO_REPLICATED_MAX_NODES or identity_ids(part):
        return False
    if getattr(part, "path", None) is None or not part.manifest:
        return False
    try:
        return part.orig_to_new is not None and part.new_to_orig is not None
    except (PartitionError, OSError):
        return False


def _agree_on_mode(mode: str, ex: Exchanger, can: bool) -> bool:
    """Collective: every rank uses the same mode (a mix would leave lookups unmatched), and
    ``auto`` replicates only if every rank ``can``; returns that."""
    code = ID_MAP_MODES.index(mode) + 1
    t = torch.tensor([code, -code, 0 if can else 1], dtype=torch.int64,
                     device=backend_device(ex.group))
    with peer_errors("agreeing on the id map mode"):
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=ex.group)
    if int(t[0]) != code or -int(t[1]) != code:
        raise ConfigError(f"the ranks use different id map modes (this rank: {mode})",
                          "ids cannot be translated consistently; no rank samples",
                          "give every rank the same sampler.id_maps")
    return int(t[2]) == 0
