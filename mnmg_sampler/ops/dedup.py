"""Per-request deduplication and renumbering of one hop's sampled neighbors (CPU, njit).

Each request's new neighbors are appended to its ``n_id`` in first-occurrence order (PyG's) and
every sampled neighbor gets its local index. Requests run in parallel, each with its own
open-addressing hash table: linear in the request's size. Loops read each request through views
and index the tables with unsigned numbers: numba's wraparound guard on a signed index cost the
dense path a third of its time.
"""

from __future__ import annotations

import threading

import numba
import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@numba.njit(cache=True, nogil=True, inline="always")
def _slot(node, shift):
    return (np.uint64(node) * _GOLDEN) >> shift


@numba.njit(cache=True, nogil=True, inline="always")
def _new_table(m):
    """An empty table for up to ``m`` distinct ids (load factor <= 0.8): ``(table, mask,
    shift)``; one (node, local index) pair per slot, so a probe touches one cache line; -1 =
    empty."""
    need = m + m // 4 + 2
    bits = 1
    while (1 << bits) < need:
        bits += 1
    return (np.full((1 << bits, 2), -1, np.int64), np.uint64((1 << bits) - 1),
            np.uint64(64 - bits))


@numba.njit(cache=True, nogil=True, inline="always")
def _probe(table, v, mask, shift):
    """The slot holding ``v``, or the empty slot where it belongs (linear probing)."""
    s = _slot(v, shift)
    while table[s, 0] >= 0 and table[s, 0] != v:
        s = (s + np.uint64(1)) & mask
    return s


@numba.njit(cache=True, nogil=True, parallel=True)
def _dedup(nid, nid_off, cand, cand_off, new_tmp, new_cnt, local):
    R = nid_off.shape[0] - 1
    for r in numba.prange(R):
        held = nid[nid_off[r]:nid_off[r + 1]]
        c0 = cand_off[r]
        got = cand[c0:cand_off[r + 1]]
        loc = local[c0:cand_off[r + 1]]
        new = new_tmp[c0:cand_off[r + 1]]
        # held.size + got.size: an upper bound of the request's distinct ids
        table, mask, shift = _new_table(held.size + got.size)
        for i in range(held.size):
            v = held[i]
            s = _probe(table, v, mask, shift)
            if table[s, 0] < 0:
                table[s, 0] = v
                table[s, 1] = i
        n = held.size
        k = 0
        for j in range(got.size):
            v = got[j]
            s = _probe(table, v, mask, shift)
            if table[s, 0] < 0:
                table[s, 0] = v
                table[s, 1] = n + k
                new[k] = v
                k += 1
            loc[j] = table[s, 1]
        new_cnt[r] = k


@numba.njit(cache=True, nogil=True, parallel=True)
def _dedup_dense(nid, nid_off, cand, cand_off, new_tmp, new_cnt, local, maps):
    """:func:`_dedup` with a direct map ``id -> local index`` (-1 = unseen) instead of a hash
    table: ids are below ``maps.shape[1]``. Map ``m`` serves requests ``m, m + M, ...`` in
    turn and is reset (only the entries set) after each."""
    R, M = nid_off.shape[0] - 1, maps.shape[0]
    for m in numba.prange(M):
        pos = maps[m]
        for r in range(m, R, M):
            held = nid[nid_off[r]:nid_off[r + 1]]
            c0 = cand_off[r]
            got = cand[c0:cand_off[r + 1]]
            loc = local[c0:cand_off[r + 1]]
            new = new_tmp[c0:cand_off[r + 1]]
            for i in range(held.size):
                v = np.uint64(held[i])
                if pos[v] < 0:
                    pos[v] = i
            n = held.size
            k = 0
            for j in range(got.size):
                v = got[j]
                p = pos[np.uint64(v)]
                if p < 0:
                    p = n + k
                    pos[np.uint64(v)] = p
                    new[k] = v
                    k += 1
                loc[j] = p
            new_cnt[r] = k
            for i in range(held.size):
                pos[np.uint64(held[i])] = -1
            for j in range(k):
                pos[np.uint64(new[j])] = -1


DENSE_FACTOR = 8
"""The direct maps are used when their entries (ids' range x maps) are at most this many times
the ids given: about the memory of the hash tables, and far fewer cache misses than them."""


MAPS_KEPT_BYTES = 64 << 20
"""Direct maps of at most this many bytes are kept per thread between calls: the kernel leaves
every entry at -1, so a kept map is reused without the fill of a fresh one (8 MiB and about
0.8 ms per hop for a graph of 2^20 nodes). Larger maps are made per call."""

_kept = threading.local()  # .maps: this thread's direct maps, every entry -1 between calls


