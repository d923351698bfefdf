"""Weighted (biased) neighbor sampling: probability proportional to a float32 weight per CSR entry.

Same calling convention and determinism contract as :func:`mnmg_sampler.ops.cpu.sample_neighbors`
(every draw is a pure function of ``(seed, key, hop, node, slot)``), plus a ``weights`` array:

* **with replacement**: draw ``i`` is an inverse-CDF lookup, ``unit(draw(base, i)) * total``
  searched in the row's running sums of weights;
* **without replacement**: successive sampling (each draw proportional to weight among the
  neighbors not yet taken), the distribution Efraimidis-Spirakis keys ``u ** (1 / w)`` also give.
  Draws come from slots ``0, 1, 2, ...`` of the node's stream; a draw that lands on a neighbor
  already taken is rejected and the next slot is used; after ``REBUILD_AFTER`` rejections in a row
  the taken neighbors' weights are removed from the running sums, so skewed rows stay fast.

The arithmetic is float64 additions of float32 weights in CSR order, one multiplication
``u * total`` and comparisons: no ``log`` or ``pow`` (whose last bit differs between libm and the
GPU's libdevice) and no multiply-add a compiler could fuse, so CPU and CUDA results are
bit-identical. ``docs/weighted.md`` states the behaviour, ``docs/rng.md`` the slot layout.

Zero weights are never drawn; a row whose weights are all zero yields no neighbors. Negative, NaN
or infinite weights are rejected by :func:`check_weights` (call it when weights are loaded, e.g.
at partition time); the kernels do not raise, they treat such weights as zero.
"""

from __future__ import annotations

import threading
import types
from collections.abc import Callable

import numba
import numpy as np

from ..graph.csr import check_weights  # validation lives with the CSR (graph layer)
from . import cpu

__all__ = ["check_weights", "sample_neighbors_weighted", "local_weighted_hop_fn",
           "weighted_count", "REBUILD_AFTER", "DEVICE_FUNCTIONS"]

REBUILD_AFTER = 8  # rejections in a row before the taken neighbors leave the running sums
W_MAX = np.float64(np.finfo(np.float32).max)  # weights above it (inf) or not above 0 (NaN) count 0

# --- device-agnostic helpers: plain Python, compiled for the CPU here and for CUDA in ops.cuda ---

def weighted_count(nz, fanout, replace):
    """How many neighbors a node with ``nz`` positive-weight neighbors yields (no ``min``)."""
    if nz <= 0:
        return 0
    if fanout < 0:
        return nz
    if replace:
        return fanout
    if nz < fanout:
        return nz
    return fanout


def usable(x):
    """A weight that can be drawn: positive and finite. Anything else (zero, and the negative,
    NaN or infinite weights :func:`check_weights` rejects) counts as zero, so the kernels stay
    safe on unvalidated input; for valid weights this changes no sum."""
    return x > 0 and x <= W_MAX


def row_prefix(c, so, w, start, deg):
    """Running sums of the row's weights (float64, CSR order) into ``c[so:so+deg]``; the total."""
    acc = np.float64(0.0)
    for p in range(deg):
        x = np.float64(w[start + p])
        if usable(x):
            acc += x
        c[so + p] = acc
    return acc


def search(c, so, deg, target):
    """The first row position ``p`` with ``c[so+p] > target`` (``target < c[so+deg-1]``).

    Its running sum grows there, so its weight is positive: zero weights are never found.
    """
    lo = 0
    hi = deg - 1
    while lo < hi:
        mid = (lo + hi) >> 1
        if c[so + mid] > target:
            hi = mid
        else:
            lo = mid + 1
    return lo


def rebuild(c, so, w, start, deg, out, o, i):
    """Running sums with the ``i`` positions taken (``out[o:o+i]``) weighted 0; the new total."""
    for p in range(deg):
        x = np.float64(w[start + p])
        c[so + p] = x if usable(x) else np.float64(0.0)
    for m in range(i):
        c[so + out[o + m]] = np.float64(0.0)
    acc = np.float64(0.0)
    for p in range(deg):
        acc += c[so + p]
        c[so + p] = acc
    return acc


