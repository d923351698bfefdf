"""CPU sampling kernels (numba ``njit``, ``nogil``, parallel over nodes).

One call samples one hop for any number of nodes from any number of requests: the caller passes
parallel arrays of (CSR row, RNG node id, request key). Results do not depend on the thread count
because every draw comes from :mod:`mnmg_sampler.ops.rng`.
"""

from __future__ import annotations

import types

import numba
import numpy as np

from . import rng

_rng = rng.compile_rng(numba.njit(nogil=True, inline="always"))
stream_base = _rng["stream_base"]
draw = _rng["draw"]
bounded = _rng["bounded"]


@numba.njit(cache=True, nogil=True, inline="always")
def sample_count(deg, fanout, replace):
    """How many neighbors a node of degree ``deg`` yields (shared with the CUDA kernel)."""
    if deg <= 0:
        return 0
    if fanout < 0:
        return deg
    if replace:
        return fanout
    return min(deg, fanout)


@numba.njit(cache=True, nogil=True, inline="always")
def sample_positions(out, o, deg, k, fanout, replace, base):
    """Write ``k`` neighbor positions in ``[0, deg)`` into ``out[o:o+k]``.

    All neighbors in CSR order when ``fanout < 0`` or ``deg <= fanout`` (without replacement);
    ``k`` independent uniform draws with replacement; otherwise Floyd's algorithm, an exact
    uniform ``k``-subset of distinct positions.
    """
    if fanout < 0 or (not replace and deg <= fanout):
        for j in range(k):
            out[o + j] = j
    elif replace:
        for j in range(k):
            out[o + j] = bounded(draw(base, j), deg)
    else:
        # Floyd: for j = deg-k .. deg-1 take t in [0, j]; if t was taken already, take j.
        for i in range(k):
            j = deg - k + i
            t = bounded(draw(base, i), j + 1)
            for m in range(i):
                if out[o + m] == t:
                    t = j
                    break
            out[o + i] = t


def _counts_py(indptr, rows, fanouts, replace, starts, degs):
    # Phase 0: the only random reads of indptr; independent, so their misses overlap.
    n = rows.shape[0]
    counts = np.empty(n, np.int64)
    for i in numba.prange(n):
        r = rows[i]
        starts[i] = indptr[r]
        degs[i] = indptr[r + 1] - starts[i]
        counts[i] = sample_count(degs[i], fanouts[i], replace[i] != 0)
    return counts


def _positions_py(starts, degs, nodes, keys, seed, hop, fanouts, replace, offsets, pos):
    # Phase 1: absolute CSR positions of every draw (sequential memory, pure arithmetic).
    n = starts.shape[0]
    for i in numba.prange(n):
        start = starts[i]
        deg = degs[i]
        o = offsets[i]
        k = offsets[i + 1] - o
        if k == 0:
            continue
        f = fanouts[i]
        if f < 0 or (replace[i] == 0 and deg <= f):  # every neighbor: no draws needed
            for j in range(k):
                pos[o + j] = start + j
            continue
        base = stream_base(seed, keys[i], hop, nodes[i])
        sample_positions(pos, o, deg, k, f, replace[i] != 0, base)
        for j in range(o, o + k):
            pos[j] += start


def _gather_py(indices, eids, pos, nbr, eid_out):
    # Phase 2: independent random reads, so the CPU overlaps many cache misses.
    m = pos.shape[0]
    has_eid = eids.shape[0] > 0
    for j in numba.prange(m):
        p = pos[j]
        nbr[j] = indices[p]
        eid_out[j] = eids[p] if has_eid else p


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


def _kernels(n: int):
    return _KERNELS[n >= PARALLEL_MIN_NODES and numba.get_num_threads() > 1]


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
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sample one hop for every ``rows[i]`` of a CSR.

    Args:
        indptr, indices: CSR of the sampling graph (row = node, entries = its in-neighbors), int64.
        eids: edge id of every CSR entry, or ``None`` to report CSR positions as edge ids.
        rows: CSR row of each node to sample (local position within this CSR).
        nodes: the node id the RNG is keyed on (the *original* id, so partitioning is invisible).
        keys: request key of each node.
        seed, hop: RNG counters shared by the call.
        fanout, replace: per call or per node (arrays), so requests with different fanouts
            share one call; ``fanout=-1`` takes every neighbor.

    Returns:
        ``(counts, neighbors, edge_ids)``: per-node sample counts, and the concatenated neighbor
        ids and edge ids in node order.
    """
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    nodes = np.ascontiguousarray(nodes, dtype=np.int64)
    keys = np.ascontiguousarray(keys, dtype=np.int64)
    n = rows.shape[0]
    fanouts = np.ascontiguousarray(np.broadcast_to(np.asarray(fanout, np.int64), (n,)))
    repl = np.ascontiguousarray(np.broadcast_to(np.asarray(replace, np.uint8), (n,)))
    counts_k, positions_k, gather_k = _kernels(n)
    starts = np.empty(n, np.int64)
    degs = np.empty(n, np.int64)
    counts = counts_k(indptr, rows, fanouts, repl, starts, degs)
    offsets = np.zeros(rows.shape[0] + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    total = int(offsets[-1])
    nbr = np.empty(total, np.int64)
    eid_out = np.empty(total, np.int64)
    e = np.empty(0, np.int64) if eids is None else eids
    positions_k(starts, degs, nodes, keys, np.uint64(seed), np.uint64(hop), fanouts, repl,
                offsets, nbr)
    gather_k(indices, e, nbr, nbr, eid_out)
    return counts, nbr, eid_out
