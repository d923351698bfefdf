"""Topology cache: other ranks' adjacency rows kept on this rank, so their hops stay off the wire.

With a locality-aware partitioning, the remote nodes a rank's frontiers reach most are those
with most of their neighbors inside its part. At construction each rank scores every remote
node its part's rows point to by ``(edges from this part to it) / its degree``, keeps the best
within a budget of ``fraction x this part's edges`` (greedy by score, ties by id) and fetches
their full CSR rows from the owners: neighbor ids (new numbering), edge ids, original ids and,
when the partition is weighted, the weights, in the owner's canonical order. A frontier node
in the cache is then sampled here by one more kernel call per hop on the cache's small CSR;
only the others enter the exchange. The RNG is keyed on original ids and the rows keep their
order, so every minibatch is bit-identical to sampling without the cache: it changes traffic
and time, never results.

The build is collective (two exchanges of ids and answers, one of rows, one of weights if
any) and allocates nothing sized by the graph's node count: the candidates are the distinct
remote neighbors of this part (at most its edge count). Each rank's cache is its own: ranks may
use different fractions, including 0 (such a rank only answers the others).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numba
import numpy as np
import torch

from ..errors import ConfigError
from ..sampler import HopSegments
from .collective import Exchanger, peer_errors

__all__ = ["TAG", "TopologyCache", "check_fraction", "interleave"]

TAG = "topology_cache"
"""Traffic class of the cache's build in :attr:`Exchanger.bytes` (never ``ids``)."""

_I64 = np.int64


def check_fraction(value) -> float:
    """``sampler.topology_cache`` as a float, or a :class:`ConfigError` (no collective)."""
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_))
    if not ok or not math.isfinite(float(value)) or float(value) < 0:
        raise ConfigError(
            f"sampler.topology_cache must be a finite number >= 0 (a fraction of this rank's "
            f"part edges), got {value!r}", "no rank builds its sampler",
            "pass e.g. 0.2 (cache rows of up to 20% of the part's edges), or 0 for no cache")
    return float(value)


@numba.njit(cache=True, nogil=True)
def _greedy(deg, budget):
    """Take items in order while their degrees fit in ``budget`` (skipping those that do not)."""
    take = np.zeros(deg.shape[0], np.bool_)
    used = 0
    for i in range(deg.shape[0]):
        if used + deg[i] <= budget:
            take[i] = True
            used += deg[i]
    return take


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing: 2**64 / golden ratio


@numba.njit(cache=True, nogil=True)
def _table(ids):
    """Open-addressing hash table of the positions of ``ids`` (int32, -1 = empty, load <= 1/2)
    and its shift: a lookup costs a multiplication and a probe or two, where a binary search
    of the ids cost a dozen unpredictable branches per frontier node."""
    bits = 1
    while (1 << bits) < 2 * ids.shape[0]:
        bits += 1
    cap = 1 << bits
    shift = np.uint64(64 - bits)
    slots = np.full(cap, -1, np.int32)
    for i in range(ids.shape[0]):
        h = np.int64((np.uint64(ids[i]) * _GOLDEN) >> shift)
        while slots[h] != -1:
            h = (h + 1) & (cap - 1)
        slots[h] = i
    return slots, shift