def weighted_positions(out, o, w, start, deg, nz, k, fanout, replace, base, c, so):
    """Write ``k`` row positions drawn proportional to ``w[start:start+deg]`` into ``out[o:]``.

    ``nz`` is the row's number of positive weights. Every one of them, in CSR order, when
    ``fanout < 0`` or (without replacement) ``nz <= fanout``; otherwise ``c[so:so+deg]`` is
    float64 scratch for the running sums.
    """
    if fanout < 0 or (not replace and nz <= fanout):
        j = 0
        for p in range(deg):
            if usable(np.float64(w[start + p])):
                out[o + j] = p
                j += 1
        return
    total = row_prefix(c, so, w, start, deg)
    if replace:
        for i in range(k):
            out[o + i] = search(c, so, deg, unit(draw(base, i)) * total)  # noqa: F821
        return
    slot = 0
    for i in range(k):
        misses = 0
        while True:
            t = search(c, so, deg, unit(draw(base, slot)) * total)  # noqa: F821
            slot += 1
            taken = False
            for m in range(i):
                if out[o + m] == t:
                    taken = True
                    break
            if not taken:
                break
            misses += 1
            if misses == REBUILD_AFTER:
                total = rebuild(c, so, w, start, deg, out, o, i)
                misses = 0
        out[o + i] = t


def draws_needed(nz, k, fanout, replace):
    """Whether a node draws (and so needs ``deg`` scratch entries) rather than taking all."""
    return k > 0 and fanout >= 0 and (replace or nz > fanout)


# callees first: each is compiled against the ones before it
DEVICE_FUNCTIONS = (weighted_count, draws_needed, usable, row_prefix, search, rebuild,
                    weighted_positions)


def compile_helpers(jit: Callable, ns: dict) -> dict:
    """Compile :data:`DEVICE_FUNCTIONS` with ``jit`` into namespace ``ns`` (which holds the RNG)."""
    ns.setdefault("np", np)
    ns.setdefault("REBUILD_AFTER", REBUILD_AFTER)
    ns.setdefault("W_MAX", W_MAX)
    for f in DEVICE_FUNCTIONS:
        ns[f.__name__] = jit(types.FunctionType(f.__code__, ns, f.__name__, f.__defaults__))
    return ns


# --- CPU kernels ----------------------------------------------------------------------------
# The module-level names now become the CPU-compiled helpers (DEVICE_FUNCTIONS keeps the Python
# sources for ops.cuda); the kernels below resolve them, and the RNG, from this module.
_CPU_NS = compile_helpers(numba.njit(nogil=True, inline="always"), dict(cpu._rng))
weighted_count = _CPU_NS["weighted_count"]
draws_needed = _CPU_NS["draws_needed"]
usable = _CPU_NS["usable"]
row_prefix = _CPU_NS["row_prefix"]
search = _CPU_NS["search"]
rebuild = _CPU_NS["rebuild"]
weighted_positions = _CPU_NS["weighted_positions"]
stream_base = cpu.stream_base

def _wcounts_py(indptr, w, rows, fanouts, replace, starts, degs, nzs, offsets, soffs):
    # Phase 0: each row's positive weights are counted (O(degree): weighted sampling reads rows).
    n = rows.shape[0]
    for i in numba.prange(n):
        r = rows[i]
        s = indptr[r]
        d = indptr[r + 1] - s
        nz = 0
        for p in range(s, s + d):
            x = np.float64(w[p])
            nz += (x > 0) & (x <= W_MAX)  # usable(x), branch-free so the loop vectorises
        starts[i] = s
        degs[i] = d
        nzs[i] = nz
        f = fanouts[i]
        rep = replace[i] != 0
        k = weighted_count(nz, f, rep)
        offsets[i + 1] = k
        soffs[i + 1] = d if draws_needed(nz, k, f, rep) else 0


