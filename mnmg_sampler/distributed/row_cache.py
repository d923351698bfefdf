"""Which other hosts' feature rows a host caches: the rows whose cache saves most fetches.

SALIENT++ caches the remote rows of highest inclusion probability; here it is computed, not
sampled, and a row is worth ``p (1 - p)`` for a round's probability ``p`` of touching it: a
round reads the last round's rows again without fetching them (:mod:`.features`). With seeds
drawn uniformly (a loader's global split of every node, the default) a node is a seed of a
request of ``B`` seeds with probability ``B / N``; a node ``u`` of hop ``h``'s
frontier samples each neighbor with probability ``min(1, f_h / deg(u))``, so ``v`` enters hop
``h + 1`` with probability ``1 - prod_u (1 - p_h(u) min(1, f_h / deg(u)))`` over its in-neighbors
``u`` (taken as independent), and a round touches ``v`` unless it misses every hop. Each rank adds
its own nodes' terms (as logarithms, one ``bincount`` over its part's edges) and one all-reduce
per hop sums them: ``hops`` collectives of ``num_nodes`` float64 at start, the same on every
run. Edge weights and time are ignored (uniform draws assumed): only the cache choice, never a
result, depends on it. Without the fanouts, or when the estimate's arrays do not fit in memory
(agreed by every rank), the fallback is the degree into the host
(docs/loader.md#host-groups-ranks-on-several-hosts).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import torch
import torch.distributed as dist

from ..system.host_limits import available_bytes
from .collective import Exchanger, peer_errors

log = logging.getLogger(__name__)

__all__ = ["CachePlan", "choose_rows", "inclusion_scores"]


class CachePlan:
    """What the sampler will be asked: the fanouts, a request's seeds, and the requests a round
    merges (a loader's refill, :func:`~mnmg_sampler.loaders.epoch_cursor.refill`: 4 for the
    default ``prefetch`` of 8)."""

    def __init__(self, fanouts: Sequence[int], batch_size: int = 1024,
                 per_round: int = 4) -> None:
        self.fanouts = [int(f) for f in fanouts]
        self.batch_size = max(int(batch_size), 1)
        self.per_round = max(int(per_round), 1)


def _estimate_bytes(part) -> int:
    """Working set of :func:`inclusion_scores` on this rank: five ``num_nodes`` 8-byte
    vectors and one float64 per edge of the part."""
    return 8 * (5 * int(part.num_nodes) + int(np.asarray(part.indices).shape[0]) + 1)


def inclusion_scores(part, ex: Exchanger, plan: CachePlan) -> np.ndarray:
    """Collective (one all-reduce per hop): per node of the graph, ``log`` of the probability
    that a round of ``plan`` misses it (lower = touched more often); identical on every rank
    up to the all-reduce's summation order."""
    N = int(part.num_nodes)
    indptr = np.asarray(part.indptr, np.int64)
    indices = np.asarray(part.indices)
    deg = np.diff(indptr).astype(np.float64)
    lo = int(np.asarray(part.boundaries, np.int64)[part.rank])
    p = np.full(N, min(1.0, plan.batch_size / max(N, 1)))  # seeds: uniform over the nodes
    missed = np.log1p(-np.minimum(p, 1 - 1e-12))
    for f in plan.fanouts:
        q = np.ones_like(deg) if f < 0 else np.minimum(1.0, f / np.maximum(deg, 1.0))
        own = p[lo:lo + deg.size] * q
        w = np.log1p(-np.minimum(own, 1 - 1e-12))
        # sum over in-neighbours u of log(1 - p(u) q(u)): each rank adds its own nodes' edges
        t = torch.from_numpy(np.bincount(indices, weights=np.repeat(w, indptr[1:] - indptr[:-1]),
                                         minlength=N))
        if ex.world_size > 1:  # on the backend's device (NCCL reduces CUDA tensors only)
            t = t.to(ex.device)
            with peer_errors("summing the feature cache's inclusion estimate"):
                dist.all_reduce(t, op=dist.ReduceOp.SUM, group=ex.group)
            t = t.cpu()
        logp = t.numpy()
        missed += logp
        p = -np.expm1(logp)  # P(in the next frontier)
    return missed


def _degree_counts(part, far) -> tuple[np.ndarray, np.ndarray]:
    """Candidates (ids passing ``far``) and minus their edge count from this rank's part."""
    idx = np.asarray(part.indices)
    cand, freq = np.unique(idx[far(idx)], return_counts=True)
    return cand, -freq.astype(np.float64)


def choose_rows(part, ex: Exchanger, far, share: int, plan: CachePlan | None
                ) -> tuple[np.ndarray, str]:
    """Collective when ``plan`` is given: the sorted ids of the ``share`` nodes passing
    ``far`` (a bool mask of ids: another host's, and this rank's slice of the host's cache)
    that rounds touch most, and how they were chosen (``inclusion`` or ``degree``)."""
    how = "degree"
    if plan is not None and plan.fanouts:
        fits = _estimate_bytes(part) <= 0.5 * available_bytes()
        with peer_errors("agreeing on the feature cache's estimate"):
            fits = ex.agree_max([0 if fits else 1])[0] == 0 if ex.world_size > 1 else fits
        if fits:
            how = "inclusion"
        elif ex.rank == 0:
            log.info("feature cache: the inclusion estimate of %d nodes does not fit in memory; "
                     "rows chosen by degree", int(part.num_nodes))
    if how == "inclusion":
        missed = inclusion_scores(part, ex, plan)
        cand = np.flatnonzero(far(np.arange(missed.size, dtype=np.int64)))
        # a round reads a row of the last round's again without a fetch (features.py), so a
        # cached row saves a fetch when a round needs it and the last round did not:
        # p (1 - p) for a round's probability p (rows every round needs cost one fetch anyway)
        p = -np.expm1(plan.per_round * missed[cand])
        cand, p = cand[p > 0], p[p > 0]  # never touched: not worth a row
        score = -(p * (1 - p))
    else:
        cand, score = _degree_counts(part, far)
    if cand.size > share:
        # lowest score first (most touched), ties by id: the same choice on every run
        order = np.lexsort((cand, score))[:share]
        cand = cand[order]
    return np.sort(cand.astype(np.int64)), how
