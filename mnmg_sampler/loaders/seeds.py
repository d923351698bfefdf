"""Seed sets read position by position: every node, a random split of the nodes, or given ids.

A loader needs the ids of one batch at a time, never the whole set, so a seed set over all
nodes is a rule, not an array: :class:`AllNodes` (PyG's ``input_nodes=None``) and
:class:`NodeSplit` (a range of a keyed permutation: a random split) hold a few integers whatever
the graph's size. :class:`NodeIds` holds the user's own ids; :class:`NodeBits` a subset of the
nodes as a bitmap (one bit per node).
"""

from __future__ import annotations

import numpy as np

from ..distributed.consistency import fingerprint_array
from ..errors import SamplingInputError
from ..graph.permute import feistel, feistel_keys
from ..sampling.sampler import check_input_nodes

__all__ = ["SeedSet", "AllNodes", "NodeBits", "NodeIds", "NodeSplit", "as_seed_set",
           "check_input_nodes", "random_node_split"]

_SPLIT_SALT = 0x5B117


class SeedSet:
    """``len(s)`` seeds; :meth:`ids` reads them at positions, :meth:`positions_of` back."""

    num_nodes: int

    def __len__(self) -> int:
        raise NotImplementedError

    @property
    def size(self) -> int:
        return len(self)

    def ids(self, pos: np.ndarray) -> np.ndarray:
        """Node ids (int64) at positions ``pos`` (each in ``[0, len(self))``)."""
        raise NotImplementedError

    def positions_of(self, ids: np.ndarray) -> np.ndarray:
        """Position of every node id in the set, ``-1`` for ids not in it."""
        raise NotImplementedError

    def contains(self, ids: np.ndarray) -> np.ndarray:
        """bool per node id: is it a seed."""
        return self.positions_of(ids) >= 0

    def fingerprint(self) -> list[int]:
        """Two int64 words that differ between different seed sets (compared across ranks)."""
        raise NotImplementedError


class AllNodes(SeedSet):
    """Every node of a graph of ``num_nodes`` nodes; position ``i`` is node ``i``."""

    def __init__(self, num_nodes: int) -> None:
        self.num_nodes = int(num_nodes)

    def __len__(self) -> int:
        return self.num_nodes

    def ids(self, pos: np.ndarray) -> np.ndarray:
        return np.asarray(pos, np.int64)

    def positions_of(self, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids, np.int64)
        return np.where((ids >= 0) & (ids < self.num_nodes), ids, -1)

    def fingerprint(self) -> list[int]:
        return fingerprint_array(np.array([1, self.num_nodes], np.int64))

    def __repr__(self) -> str:
        return f"AllNodes({self.num_nodes})"


class NodeSplit(SeedSet):
    """Positions ``start .. stop - 1`` of the permutation of ``[0, num_nodes)`` keyed by ``seed``
    (:func:`~mnmg_sampler.graph.permute.feistel`): splits with one seed and adjacent ranges are
    disjoint, and together cover ``[0, num_nodes)``. Position ``i`` is node
    ``feistel(start + i)``, so the order within the split is the permutation's, not ascending."""

    def __init__(self, num_nodes: int, seed: int, start: int, stop: int) -> None:
        self.num_nodes, self.seed = int(num_nodes), int(seed)
        self.start, self.stop = int(start), int(stop)
        if not 0 <= self.start <= self.stop <= self.num_nodes:
            raise SamplingInputError(
                f"node split [{start}, {stop}) is not within [0, {num_nodes}]",
                "it names positions the graph does not have",
                "build splits with random_node_split(num_nodes, fractions, seed)")
        self._keys = feistel_keys(self.seed, _SPLIT_SALT)

    def __len__(self) -> int:
        return self.stop - self.start

    def ids(self, pos: np.ndarray) -> np.ndarray:
        return feistel(np.asarray(pos, np.int64) + self.start, self.num_nodes, self._keys)

    def positions_of(self, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids, np.int64)
        ok = (ids >= 0) & (ids < self.num_nodes)
        p = feistel(np.where(ok, ids, 0), self.num_nodes, self._keys, inverse=True) - self.start
        return np.where(ok & (p >= 0) & (p < len(self)), p, -1)

    def fingerprint(self) -> list[int]:
        return fingerprint_array(np.array([2, self.num_nodes, self.seed, self.start, self.stop],
                                          np.int64))

    def __repr__(self) -> str:
        return f"NodeSplit({self.num_nodes}, seed={self.seed}, [{self.start}, {self.stop}))"


class NodeIds(SeedSet):
    """Given node ids (distinct, in ``[0, num_nodes)``); position ``i`` is ``array[i]``."""

    def __init__(self, array: np.ndarray, num_nodes: int) -> None:
        self.array = np.asarray(array, np.int64)
        self.num_nodes = int(num_nodes)
        self._order: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.array.size)

    def ids(self, pos: np.ndarray) -> np.ndarray:
        return self.array[pos]

    def positions_of(self, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids, np.int64)
        if self.array.size == 0:
            return np.full(ids.shape, -1, np.int64)
        if self._order is None:
            self._order = np.argsort(self.array, kind="stable")
        srt = self.array[self._order]
        at = np.minimum(np.searchsorted(srt, ids), srt.size - 1)
        return np.where(srt[at] == ids, self._order[at], -1)

    def fingerprint(self) -> list[int]:
        return fingerprint_array(self.array)

    def __repr__(self) -> str:
        return f"NodeIds({self.array.size} of {self.num_nodes})"