def _wpositions_py(w, starts, degs, nzs, nodes, keys, seed, hop, fanouts, replace, offsets,
                   soffs, c, pos):
    # Phase 1: absolute CSR positions of every draw; the gather is ops.cpu's.
    n = starts.shape[0]
    for i in numba.prange(n):
        o = offsets[i]
        k = offsets[i + 1] - o
        if k == 0:
            continue
        start = starts[i]
        base = stream_base(seed, keys[i], hop, nodes[i])
        weighted_positions(pos, o, w, start, degs[i], nzs[i], k, fanouts[i], replace[i] != 0,
                           base, c, soffs[i])
        for j in range(o, o + k):
            pos[j] += start


def _compile(py, parallel: bool):
    f = types.FunctionType(py.__code__, py.__globals__, py.__name__, py.__defaults__)
    f.__qualname__ = f"{py.__name__}_{'par' if parallel else 'ser'}"
    return numba.njit(cache=True, nogil=True, parallel=parallel)(f)


_KERNELS = {par: tuple(_compile(f, par) for f in (_wcounts_py, _wpositions_py))
            for par in (True, False)}


_SCRATCH = threading.local()


def _scratch(size: int) -> np.ndarray:
    """float64 scratch of ``size`` entries, reused by the calls of one thread (it only grows):
    a fresh buffer per call would pay its page faults every time."""
    buf = getattr(_SCRATCH, "buf", None)
    if buf is None or buf.shape[0] < size:
        buf = _SCRATCH.buf = np.empty(max(size, 1024), np.float64)
    return buf[:size]


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

    Arguments and results as :func:`mnmg_sampler.ops.cpu.sample_neighbors`, plus ``weights``:
    float32, one per CSR entry (``weights[p]`` belongs to ``indices[p]``), validated beforehand
    by :func:`check_weights`. A node yields ``min(n_pos, fanout)`` neighbors without
    replacement, ``fanout`` with replacement (0 when ``n_pos == 0``), and all ``n_pos`` in CSR
    order for ``fanout = -1``, where ``n_pos`` counts its positive-weight neighbors. Cost is
    O(degree) per node (its weights are read), against O(fanout) for the uniform kernel.
    """
    weights = np.ascontiguousarray(weights, dtype=np.float32)
    rows, nodes, keys, fanouts, repl = cpu._per_node(rows, nodes, keys, fanout, replace)
    n = rows.shape[0]
    parallel = cpu._parallel(n)
    counts_k, positions_k = _KERNELS[parallel]
    gather_k = cpu._KERNELS[parallel][2]
    starts = np.empty(n, np.int64)
    degs = np.empty(n, np.int64)
    nzs = np.empty(n, np.int64)
    offsets = np.zeros(n + 1, np.int64)
    soffs = np.zeros(n + 1, np.int64)
    counts_k(indptr, weights, rows, fanouts, repl, starts, degs, nzs, offsets, soffs)
    counts = offsets[1:].copy()
    np.cumsum(offsets, out=offsets)
    np.cumsum(soffs, out=soffs)
    total = int(offsets[-1])
    nbr = np.empty(total, np.int64)
    eid_out = np.empty(total if with_eids else 0, np.int64)
    scratch = _scratch(int(soffs[-1]))
    positions_k(weights, starts, degs, nzs, nodes, keys, np.uint64(seed), np.uint64(hop), fanouts,
                repl, offsets, soffs, scratch, nbr)
    gather_k(indices, cpu._EMPTY if eids is None else eids, nbr, nbr, eid_out, with_eids)
    return counts, nbr, eid_out


def local_weighted_hop_fn(graph, weights, seed: int) -> Callable:
    """The weighted hop function of a whole graph in this process (``sampler.local_hop_fn``'s twin).

    ``graph`` is a :class:`~mnmg_sampler.graph.csr.CSRGraph` and ``weights`` one weight per CSR
    entry (validated here with :func:`check_weights`). The returned ``hop_fn(segments)`` takes a
    ``sampler.HopSegments`` and returns ``(counts, neighbors, edge ids or None)``, so
    ``MultiHopSampler(local_weighted_hop_fn(g, w, seed), g.num_nodes)`` samples by weight.
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
