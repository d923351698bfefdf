"""Negative destinations for link prediction, from the counter-based RNG, and edge membership.

A negative of positive edge ``i`` (its position in ``edge_label_index``) keeps the positive's
source and draws a destination uniformly; draw ``d`` of attempt ``t`` is slot ``t * amount + d``
of stream ``(seed, key, NEG_HOP, i)``, so negatives do not depend on world size, partitioning or
merging (docs/link.md#negative-sampling-mnmg_sampleropsnegative-called-by-mnmg_samplersamplinglink).
With rejection, a known edge (a callable: :func:`csr_has_edges` in one process, an exchange in a
distributed loader) is replaced by the next attempt's draw of the same ``(i, d)``. With node
time, the draw is uniform among the :class:`AdmissibleNodes` no later than the positive
(docs/temporal.md#link-prediction-over-time).
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
        reject_known: redraw a negative that is an edge of the graph (asked of its owner).
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
    one = num_nodes.shape[0] == 1
    for i in range(pos_index.shape[0]):
        base = _stream_base(seed, key, hop, pos_index[i])
        out[i] = _bounded(_draw(base, slot[i]), num_nodes[0] if one else num_nodes[i])


def negative_candidates(seed: int, key: int, pos_index: np.ndarray, slot: np.ndarray,
                        num_nodes, hop: int = NEG_HOP) -> np.ndarray:
    """Destination draw number ``slot[j]`` of positive ``pos_index[j]``: int64 in
    ``[0, num_nodes)`` (``num_nodes``: one count, or one per draw; ``hop``: the stream's hop
    counter, :data:`NEG_HOP` or :data:`NEG_SRC_HOP`)."""
    pos_index = np.ascontiguousarray(pos_index, np.int64)
    n = np.ascontiguousarray(np.asarray(num_nodes, np.int64).reshape(-1))
    if n.size and not (0 < int(n.min()) and int(n.max()) < 2**32):
        bad = int(n.min()) if int(n.min()) <= 0 else int(n.max())
        raise SamplingInputError(f"{bad} nodes cannot be drawn from",
                                 "negatives are uniform over [0, num_nodes) with a 32-bit draw",
                                 "use a graph with 1 <= num_nodes < 2**32")
    out = np.empty(pos_index.size, np.int64)
    if n.size not in (1, pos_index.size):
        raise ValueError(f"{n.size} node counts for {pos_index.size} draws")
    if pos_index.size:
        _candidates(np.uint64(seed), np.uint64(key), np.uint64(hop), pos_index,
                    np.ascontiguousarray(slot, np.int64).astype(np.uint64), n.astype(np.uint64),
                    out)
    return out


@dataclass(frozen=True)
class AdmissibleNodes:
    """The nodes of one type in (node time, id) order: those with time <= ``t`` are
    ``order[:count(t)]`` (negatives of a positive at time ``t`` are drawn among them)."""

    order: np.ndarray  # int64 per-type ids, by time then id
    times: np.ndarray  # int64 node times in that order (ascending)

    @classmethod
    def of(cls, node_time: np.ndarray) -> AdmissibleNodes:
        """From the node time of every node of the type (per-type id order)."""
        t = np.ascontiguousarray(node_time, np.int64)
        order = np.argsort(t, kind="stable")  # ties: ascending id
        return cls(order.astype(np.int64), np.ascontiguousarray(t[order]))

    def count(self, t: np.ndarray) -> np.ndarray:
        """How many nodes have time <= ``t`` (elementwise)."""
        return np.searchsorted(self.times, np.asarray(t, np.int64), side="right").astype(
            np.int64)

    def check(self, t: np.ndarray, what: str) -> None:
        """:class:`SamplingInputError` unless every time in ``t`` (of seed edge ``i`` at
        ``t[i]``) admits a node; ``what`` names the node type."""
        t = np.asarray(t, np.int64)
        if t.size and (not self.times.size or int(t.min()) < int(self.times[0])):
            first = int(self.times[0]) if self.times.size else None
            i = int(np.argmin(t))
            raise SamplingInputError(
                f"seed edge {i} has time {int(t[i])}, before every {what} node's time "
                f"(the earliest is {first})", "no negative can be drawn for it: a negative's "
                "node time must be <= its positive's time (PyG's rule)",
                "drop the seed edges earlier than every node, or check edge_label_time")


def sample_negatives(src: np.ndarray, pos_index: np.ndarray, *, seed: int, key: int,
                     amount: int, num_nodes: int, known: KnownFn | None = None,
                     more: Callable[[bool], bool] | None = None,
                     max_attempts: int = 64, hop: int = NEG_HOP,
                     draw_src: np.ndarray | None = None,
                     admissible: AdmissibleNodes | None = None,
                     time: np.ndarray | None = None) -> np.ndarray:
    """Negative destinations ``[P, amount]`` for positives ``src`` at ``pos_index``.

    Args:
        known: membership test; ``None`` keeps every draw (no rejection).
        more: ``more(this_rank_has_pending) -> any rank has pending`` (``None`` in one
            process); each attempt calls ``known`` once on every rank, even with nothing to
            test, so collective membership tests stay in step.
        max_attempts: rejected draws per negative before :class:`SamplingInputError` (raised
            on every rank together, as the attempt count is agreed).
        hop: the stream's hop counter (:data:`NEG_SRC_HOP` draws a typed graph's random
            sources of binary negatives).
        draw_src: ``[P, amount]`` source of each draw for ``known`` (a typed graph's binary
            negatives, whose sources are drawn too); default the positive's ``src``.
        admissible, time: with node time, the drawn type's nodes in time order and each
            positive's time ``[P]`` (every positive must admit one node, see
            :meth:`AdmissibleNodes.check`).
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
    n_of = num_nodes
    if admissible is not None:
        admissible.check(time, "candidate")
        n_of = np.repeat(admissible.count(time), amount)
    attempt = 0
    while True:
        slot = attempt * amount + flat_draw[pend]
        if admissible is None:
            cand = negative_candidates(seed, key, flat_pos[pend], slot, n_of, hop)
        else:
            cand = admissible.order[negative_candidates(seed, key, flat_pos[pend], slot,
                                                        n_of[pend], hop)]
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