def random_node_split(num_nodes: int, fractions, seed: int) -> dict[str, NodeSplit]:
    """A random train/val/test split of ``[0, num_nodes)`` (fractions normalised when they sum
    above 1), the same on every rank, in a few integers: no array of ``num_nodes``."""
    n = int(num_nodes)
    f = np.asarray(fractions, np.float64)
    f = f / f.sum() if f.sum() > 1 else f
    a, b = int(round(f[0] * n)), int(round((f[0] + f[1]) * n))
    c = int(round(min(1.0, f.sum()) * n))
    return {k: NodeSplit(n, seed, lo, hi)
            for k, lo, hi in (("train", 0, a), ("val", a, b), ("test", b, c))}


def as_seed_set(input_nodes, num_nodes: int, node_ids: np.ndarray | None = None) -> SeedSet:
    """A loader's ``input_nodes`` as a :class:`SeedSet`: ``None`` is :class:`AllNodes`, a seed
    set is taken as is (for a graph of ``num_nodes`` nodes), anything else is checked by
    :func:`check_input_nodes` into :class:`NodeIds` (ids in the input's own ids when the graph
    was renumbered: ``node_ids``)."""
    if input_nodes is None:
        return AllNodes(num_nodes)
    if isinstance(input_nodes, SeedSet):
        if input_nodes.num_nodes != int(num_nodes):
            raise SamplingInputError(
                f"input_nodes is {input_nodes!r}, made for {input_nodes.num_nodes} nodes, but "
                f"the graph has {num_nodes}", "its positions do not name this graph's nodes",
                f"make the seed set with num_nodes={num_nodes}")
        return input_nodes
    return NodeIds(check_input_nodes(input_nodes, num_nodes, node_ids=node_ids), num_nodes)


class NodeBits(SeedSet):
    """The nodes whose bit is set in a bitmap (:mod:`mnmg_sampler.graph.node_bits`), ascending:
    position ``i`` is the ``i``-th such node. It holds one bit per node and a count per 64 nodes
    (``num_nodes / 4`` bytes, 1/32 of an int64 array of ``num_nodes``); reading a batch costs
    ``O(batch)`` (a binary search over the counts, then the bits of one word per seed).

    ``mnmg-sampler sample`` draws its seeds from :meth:`nonisolated` (nodes with a neighbor)."""

    def __init__(self, words: np.ndarray, num_nodes: int) -> None:
        self.num_nodes = int(num_nodes)
        self.words = np.ascontiguousarray(words, "<u8")
        self._cum = np.zeros(self.words.size + 1, np.int64)  # set bits before each word
        np.cumsum(np.bitwise_count(self.words), out=self._cum[1:])

    @classmethod
    def nonisolated(cls, graph) -> NodeBits:
        """The nodes of a :class:`~mnmg_sampler.graph.csr.CSRGraph` with at least one neighbor
        (``graph.degrees() >= 1``), built a chunk of rows at a time."""
        from ..graph.node_bits import nonisolated_bits

        return cls(nonisolated_bits(graph.indptr, graph.num_nodes), graph.num_nodes)

    def __len__(self) -> int:
        return int(self._cum[-1])

    def ids(self, pos: np.ndarray) -> np.ndarray:
        pos = np.asarray(pos, np.int64)
        w = np.searchsorted(self._cum, pos, side="right") - 1  # the word holding each seed
        r = pos - self._cum[w]  # its rank among the word's set bits
        # the byte holding it, then the bit (8 bytes per seed, never 64)
        by = self.words[w].view(np.uint8).reshape(-1, 8)
        upto = np.cumsum(np.bitwise_count(by), axis=1, dtype=np.uint8)
        k = np.argmax(upto > r[:, None], axis=1)
        rows = np.arange(k.size)
        r = r - (upto[rows, k] - np.bitwise_count(by[rows, k]))
        bits = np.unpackbits(by[rows, k][:, None], axis=1, bitorder="little")
        j = np.argmax(np.cumsum(bits, axis=1, dtype=np.uint8) > r[:, None], axis=1)
        return (w * 64 + k * 8 + j).astype(np.int64).reshape(pos.shape)

    def positions_of(self, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids, np.int64)
        ok = (ids >= 0) & (ids < self.num_nodes)
        safe = np.where(ok, ids, 0)
        word = self.words[safe >> 6]
        b = (safe & 63).astype(np.uint64)
        one = np.uint64(1)
        is_set = ((word >> b) & one).astype(bool)
        below = np.bitwise_count(word & ((one << b) - one)).astype(np.int64)
        return np.where(ok & is_set, self._cum[safe >> 6] + below, -1)

    def fingerprint(self) -> list[int]:
        a, b = fingerprint_array(self.words.view(np.int64))
        return [a ^ self.num_nodes, b]

    def __repr__(self) -> str:
        return f"NodeBits({len(self)} of {self.num_nodes})"