def _take_maps(n_maps: int, bound: int) -> np.ndarray:
    """``n_maps`` direct maps of at least ``bound`` entries each, every entry -1 (rows may be
    longer): this thread's kept maps when large enough, else fresh ones. They leave the
    thread's slot while in use, so a call interrupted midway never hands on a dirty map."""
    kept, _kept.maps = getattr(_kept, "maps", None), None
    if kept is not None and kept.shape[0] >= n_maps and kept.shape[1] >= bound:
        return kept
    if kept is not None and n_maps * bound * 8 <= MAPS_KEPT_BYTES:  # grow to cover both
        n_maps, bound = max(n_maps, kept.shape[0]), max(bound, kept.shape[1])
    return np.full((n_maps, bound), -1, np.int64)


def _keep_maps(maps: np.ndarray) -> None:
    """Keep ``maps`` (every entry back at -1) for this thread's next call, within the budget."""
    if maps.nbytes <= MAPS_KEPT_BYTES:
        _kept.maps = maps


def _id_bound(nid: np.ndarray, cand: np.ndarray) -> int:
    return int(max(nid.max() if nid.size else -1, cand.max() if cand.size else -1)) + 1


def dedup_hop(
    nid: np.ndarray, nid_off: np.ndarray, cand: np.ndarray, cand_off: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Deduplicate one hop for ``R`` requests given as flat arrays with ``R + 1`` offsets.

    Returns ``(new, new_off, local)``: each request's new nodes (flat, with offsets) and every
    candidate's index in its request's ``n_id`` once they are appended. Ids in a small range go
    through direct maps, others through hash tables; the results are the same.
    """
    R = nid_off.shape[0] - 1
    new_tmp = np.empty(cand.shape[0], np.int64)
    new_cnt = np.zeros(R, np.int64)
    local = np.empty(cand.shape[0], np.int64)
    n_ids = nid.shape[0] + cand.shape[0]
    n_maps = min(R, numba.get_num_threads())
    bound = _id_bound(nid, cand) if R else 0
    if R and bound * n_maps <= DENSE_FACTOR * n_ids:
        maps = _take_maps(n_maps, bound)
        _dedup_dense(nid, nid_off, cand, cand_off, new_tmp, new_cnt, local,
                     maps[:n_maps])
        _keep_maps(maps)
    else:
        _dedup(nid, nid_off, cand, cand_off, new_tmp, new_cnt, local)
    new_off = np.zeros(R + 1, np.int64)
    np.cumsum(new_cnt, out=new_off[1:])
    starts = np.repeat(cand_off[:-1] - new_off[:-1], new_cnt)
    new = new_tmp[np.arange(new_off[-1]) + starts]
    return new, new_off, local


@numba.njit(cache=True, nogil=True)
def _unique_first(ids, uniq, inv):
    n = ids.shape[0]
    table, mask, shift = _new_table(n)
    k = 0
    for i in range(n):
        v = ids[i]
        s = _probe(table, v, mask, shift)
        if table[s, 0] < 0:
            table[s, 0] = v
            table[s, 1] = k
            uniq[k] = v
            k += 1
        inv[i] = table[s, 1]
    return k


def unique_first(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct non-negative ids in first-occurrence order and, for each id, its index there.

    ``uniq[inv] == ids``; linear time (one hash table), unlike ``np.unique``'s sort.
    """
    ids = np.ascontiguousarray(ids, dtype=np.int64)
    uniq = np.empty(ids.shape[0], np.int64)
    inv = np.empty(ids.shape[0], np.int64)
    k = _unique_first(ids, uniq, inv)
    return uniq[:k], inv


@numba.njit(cache=True, nogil=True)
def _index(keys):
    table, mask, shift = _new_table(keys.shape[0])
    for i in range(keys.shape[0]):
        s = _probe(table, keys[i], mask, shift)
        table[s, 0] = keys[i]
        table[s, 1] = i
    return table


@numba.njit(cache=True, nogil=True)
def _find(table, queries, out):
    bits = 0
    while (1 << bits) < table.shape[0]:
        bits += 1
    mask, shift = np.uint64(table.shape[0] - 1), np.uint64(64 - bits)
    for i in range(queries.shape[0]):
        out[i] = table[_probe(table, queries[i], mask, shift), 1]


def id_index(keys: np.ndarray) -> np.ndarray:
    """A hash table of distinct non-negative ``keys`` for :func:`find_ids` (about 20 bytes per
    key): one probe per query, where a binary search over the sorted keys took 16 cache
    misses (the feature fetch's lookups: 21% of its time on rmat:20)."""
    return _index(np.ascontiguousarray(keys, dtype=np.int64))


def find_ids(table: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """Per query, its position among the keys of ``table`` (:func:`id_index`), -1 if absent."""
    out = np.empty(queries.shape[0], np.int64)
    _find(table, np.ascontiguousarray(queries, dtype=np.int64), out)
    return out

