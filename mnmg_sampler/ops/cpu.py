"""CPU sampling kernels (numba ``njit``, ``nogil``, parallel over nodes).

One call samples one hop for any number of nodes from any number of requests: the caller passes
parallel arrays of (CSR row, RNG node id, request key). Results do not depend on the thread count
because every draw comes from :mod:`mnmg_sampler.ops.rng`.
"""

from __future__ import annotations

import threading
import types
from collections.abc import Callable

import numba
import numpy as np

from . import rng
from .prefetch import prefetch

_rng = rng.compile_rng(numba.njit(nogil=True, inline="always"))
stream_base = _rng["stream_base"]
draw = _rng["draw"]
bounded = _rng["bounded"]


@numba.njit(cache=True, nogil=True, inline="always")
def sample_positions(out, o, deg, k, fanout, replace, base):
    """Write ``k`` neighbor positions in ``[0, deg)`` into ``out[o:o+k]``: all, independent draws
    or Floyd's algorithm (docs/rng.md#sampling-one-node-sample_positions).

    Indices are unsigned: numba guards a signed index (``o`` is not known to be >= 0) against
    wrapping around, and that guard turned the stores into scatters and kept the draws scalar.
    """
    if fanout < 0 or (not replace and deg <= fanout):
        for j in range(k):
            out[np.uint64(o + j)] = j
    elif replace:
        for j in range(k):
            out[np.uint64(o + j)] = bounded(draw(base, j), deg)
    elif deg <= 64:
        # Floyd: for j = deg-k .. deg-1 take t in [0, j]; if t was taken already, take j.
        # The draws are independent, so they are computed first in one pass; then positions
        # fit one 64-bit set, so the membership test is a bit test, and branch-free.
        for i in range(k):
            out[np.uint64(o + i)] = bounded(draw(base, i), deg - k + i + 1)
        seen = np.uint64(0)
        for i in range(k):
            t = out[np.uint64(o + i)]
            if (seen >> np.uint64(t)) & np.uint64(1):
                t = deg - k + i
            seen |= np.uint64(1) << np.uint64(t)
            out[np.uint64(o + i)] = t
    else:
        # The same, with bit ``t % 64`` of every position taken in ``seen``: a clear bit proves
        # t is new without scanning the positions taken.
        seen = np.uint64(0)
        for i in range(k):
            j = deg - k + i
            t = bounded(draw(base, i), j + 1)
            if (seen >> np.uint64(t & 63)) & np.uint64(1):
                for m in range(i):
                    if out[np.uint64(o + m)] == t:
                        t = j
                        break
            seen |= np.uint64(1) << np.uint64(t & 63)
            out[np.uint64(o + i)] = t


@numba.njit(cache=True, nogil=True, inline="always")
def node_positions(pos, o, k, start, deg, fanout, replace, seed, key, hop, node):
    """Absolute CSR positions of one node's ``k`` draws into ``pos[o:o+k]`` (shared by the
    kernels): every neighbor in order, or the draws of its counter-based stream. Indices as in
    :func:`sample_positions`."""
    if k == 0:
        return
    if fanout < 0 or (replace == 0 and deg <= fanout):  # every neighbor: no draws needed
        for j in range(k):
            pos[np.uint64(o + j)] = start + j
        return
    base = stream_base(seed, key, hop, node)
    sample_positions(pos, o, deg, k, fanout, replace != 0, base)
    for j in range(o, o + k):
        pos[np.uint64(j)] += start


REBUILD_AFTER = 8  # rejections in a row before the taken neighbors leave the running sums
W_MAX = np.float64(np.finfo(np.float32).max)  # weights above it (inf) or not above 0 (NaN) count 0

# --- the count and the weighted draws (ops.weighted): plain Python, compiled for the CPU here,
# for CUDA in ops.cuda

