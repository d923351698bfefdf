"""Negative destinations for link prediction, from the counter-based RNG, and edge membership.

A negative of positive edge ``i`` (its position in the loader's ``edge_label_index``) keeps the
positive's source and draws a destination uniformly from ``[0, num_nodes)``. Draw ``d`` of
attempt ``t`` is ``bounded(draw(stream_base(seed, key, NEG_HOP, i), t * amount + d), num_nodes)``
where ``key`` is the request key of the global batch: a pure function of
``(seed, epoch, batch, positive index, draw, attempt)``, so the negatives do not depend on world
size, partitioning or merging. With rejection, a candidate that is a known edge is replaced by
the next attempt's draw of the same ``(i, d)``; the membership test is a callable, so a single
process passes :func:`csr_has_edges` and a distributed loader an exchange to the owner ranks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numba
import numpy as np

from ..errors import SamplingInputError
from . import rng

_rng = rng.compile_rng(numba.njit(nogil=True, inline="always"))
_stream_base = _rng["stream_base"]
_draw = _rng["draw"]
_bounded = _rng["bounded"]

NEG_HOP = 0xFFFF_FFFF
"""The RNG's hop counter for negative draws: no neighbor-sampling hop uses it."""

NEG_SRC_HOP = 0xFFFF_FFFE
"""The hop counter for the random *sources* of binary negatives on typed graphs (PyG draws
both endpoints there); no neighbor-sampling hop uses it either."""

MODES = ("binary", "triplet")

