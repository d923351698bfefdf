"""Weighted (biased) neighbor sampling: probability proportional to a float32 weight per CSR entry.

The calling convention and determinism of :func:`mnmg_sampler.ops.cpu.sample_neighbors` (every
draw a pure function of ``(seed, key, hop, node, slot)``), plus a ``weights`` array. Behaviour:
docs/weighted.md; draws and slots: docs/rng.md#weighted-draws-weighted_positions.

The arithmetic is float64 additions of float32 weights in CSR order, one multiplication ``u *
total`` and comparisons: no ``log`` or ``pow`` (their last bit differs between libm and the GPU's
libdevice) and no multiply-add a compiler could fuse, so CPU and CUDA results are bit-identical.
:func:`check_weights` rejects negative, NaN or infinite weights when they are loaded; the kernels
do not raise, they treat such weights as zero (``cpu.usable``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..graph.csr import check_weights  # validation lives with the CSR (graph layer)
from . import cpu, typed
from .cpu import (  # noqa: F401  the draws, compiled for the CPU; their sources for ops.cuda
    DEVICE_FUNCTIONS,
    REBUILD_AFTER,
    W_MAX,
    compile_helpers,
    draws_needed,
    usable,
    weighted_positions,
)

__all__ = ["check_weights", "sample_neighbors_weighted", "local_weighted_hop_fn",
           "REBUILD_AFTER", "DEVICE_FUNCTIONS"]

_ONE_RELATION = (np.array([0, 1], np.int64), np.zeros(1, np.int64), np.ones(1, np.uint8))


def sample_neighbors_weighted(
    indptr: np.ndarray,
    indices: np.ndarray,
    eids: np.ndarray | None,
    weights: np.ndarray,
    rows: np.ndarray,
    nodes: np.ndarray,
    keys: np.ndarray,
    seed: int,
    hop: int,
    fanout: int | np.ndarray,
    replace: bool | np.ndarray,
    *,
    with_eids: bool = True,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sample one hop for every ``rows[i]`` with probability proportional to edge weight.

    Arguments and results as :func:`mnmg_sampler.ops.cpu.sample_neighbors`, plus ``weights``
    (float32 per CSR entry, validated by :func:`check_weights`); counts: see
    docs/weighted.md#behaviour. Cost is O(degree) per node (its weights are read), against
    O(fanout) for the uniform kernel. It is the typed kernel
    (:func:`~mnmg_sampler.ops.typed.sample_relations`) on one weighted relation.
    """
    weights = np.ascontiguousarray(weights, dtype=np.float32)
    rows, nodes, keys, fanouts, repl = cpu._per_node(rows, nodes, keys, fanout, replace)
    rel_off, seg_base, wflag = _ONE_RELATION
    node_off = np.array([0, indptr.shape[0] - 1], np.int64)
    c, nbr, _, eid = typed.sample_relations(
        node_off, rel_off, seg_base, indptr, indices, cpu._EMPTY if eids is None else eids,
        weights, wflag, rows, nodes, keys, np.arange(rows.shape[0], dtype=np.int64),
        fanouts[:, None], repl, seed, hop, with_eids=with_eids)
    return c, nbr, eid


def local_weighted_hop_fn(graph, weights, seed: int) -> Callable:
    """The weighted hop function of a whole graph in this process (``sampler.local_hop_fn``'s twin).

    ``weights`` (one per CSR entry) are validated here. ``hop_fn(segments)`` returns ``(counts,
    neighbors, edge ids or None)``, so ``MultiHopSampler(local_weighted_hop_fn(g, w, seed),
    g.num_nodes)`` samples by weight.
    """
    w = check_weights(weights, graph.num_edges)
    if not (int(seed) == seed and 0 <= int(seed) < 2**63):
        from ..errors import SamplingInputError

        raise SamplingInputError(f"seed {seed!r} is not an integer in [0, 2**63)",
                                 "the counter-based RNG is keyed on a 63-bit seed",
                                 "pass a non-negative integer seed")
    seed = int(seed)

    def hop_fn(h):
        keys, fanouts, replace = h.per_node()
        c, nb, e = sample_neighbors_weighted(graph.indptr, graph.indices, graph.edge_ids, w,
                                             h.nodes, h.nodes, keys, seed, h.hop, fanouts,
                                             replace, with_eids=h.edge_ids)
        return c, nb, (e if h.edge_ids else None)

    return hop_fn