def sample_count(n, fanout, replace):
    """How many neighbors a node with ``n`` neighbors to draw from yields (its degree, or its
    positive weights): the one count of every kernel. No ``min``: numba's CUDA ``min`` does not
    compile."""
    if n <= 0:
        return 0
    if fanout < 0:
        return n
    if replace:
        return fanout
    if n < fanout:
        return n
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

    ``nz`` is the row's number of positive weights; ``c[so:so+deg]`` is float64 scratch for the
    running sums (docs/rng.md#weighted-draws-weighted_positions).
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
DEVICE_FUNCTIONS = (sample_count, draws_needed, usable, row_prefix, search, rebuild,
                    weighted_positions)


def compile_helpers(jit: Callable, ns: dict) -> dict:
    """Compile :data:`DEVICE_FUNCTIONS` with ``jit`` into namespace ``ns`` (which holds the RNG)."""
    ns.setdefault("np", np)
    ns.setdefault("REBUILD_AFTER", REBUILD_AFTER)
    ns.setdefault("W_MAX", W_MAX)
    for f in DEVICE_FUNCTIONS:
        ns[f.__name__] = jit(types.FunctionType(f.__code__, ns, f.__name__, f.__defaults__))
    return ns


# The module-level names now become the CPU-compiled helpers (DEVICE_FUNCTIONS keeps the Python
# sources for ops.cuda); the kernels resolve them, and the RNG, from this module.
_CPU_NS = compile_helpers(numba.njit(nogil=True, inline="always"), dict(_rng))
sample_count = _CPU_NS["sample_count"]
draws_needed = _CPU_NS["draws_needed"]
usable = _CPU_NS["usable"]
row_prefix = _CPU_NS["row_prefix"]
search = _CPU_NS["search"]
rebuild = _CPU_NS["rebuild"]
weighted_positions = _CPU_NS["weighted_positions"]


# rows between the prefetch of a row's indptr entry and its read in the counts phase (without
# it few rows' misses were in flight: rmat:20, measured 5.3 -> 2.3 ms; 32 ahead alike)
INDPTR_AHEAD = 16


def _counts_py(indptr, rows, fanouts, replace, starts, degs, offsets):
    # Phase 0: the only random reads of indptr, the row INDPTR_AHEAD on prefetched.
    # Unsigned rows: no wraparound guard on the reads (same values, fewer instructions).
    n = rows.shape[0]
    for i in numba.prange(n):
        if i + INDPTR_AHEAD < n:
            prefetch(indptr, rows[i + INDPTR_AHEAD])
        r = np.uint64(rows[i])
        s = indptr[r]
        d = indptr[r + np.uint64(1)] - s
        starts[i] = s
        degs[i] = d
        offsets[i + 1] = sample_count(d, fanouts[i], replace[i] != 0)


def _positions_py(starts, degs, nodes, keys, seed, hop, fanouts, replace, offsets, pos):
    # Phase 1: absolute CSR positions of every draw (sequential memory, pure arithmetic).
    # Kept apart from the gather: interleaving the draws' arithmetic with the gather's cache
    # misses fills the CPU's reorder window and serialises the misses (measured 1.6x slower).
    n = starts.shape[0]
    for i in numba.prange(n):
        node_positions(pos, offsets[i], offsets[i + 1] - offsets[i], starts[i], degs[i],
                       fanouts[i], replace[i], seed, keys[i], hop, nodes[i])


def _gather_py(indices, eids, pos, nbr, eid_out, with_eids):
    # Phase 2: independent random reads, so the CPU overlaps many cache misses.
    m = pos.shape[0]
    if not with_eids:
        for j in numba.prange(m):
            nbr[j] = indices[pos[j]]
    elif eids.shape[0] == 0:
        for j in numba.prange(m):
            p = pos[j]
            nbr[j] = indices[p]
            eid_out[j] = p
    else:
        for j in numba.prange(m):
            p = pos[j]
            nbr[j] = indices[p]
            eid_out[j] = eids[p]


def _compile(py, parallel: bool):
    """``njit`` one body as a parallel or a serial kernel (distinct names keep caches apart)."""
    f = types.FunctionType(py.__code__, py.__globals__, py.__name__, py.__defaults__,
                           py.__closure__)
    f.__qualname__ = f"{py.__name__}_{'par' if parallel else 'ser'}"
    return numba.njit(cache=True, nogil=True, parallel=parallel)(f)


_KERNELS = {par: tuple(_compile(f, par) for f in (_counts_py, _positions_py, _gather_py))
            for par in (True, False)}
# Below this many nodes a parallel loop costs more to start than it saves.
PARALLEL_MIN_NODES = 4096


_EMPTY = np.empty(0, np.int64)
_SCRATCH = threading.local()


def scratch_int64(n: int, rows: int = 3) -> np.ndarray:
    """``(rows, n)`` int64 scratch (default: row starts, degrees, offsets) reused by the calls of
    one thread, one buffer per ``rows``: fresh buffers would pay their page faults on every
    call. It only grows."""
    bufs = _SCRATCH.__dict__.setdefault("bufs", {})
    buf = bufs.get(rows)
    if buf is None or buf.shape[1] < n:
        buf = bufs[rows] = np.empty((rows, max(n, 1024)), np.int64)
    return buf[:, :n]


_SCRATCH_F64 = threading.local()


def scratch_float64(size: int) -> np.ndarray:
    """float64 scratch of ``size`` entries (the weighted draws' running sums), reused alike."""
    buf = getattr(_SCRATCH_F64, "buf", None)
    if buf is None or buf.shape[0] < size:
        buf = _SCRATCH_F64.buf = np.empty(max(size, 1024), np.float64)
    return buf[:size]


def _ids(a) -> np.ndarray:
    """int32 or int64 ids as given (no copy when contiguous); anything else as int64."""
    a = np.asarray(a)
    if a.dtype != np.int32:
        return np.ascontiguousarray(a, dtype=np.int64)
    return np.ascontiguousarray(a)


def _parallel(n: int) -> bool:
    """Whether a call over ``n`` nodes uses the parallel kernels."""
    return n >= PARALLEL_MIN_NODES and numba.get_num_threads() > 1


def _kernels(n: int):
    return _KERNELS[_parallel(n)]


def _per_node(rows, nodes, keys, fanout, replace):
    """The per-node arrays a kernel takes: ``rows``, ``nodes`` (int32 or int64), int64 ``keys``,
    and ``fanout`` / ``replace`` broadcast to one int64 / uint8 entry per node."""
    rows, nodes = _ids(rows), _ids(nodes)
    keys = np.ascontiguousarray(keys, dtype=np.int64)
    n = rows.shape[0]
    fanouts = np.ascontiguousarray(np.broadcast_to(np.asarray(fanout, np.int64), (n,)))
    repl = np.ascontiguousarray(np.broadcast_to(np.asarray(replace, np.uint8), (n,)))
    return rows, nodes, keys, fanouts, repl


def sample_neighbors(
    indptr: np.ndarray,
    indices: np.ndarray,
    eids: np.ndarray | None,
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
    """Sample one hop for every ``rows[i]`` of a CSR.

    Args:
        indptr, indices: CSR of the sampling graph (row = node, entries = its in-neighbors), int64.
        eids: edge id of every CSR entry, or ``None`` to report CSR positions as edge ids.
        nodes: the node id the RNG is keyed on (the *original* id, so partitioning is invisible).
        fanout, replace: per call or per node (arrays), so requests with different fanouts
            share one call; ``fanout=-1`` takes every neighbor.
        with_eids: ``False`` skips the edge-id reads; ``edge_ids`` is then an empty array.

    Returns:
        ``(counts, neighbors, edge_ids)``: per-node sample counts, and the concatenated neighbor
        ids and edge ids in node order (int64).
    """
    rows, nodes, keys, fanouts, repl = _per_node(rows, nodes, keys, fanout, replace)
    n = rows.shape[0]
    counts_k, positions_k, gather_k = _kernels(n)
    scratch = scratch_int64(n + 1)
    starts, degs, offsets = scratch[0, :n], scratch[1, :n], scratch[2]
    offsets[0] = 0
    counts_k(indptr, rows, fanouts, repl, starts, degs, offsets)
    counts = offsets[1:].copy()
    np.cumsum(offsets, out=offsets)
    total = int(offsets[-1])
    nbr = np.empty(total, np.int64)
    eid_out = np.empty(total if with_eids else 0, np.int64)
    e = _EMPTY if eids is None else eids
    positions_k(starts, degs, nodes, keys, np.uint64(seed), np.uint64(hop), fanouts, repl,
                offsets, nbr)
    gather_k(indices, e, nbr, nbr, eid_out, with_eids)
    return counts, nbr, eid_out


@numba.njit(cache=True, nogil=True, inline="always")
def part_of(v, bounds, last):
    """The part ``p`` with ``bounds[p] <= v < bounds[p + 1]`` (empty parts skipped)."""
    p = 0
    while p < last and v >= bounds[p + 1]:
        p += 1
    return p


@numba.njit(cache=True, nogil=True)
def group_by_part(nodes, bounds, part, order):
    """The part of each node (``bounds[p] <= v < bounds[p + 1]``) into ``part``, and the node
    positions grouped by part, in node order within a part (a counting sort), into ``order``.
    Returns the ``P + 1`` offsets of the parts' groups in ``order``."""
    n = nodes.shape[0]
    P = bounds.shape[0] - 1
    per = np.zeros(P + 1, np.int64)
    for i in range(n):
        r = part_of(nodes[i], bounds, P - 1)
        part[i] = r
        per[r + 1] += 1
    for r in range(P):
        per[r + 1] += per[r]
    fill = per[:P].copy()
    for i in range(n):
        r = part[i]
        order[fill[r]] = i
        fill[r] += 1
    return per


@numba.njit(cache=True, nogil=True)
def _parts_counts(indptrs, origs, bounds, nodes, fanouts, replace, scratch, counts):
    n = nodes.shape[0]
    P = len(indptrs)
    order, starts, degs = scratch[0], scratch[1], scratch[2]
    rng_ids, offsets, part = scratch[3], scratch[4], scratch[5]
    # the nodes grouped by part: each part's loops then run without a data-dependent branch
    # per node (a random owner per node mispredicts half the time)
    per = group_by_part(nodes, bounds, part, order)
    for p in range(P):  # phase 0: the random reads of each part's indptr and orig_ids
        indptr = indptrs[p]
        orig = origs[p]
        lo = bounds[p]
        for k in range(per[p], per[p + 1]):
            i = np.uint64(order[k])
            r = np.uint64(nodes[i] - lo)
            s = indptr[r]
            starts[i] = s
            degs[i] = indptr[r + np.uint64(1)] - s
            rng_ids[i] = orig[r]
    offsets[0] = 0
    edges = np.zeros(P, np.int64)
    for i in range(n):
        c = sample_count(degs[i], fanouts[i], replace[i] != 0)
        counts[i] = c
        offsets[i + 1] = offsets[i] + c
        edges[part[i]] += c
    return per, edges


@numba.njit(cache=True, nogil=True)
def _parts_draw(indices_t, eids_t, keys, seed, hop, fanouts, replace, scratch, counts, per,
                nbr, eid, with_eids):
    n = counts.shape[0]
    order, starts, degs = scratch[0], scratch[1], scratch[2]
    rng_ids, offsets = scratch[3], scratch[4]
    for i in range(n):  # phase 1: the draws (positions into nbr), as the one-part kernel
        node_positions(nbr, offsets[i], counts[i], starts[i], degs[i], fanouts[i], replace[i],
                       seed, keys[i], hop, rng_ids[i])
    for p in range(len(indices_t)):  # phase 2: the gathers (in place), part by part
        ind = indices_t[p]
        eids = eids_t[p]
        own_e = eids.shape[0] > 0
        for k in range(per[p], per[p + 1]):
            i = order[k]
            for j in range(offsets[i], offsets[i + 1]):
                u = np.uint64(j)
                q = nbr[u]
                if with_eids:
                    eid[u] = eids[np.uint64(q)] if own_e else q
                nbr[u] = ind[np.uint64(q)]


_SCRATCH_PARTS = threading.local()


def sample_neighbors_parts(indptrs: tuple, indices: tuple, eids: tuple, origs: tuple,
                           bounds: np.ndarray, nodes: np.ndarray, keys: np.ndarray, seed: int,
                           hop: int, fanouts: np.ndarray, replace: np.ndarray, *,
                           with_eids: bool = True
                           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`sample_neighbors` over several CSRs at once: node ``v`` (a new id) is row
    ``v - bounds[p]`` of part ``p``, its RNG id ``origs[p][row]``; results in node order, and
    per part its nodes and sampled edges (``(P, 2)``). The tuples hold one array per part, all
    of one type. Serial; per-node scratch is reused per thread, as :func:`sample_neighbors`'s."""
    nodes = np.ascontiguousarray(nodes, np.int64)
    n = nodes.shape[0]
    buf = getattr(_SCRATCH_PARTS, "buf", None)
    if buf is None or buf.shape[1] < n + 1:
        buf = _SCRATCH_PARTS.buf = np.empty((6, max(n + 1, 1024)), np.int64)
    fanouts = np.ascontiguousarray(np.broadcast_to(fanouts, (n,)), np.int64)
    replace = np.ascontiguousarray(np.broadcast_to(replace, (n,)), np.uint8)
    counts = np.empty(n, np.int64)
    # outputs are allocated here, by numpy, not inside the compiled code: numba's allocations
    # of a few MB come fresh from the OS on every call and pay a page fault per 4 KiB
    per, edges = _parts_counts(indptrs, origs, np.ascontiguousarray(bounds, np.int64), nodes,
                               fanouts, replace, buf, counts)
    total = int(buf[4, n])
    nbr = np.empty(total, np.int64)
    eid = np.empty(total if with_eids else 0, np.int64)
    _parts_draw(indices, eids, np.ascontiguousarray(keys, np.int64), np.uint64(seed),
                np.uint64(hop), fanouts, replace, buf, counts, per, nbr, eid, with_eids)
    return counts, nbr, eid, np.stack([np.diff(per), edges], axis=1)