@numba.njit(cache=True, nogil=True)
def _split(ids, slots, shift, own_lo, own_hi, orig_ids, nodes, sizes, keys, fanouts, replace):
    """One pass over a hop's frontier: which nodes are cached (this rank's own nodes
    ``[own_lo, own_hi)`` never are), the others with their count per request, and the cached
    ones' kernel inputs (cache rows, original ids, key, fanout, replace).

    Returns ``(hits, hit, miss_nodes, miss_sizes, rows, rng_nodes, keys, fanouts, replace)``.
    """
    n = nodes.shape[0]
    S = sizes.shape[0]
    mask = slots.shape[0] - 1
    hit = np.zeros(n, np.uint8)
    miss = np.empty(n, np.int64)
    miss_sizes = np.zeros(S, np.int64)
    rows = np.empty(n, np.int64)
    rng = np.empty(n, np.int64)
    hk = np.empty(n, np.int64)
    hf = np.empty(n, np.int64)
    hr = np.empty(n, np.uint8)
    a = b = i = 0
    for s in range(S):
        for _ in range(sizes[s]):
            v = nodes[i]
            p = -1
            if not (own_lo <= v < own_hi):
                h = np.int64((np.uint64(v) * _GOLDEN) >> shift)
                while slots[h] != -1:
                    if ids[slots[h]] == v:
                        p = np.int64(slots[h])
                        break
                    h = (h + 1) & mask
            if p >= 0:
                hit[i] = 1
                rows[b] = p
                rng[b] = orig_ids[p]
                hk[b] = keys[s]
                hf[b] = fanouts[s]
                hr[b] = 1 if replace[s] else 0
                b += 1
            else:
                miss[a] = v
                miss_sizes[s] += 1
                a += 1
            i += 1
    return b, hit, miss[:a], miss_sizes, rows[:b], rng[:b], hk[:b], hf[:b], hr[:b]


@numba.njit(cache=True, nogil=True)
def _interleave(hit, c_miss, nb_miss, e_miss, c_hit, nb_hit, e_hit, with_e):
    """Counts, neighbors and edge ids in frontier order from the misses' and the hits' results
    (each in frontier order among themselves)."""
    n = hit.shape[0]
    total = nb_miss.shape[0] + nb_hit.shape[0]
    out_c = np.empty(n, np.int64)
    out_n = np.empty(total, np.int64)
    out_e = np.empty(total if with_e else 0, np.int64)
    a = b = pa = pb = o = 0
    for i in range(n):
        if hit[i]:
            c = c_hit[b]
            b += 1
            _put_list(out_n, out_e, o, nb_hit, e_hit, pb, c, with_e)
            pb += c
        else:
            c = c_miss[a]
            a += 1
            _put_list(out_n, out_e, o, nb_miss, e_miss, pa, c, with_e)
            pa += c
        out_c[i] = c
        o += c
    return out_c, out_n, out_e


def interleave(hit: np.ndarray, miss: tuple, hits: tuple, with_e: bool) -> tuple:
    """``(counts, neighbors, edge ids or None)`` in frontier order from the results
    ``(counts, neighbors, edge ids)`` of the frontier's misses and of its hits (``hit[i]``:
    node ``i`` is a hit), each in frontier order among themselves."""
    empty = np.empty(0, _I64)

    def arrays(c, nb, e):
        return (np.asarray(c, _I64), np.asarray(nb, _I64),
                np.asarray(e, _I64) if with_e and e is not None else empty)

    c, nb, e = _interleave(hit, *arrays(*miss), *arrays(*hits), with_e)
    return c, nb, (e if with_e else None)


@numba.njit(cache=True, nogil=True, inline="always")
def _put_list(out_n, out_e, o, nb, e, p, c, with_e):
    """Copy one node's ``c`` neighbors (and edge ids) from position ``p`` to ``o``."""
    for j in range(c):
        out_n[o + j] = nb[p + j]
    if with_e:
        for j in range(c):
            out_e[o + j] = e[p + j]