KnownFn = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""``known(src, dst) -> bool array``: which ``src -> dst`` pairs are edges of the graph."""


@dataclass(frozen=True)
class NegativeSampling:
    """How negatives are drawn (PyG's ``NegativeSampling`` plus ``reject_known``).

    Attributes:
        mode: ``binary`` (negatives become extra rows of ``edge_label_index`` with label 0) or
            ``triplet`` (``dst_neg_index`` beside ``src_index`` / ``dst_pos_index``).
        amount: negatives per positive edge (a positive integer).
        reject_known: redraw a negative that is an edge of the graph (checked by the rank owning
            its destination), so no negative is a known edge.
        max_attempts: draws per negative before giving up with a :class:`SamplingInputError`
            (only reachable when a source links to almost every node).
    """

    mode: str = "binary"
    amount: int = 1
    reject_known: bool = False
    max_attempts: int = 64

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise SamplingInputError(f"negative sampling mode {self.mode!r} is unknown",
                                     "no negatives can be drawn", f"use one of {MODES}")
        a = self.amount
        if isinstance(a, bool) or not float(a).is_integer() or int(a) < 1:
            raise SamplingInputError(f"negative sampling amount {a!r} is not a positive integer",
                                     "each positive edge draws that many negatives",
                                     "pass amount=1, 2, ...")
        object.__setattr__(self, "amount", int(a))
        if int(self.max_attempts) < 1:
            raise SamplingInputError(f"max_attempts {self.max_attempts!r} is below 1",
                                     "no negative could be drawn", "pass max_attempts >= 1")

    @classmethod
    def cast(cls, value) -> NegativeSampling | None:
        """``None``, a mode string, a dict of fields, or an instance -> instance (or ``None``)."""
        if value is None or isinstance(value, cls):
            return value
        if isinstance(value, str):
            return cls(value)
        if isinstance(value, dict):
            return cls(**value)
        raise SamplingInputError(f"neg_sampling {value!r} is not understood", "",
                                 "pass 'binary', 'triplet', a dict or a NegativeSampling")


@numba.njit(cache=True, nogil=True)
def _candidates(seed, key, hop, pos_index, slot, num_nodes, out):
    for i in range(pos_index.shape[0]):
        base = _stream_base(seed, key, hop, pos_index[i])
        out[i] = _bounded(_draw(base, slot[i]), num_nodes)


def negative_candidates(seed: int, key: int, pos_index: np.ndarray, slot: np.ndarray,
                        num_nodes: int, hop: int = NEG_HOP) -> np.ndarray:
    """Destination draw number ``slot[j]`` of positive ``pos_index[j]``: int64 in
    ``[0, num_nodes)`` (``hop``: the stream's hop counter, :data:`NEG_HOP` or
    :data:`NEG_SRC_HOP`)."""
    if not 0 < int(num_nodes) < 2**32:
        raise SamplingInputError(f"{num_nodes} nodes cannot be drawn from",
                                 "negatives are uniform over [0, num_nodes) with a 32-bit draw",
                                 "use a graph with 1 <= num_nodes < 2**32")
    pos_index = np.ascontiguousarray(pos_index, np.int64)
    out = np.empty(pos_index.size, np.int64)
    _candidates(np.uint64(seed), np.uint64(key), np.uint64(hop), pos_index,
                np.ascontiguousarray(slot, np.int64).astype(np.uint64), np.uint64(num_nodes), out)
    return out


def sample_negatives(src: np.ndarray, pos_index: np.ndarray, *, seed: int, key: int,
                     amount: int, num_nodes: int, known: KnownFn | None = None,
                     more: Callable[[bool], bool] | None = None,
                     max_attempts: int = 64, hop: int = NEG_HOP,
                     draw_src: np.ndarray | None = None) -> np.ndarray:
    """Negative destinations ``[P, amount]`` for positives with sources ``src`` at positions
    ``pos_index``.

    Args:
        known: membership test; ``None`` keeps every draw (no rejection).
        more: distributed agreement ``more(this_rank_has_pending) -> any rank has pending``; each
            attempt calls ``known`` once on every rank (with nothing to test when a rank is
            done), so collective membership tests stay in step. ``None`` in one process.
        max_attempts: rejected draws per negative before :class:`SamplingInputError` (raised
            on every rank together, as the attempt count is agreed).
        hop: the stream's hop counter (:data:`NEG_SRC_HOP` draws a typed graph's random
            sources of binary negatives).
        draw_src: ``[P, amount]`` source of each draw for ``known`` (a typed graph's binary
            negatives, whose sources are drawn too); default the positive's ``src``.
    """
    src = np.ascontiguousarray(src, np.int64)
    pos_index = np.ascontiguousarray(pos_index, np.int64)
    total = src.size * amount
    flat_pos = np.repeat(pos_index, amount)
    flat_src = np.repeat(src, amount) if draw_src is None else \
        np.ascontiguousarray(draw_src, np.int64).ravel()
    flat_draw = np.tile(np.arange(amount, dtype=np.int64), src.size)
    out = np.empty(total, np.int64)
    pend = np.arange(total, dtype=np.int64)
    attempt = 0
    while True:
        cand = negative_candidates(seed, key, flat_pos[pend], attempt * amount + flat_draw[pend],
                                   num_nodes, hop)
        if known is None:
            out[pend] = cand
            break
        bad = np.asarray(known(flat_src[pend], cand), bool)
        out[pend[~bad]] = cand[~bad]
        pend = pend[bad]
        attempt += 1
        go_on = bool(pend.size) if more is None else more(bool(pend.size))
        if not go_on:
            break
        if attempt >= max_attempts:
            raise SamplingInputError(
                f"a negative was a known edge in {max_attempts} draws in a row",
                "some source links to almost every node, so no negative can be found for it",
                "raise max_attempts, or turn reject_known off for this graph")
    return out.reshape(src.size, amount)


@numba.njit(cache=True, nogil=True)
def _has_edges(indptr, indices, rows, nbrs, out):
    for i in range(rows.shape[0]):
        r = rows[i]
        v = nbrs[i]
        found = 0
        for p in range(indptr[r], indptr[r + 1]):
            if indices[p] == v:
                found = 1
                break
        out[i] = found


def csr_has_edges(indptr: np.ndarray, indices: np.ndarray, rows: np.ndarray,
                  nbrs: np.ndarray) -> np.ndarray:
    """Whether ``nbrs[i]`` is among the entries of CSR row ``rows[i]`` (a scan of the row).

    For the in-edge CSR of :class:`~mnmg_sampler.graph.csr.CSRGraph` that is "is
    ``nbrs[i] -> rows[i]`` an edge".
    """
    rows = np.ascontiguousarray(rows, np.int64)
    out = np.empty(rows.size, np.uint8)
    _has_edges(indptr, indices, rows, np.ascontiguousarray(nbrs, np.int64), out)
    return out.astype(bool)


def typed_has_edges(graph, relation: int, rows: np.ndarray, nbrs: np.ndarray) -> np.ndarray:
    """Whether ``nbrs[i] -> rows[i]`` is an edge of relation ``relation`` of a
    :class:`~mnmg_sampler.graph.typed.TypedGraph` (``rows`` in the graph's row space, of the
    relation's destination type: internal ids of a whole graph, local rows of a part): a scan
    of the row's segment of that relation."""
    t = int(graph.rel_dst[relation])
    lo, hi = int(graph.rel_offset[t]), int(graph.rel_offset[t + 1])
    rows = np.ascontiguousarray(rows, np.int64)
    segs = graph.seg_base[t] + (rows - graph.node_type_offset[t]) * (hi - lo) + (relation - lo)
    return csr_has_edges(graph.indptr, graph.indices, segs, nbrs)