def _row_positions(indptr: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Flat CSR positions of ``rows``' entries, row after row."""
    starts = np.asarray(indptr[rows], _I64)
    deg = np.asarray(indptr[rows + 1], _I64) - starts
    if deg.size == 0:
        return np.empty(0, _I64)
    first = np.cumsum(deg) - deg
    return np.repeat(starts - first, deg) + np.arange(int(deg.sum()), dtype=_I64)


class TopologyCache:
    """This rank's copy of the CSR rows of chosen remote nodes (see the module docstring).

    Construction is collective over ``ex``'s group when it has more than one rank; every rank
    must construct one (with any fraction, 0 included) at the same point.

    Attributes:
        ids: sorted new ids of the cached nodes.
        indptr, indices, edge_ids, orig_ids, weights: their CSR (``weights`` ``None`` when the
            partition has none), rows in ``ids`` order, neighbors in the owners' order.
        hits, hit_edges: frontier nodes served from the cache and the edges sampled for them.
        build_bytes: bytes this rank sent to others while building (every rank's build).
    """

    def __init__(self, part, ex: Exchanger, fraction: float) -> None:
        fraction = check_fraction(fraction)
        self.fraction = fraction
        self.hits = 0
        self.hit_edges = 0
        self.t_merge = 0.0
        self.last: tuple[np.ndarray, np.ndarray] | None = None  # last hop's hits, their orig ids
        bounds = np.asarray(part.boundaries, _I64)
        inner = bounds[1:-1]
        me, W = ex.rank, ex.world_size
        lo, hi = int(bounds[me]), int(bounds[me + 1])
        indptr = np.asarray(part.indptr)
        indices = np.asarray(part.indices)
        eids = np.asarray(part.edge_ids)
        orig = np.asarray(part.orig_ids)
        weights = getattr(part, "weights", None)
        weights = None if weights is None else np.asarray(weights)
        # more than every edge of the graph is the same budget, and fits the kernel's int64
        self.budget = min(int(fraction * int(indptr[-1])), 2**62) if indptr.size else 0
        b0 = ex.bytes.get(TAG, [0, 0])[1]
        with peer_errors("building the topology cache"):
            # 1. candidates: the distinct remote neighbors of this part, and how many edges of
            #    the part point to each; their degrees come from their owners
            if fraction > 0 and W > 1:
                remote = indices[(indices < lo) | (indices >= hi)]
                cand, halo = np.unique(remote, return_counts=True)
                cand = cand.astype(_I64, copy=False)
                del remote
            else:
                cand, halo = np.empty(0, _I64), np.empty(0, _I64)
            self.candidates = int(cand.size)
            dest = np.searchsorted(inner, cand, side="right")
            send = np.bincount(dest, minlength=W).astype(_I64)
            recv, rcounts = ex.exchange(torch.from_numpy(cand), torch.from_numpy(send), TAG)
            asked = recv.numpy().astype(_I64, copy=False) - lo
            answer = (np.asarray(indptr[asked + 1], _I64) - np.asarray(indptr[asked], _I64))
            deg = ex.payload(torch.from_numpy(answer), rcounts.tolist(), send.tolist(),
                             TAG).numpy()
            # 2. choose: best score first (ties: smaller id), greedily within the budget
            score = halo / np.maximum(deg, 1)
            order = np.lexsort((cand, -score))
            keep = np.zeros(cand.size, bool)
            keep[order[_greedy(deg[order], self.budget)]] = True
            ids, cdeg = cand[keep], deg[keep]  # ascending: cand is sorted
            # 3. rows from their owners: per requester, orig ids | neighbors | edge ids
            want = np.bincount(dest[keep], minlength=W).astype(_I64)
            recv, rcounts = ex.exchange(torch.from_numpy(ids), torch.from_numpy(want), TAG)
            asked = recv.numpy().astype(_I64, copy=False) - lo
            rcounts = rcounts.numpy()
            blocks, out_sizes, out_edges, w_blocks = [], [], [], []
            a = 0
            for s in range(W):
                rows = asked[a:a + int(rcounts[s])]
                a += int(rcounts[s])
                p = _row_positions(indptr, rows)
                blocks += [orig[rows], indices[p], eids[p]]
                out_sizes.append(int(rows.size + 2 * p.size))
                out_edges.append(int(p.size))
                if weights is not None:
                    w_blocks.append(weights[p])
            buf = np.concatenate(blocks).astype(_I64, copy=False) if blocks else \
                np.empty(0, _I64)
            edges_from = np.bincount(dest[keep], weights=cdeg, minlength=W).astype(_I64)
            in_sizes = (want + 2 * edges_from).tolist()
            got = ex.payload(torch.from_numpy(buf), out_sizes, in_sizes, TAG).numpy()
            wgot = None
            if weights is not None:
                wbuf = np.concatenate(w_blocks).astype(np.float32, copy=False)
                wgot = ex.payload(torch.from_numpy(wbuf), out_edges, edges_from.tolist(),
                                  TAG).numpy()
        del buf
        # 4. this rank's CSR of the cached rows, in ids order (owner blocks are in rank order)
        corig, cind, ceid = [], [], []
        p = 0
        for o in range(W):
            n, E = int(want[o]), int(edges_from[o])
            corig.append(got[p:p + n])
            cind.append(got[p + n:p + n + E])
            ceid.append(got[p + n + E:p + n + 2 * E])
            p += n + 2 * E
        self.lo, self.hi = lo, hi
        self.ids = np.ascontiguousarray(ids, _I64)
        self.indptr = np.zeros(ids.size + 1, _I64)
        np.cumsum(cdeg, out=self.indptr[1:])
        self.orig_ids = np.concatenate(corig) if corig else np.empty(0, _I64)
        self.indices = np.concatenate(cind) if cind else np.empty(0, _I64)
        self.edge_ids = np.concatenate(ceid) if ceid else np.empty(0, _I64)
        self.weights = None if weights is None else np.ascontiguousarray(wgot, np.float32)
        self._slots, self._shift = _table(self.ids)
        self.build_bytes = ex.bytes.get(TAG, [0, 0])[1] - b0

    # -- sizes ---------------------------------------------------------------------------------
    @property
    def num_nodes(self) -> int:
        return int(self.ids.size)

    @property
    def num_edges(self) -> int:
        return int(self.indices.size)

    @property
    def nbytes(self) -> int:
        """Bytes of the cache's arrays on this rank."""
        arrays = (self.ids, self.indptr, self.orig_ids, self.indices, self.edge_ids,
                  self.weights, self._slots)
        return int(sum(a.nbytes for a in arrays if a is not None))

    def stats(self) -> dict:
        """Plain-dict size and use of the cache."""
        return {"fraction": self.fraction, "budget_edges": self.budget,
                "candidates": self.candidates, "nodes": self.num_nodes,
                "edges": self.num_edges, "bytes": self.nbytes, "hits": self.hits,
                "hit_edges": self.hit_edges, "build_bytes_to_others": self.build_bytes}

    def frontier_orig(self, miss_orig: np.ndarray) -> np.ndarray:
        """Original ids of the last hop's whole frontier, from those of its nodes that were not
        cached (in frontier order among themselves) and the cache's own."""
        hit, rng = self.last
        out = np.empty(hit.size, _I64)
        mask = hit.view(np.bool_)
        out[mask] = rng
        out[~mask] = miss_orig
        return out

    # -- one hop -------------------------------------------------------------------------------
    def hop(self, h: HopSegments, wire_hop: Callable, kernel: Callable):
        """One hop with the cache: ``wire_hop`` (collective, always called once) samples the
        frontier nodes not cached, ``kernel(rows, rng_nodes, keys, fanouts, replace, edge_ids,
        arrays)`` the cached ones here; results come back in frontier order."""
        hits, hit, miss_nodes, miss_sizes, rows, rng, keys, fans, reps = _split(
            self.ids, self._slots, self._shift, self.lo, self.hi, self.orig_ids, h.nodes,
            np.asarray(h.sizes, _I64), h.keys, h.fanouts, h.replace)
        self.last = None
        if hits == 0:
            return wire_hop(h)
        self.last = (hit, rng)
        c_miss, nb_miss, e_miss = wire_hop(HopSegments(
            miss_nodes, miss_sizes, h.keys, h.fanouts, h.replace, h.hop, h.edge_ids))
        arrays = ((self.indptr, self.indices, self.edge_ids, self.orig_ids), self.weights)
        c_hit, nb_hit, e_hit = kernel(rows, rng, keys, fans, reps, h.edge_ids, arrays)
        self.hits += int(hits)
        self.hit_edges += int(nb_hit.size)
        t0 = time.perf_counter()
        out = interleave(hit, (c_miss, nb_miss, e_miss), (c_hit, nb_hit, e_hit),
                         bool(h.edge_ids))
        self.t_merge += time.perf_counter() - t0
        return out
