"""Packing one distributed hop into flat wire buffers and back (CPU, njit, one pass each).

Block layouts, flags and reply bounds: docs/architecture.md#wire-format. Words are int32 or int64
(``k = 8 / word size`` words per int64 field, low word first). Every block says its own size, so
a receiver parses it from a buffer sized by a bound both sides compute (:func:`reply_bounds`, the
``next`` word) and no exchange sends its sizes first.

Each function replaces a chain of numpy calls whose per-call overhead dominated small hops. None
knows about ranks: a "destination" is a bucket of the boundaries ``inner``. Copy loops index with
``np.uint64``: numba's wraparound guard on a signed index kept them from vectorising.
"""

from __future__ import annotations

import numba
import numpy as np

REPLACE, EDGE_IDS, ORIG_IDS, LAST, TIMED = 1, 2, 4, 8, 16


@numba.njit(cache=True, nogil=True, inline="always")
def _put64(buf, p, v, k):
    if k == 1:
        buf[p] = v
    else:
        buf[p] = v & 0xFFFFFFFF
        buf[p + 1] = (v >> 32) & 0xFFFFFFFF


@numba.njit(cache=True, nogil=True, inline="always")
def _get64(buf, p, k):
    if k == 1:
        return np.int64(buf[p])
    return (np.int64(buf[p]) & 0xFFFFFFFF) | (np.int64(buf[p + 1]) << 32)


@numba.njit(cache=True, nogil=True, inline="always")
def _bucket(inner, v):
    """The bucket of ``v``: the number of boundaries ``inner`` (sorted) that are <= v."""
    lo, hi = 0, inner.shape[0]
    while lo < hi:
        mid = (lo + hi) // 2
        if inner[mid] <= v:
            lo = mid + 1
        else:
            hi = mid
    return lo


@numba.njit(cache=True, nogil=True)
def pack_requests(nodes, sizes, keys, fanouts, flags, inner, me, wire, k, nxt, every, bounds):
    """Bucket ``nodes`` (request segments of ``sizes``; ``fanouts`` ``[S, R]``) by destination
    and pack remote ones, with time bounds ``bounds[i]`` when a flag has ``TIMED``.

    ``nxt[d]`` goes into ``d``'s header; with ``every``, every other destination gets a block,
    even without nodes (it must learn ``nxt``). Returns ``(buf, send_sizes, ocount, where,
    mine)``: the buffer, its size per destination, nodes per destination, each node's position
    in destination order (stable), and the positions of destination ``me``'s nodes.
    """
    n = nodes.shape[0]
    W = inner.shape[0] + 1
    S = sizes.shape[0]
    R = fanouts.shape[1]
    timed = False
    for s in range(S):
        if flags[s] & TIMED:
            timed = True
    per_id = 1 + (k if timed else 0)
    owner = np.empty(n, np.int64)
    ocount = np.zeros(W, np.int64)
    per = np.zeros((W, S), np.int64)
    i = 0
    for s in range(S):
        for _ in range(sizes[s]):
            lo = _bucket(inner, nodes[i])
            owner[i] = lo
            ocount[lo] += 1
            per[lo, s] += 1
            i += 1
    hlen = header_words(S, k, R)
    send = np.zeros(W, np.int64)
    for d in range(W):
        if d != me and (every or ocount[d] > 0):
            send[d] = hlen + ocount[d] * per_id
    boff = np.zeros(W + 1, np.int64)  # block offsets in buf
    ooff = np.zeros(W + 1, np.int64)  # offsets in destination order
    for d in range(W):
        boff[d + 1] = boff[d] + send[d]
        ooff[d + 1] = ooff[d] + ocount[d]
    buf = np.empty(boff[W], wire.dtype)
    for d in range(W):
        if send[d] == 0:
            continue
        p = boff[d]
        _put64(buf, p, S, k)
        _put64(buf, p + k, nxt[d], k)
        p += 2 * k
        for s in range(S):
            _put64(buf, p, per[d, s], k)
            _put64(buf, p + k, keys[s], k)
            _put64(buf, p + 2 * k, flags[s], k)
            for r in range(R):
                _put64(buf, p + (3 + r) * k, fanouts[s, r], k)
            p += (3 + R) * k
    fill = ooff[:W].copy()
    where = np.empty(n, np.int64)
    mine = np.empty(ocount[me], np.int64)
    for j in range(n):
        d = owner[j]
        q = fill[d]
        fill[d] += 1
        where[j] = q
        if d == me:
            mine[q - ooff[me]] = j
        else:
            buf[boff[d] + hlen + q - ooff[d]] = nodes[j]
            if timed:
                _put64(buf, boff[d] + hlen + ocount[d] + (q - ooff[d]) * k, bounds[j], k)
    return buf, send, ocount, where, mine


@numba.njit(cache=True, nogil=True, inline="always")
def header_words(S, k, R=1):
    """Words of a request block's header for ``S`` requests of ``R`` fanouts: S, next, then
    ``3 + R`` fields each."""
    return (2 + (3 + R) * S) * k


@numba.njit(cache=True, nogil=True, inline="always")
def _request_bound(fanouts, s, rep, cap, rel_off):
    """Most neighbors one node of request ``s`` can get (fanouts ``>= 0``): over node types ``t``
    (relations ``rel_off[t]:rel_off[t + 1]``), the largest sum of :func:`_node_bound`."""
    best = np.int64(0)
    for t in range(rel_off.shape[0] - 1):
        tot = np.int64(0)
        for r in range(rel_off[t], rel_off[t + 1]):
            tot += _node_bound(fanouts[s, r], rep, cap)
        if tot > best:
            best = tot
    return best


@numba.njit(cache=True, nogil=True)
def request_bounds(fanouts, flags, cap, rel_off):
    """:func:`_request_bound` of every request (``fanouts`` ``[S, R]``)."""
    out = np.empty(fanouts.shape[0], np.int64)
    for s in range(fanouts.shape[0]):
        out[s] = _request_bound(fanouts, s, flags[s] & REPLACE, cap, rel_off)
    return out


@numba.njit(cache=True, nogil=True)
def gather_work(nodes, sizes, keys, fanouts, flags, mine, recv, rsizes, lo, k, bounds, cap,
                rel_off):
    """Kernel inputs for own nodes (``mine``) then every received request block.

    Block ``src`` starts at ``sum(rsizes[:src])`` and may end before ``rsizes[src]`` (a bound).
    Requests are numbered own ones first, then each block's in rank order. Returns ``(rows,
    keys, fanouts, replace, req, fan_table, flag_table, node_bound, time_bounds, src_nodes,
    src_flags, src_next)``: per node its row (relative to ``lo``), key, first fanout, replace
    flag, request; per request its fanouts, flags, :func:`_request_bound`; per node its time
    bound (empty unless a request has ``TIMED``); per source its node count, OR of its request
    flags and ``next`` word.
    """
    W = rsizes.shape[0]
    S = sizes.shape[0]
    R = fanouts.shape[1]
    total = mine.shape[0]
    Q = S
    timed = False
    for s in range(S):
        if flags[s] & TIMED:
            timed = True
    p = 0
    for src in range(W):
        if rsizes[src] > 0:
            S2 = _get64(recv, p, k)
            Q += S2
            for s2 in range(S2):
                total += _get64(recv, p + 2 * k + (3 + R) * k * s2, k)
                if _get64(recv, p + 4 * k + (3 + R) * k * s2, k) & TIMED:
                    timed = True
        p += rsizes[src]
    rows = np.empty(total, np.int64)
    kk = np.empty(total, np.int64)
    ff = np.empty(total, np.int64)
    rr = np.empty(total, np.uint8)
    qq = np.empty(total, np.int64)
    tb = np.empty(total if timed else 0, np.int64)
    fan_t = np.empty((Q, R), np.int64)
    flag_t = np.empty(Q, np.int64)
    bound_t = np.empty(Q, np.int64)
    src_nodes = np.zeros(W, np.int64)
    src_flags = np.zeros(W, np.int64)
    src_next = np.zeros(W, np.int64)
    for s in range(S):
        fan_t[s] = fanouts[s]
        flag_t[s] = flags[s]
        bound_t[s] = _request_bound(fanouts, s, flags[s] & REPLACE, cap, rel_off)
    # own nodes: mine is increasing, so walk the segments alongside
    seg_end = np.empty(S, np.int64)
    acc = 0
    for s in range(S):
        acc += sizes[s]
        seg_end[s] = acc
    s = 0
    for i in range(mine.shape[0]):
        j = mine[i]
        while seg_end[s] <= j:
            s += 1
        rows[i] = nodes[j] - lo
        kk[i] = keys[s]
        ff[i] = fanouts[s, 0]
        rr[i] = flags[s] & REPLACE
        qq[i] = s
        if timed:
            tb[i] = bounds[j] if flags[s] & TIMED else np.iinfo(np.int64).max
    o = mine.shape[0]
    q = S
    p = 0
    for src in range(W):
        size = rsizes[src]
        if size == 0:
            continue
        S2 = _get64(recv, p, k)
        src_next[src] = _get64(recv, p + k, k)
        h = p + 2 * k
        ids = p + header_words(S2, k, R)
        if ids > p + size:
            raise ValueError("a request block is longer than its bound")
        o0 = o
        for _s2 in range(S2):
            cnt = _get64(recv, h, k)
            key = _get64(recv, h + k, k)
            fl = _get64(recv, h + 2 * k, k)
            for r in range(R):
                fan_t[q, r] = _get64(recv, h + (3 + r) * k, k)
            flag_t[q] = fl
            bound_t[q] = _request_bound(fan_t, q, fl & REPLACE, cap, rel_off)
            h += (3 + R) * k
            src_flags[src] |= fl
            if ids + cnt > p + size:
                raise ValueError("a request block is longer than its bound")
            cnt = max(cnt, 0)  # (a negative count adds no node)
            fan = fan_t[q, 0]
            for i in range(cnt):
                u = np.uint64(o + i)
                rows[u] = np.int64(recv[np.uint64(ids + i)]) - lo
                kk[u] = key
                ff[u] = fan
                rr[u] = fl & REPLACE
                qq[u] = q
            o += cnt
            ids += cnt
            q += 1
        n_src = o - o0
        if src_flags[src] & TIMED:  # every request of a block is timed or none
            if ids + n_src * k > p + size:
                raise ValueError("a request block is longer than its bound")
            for i in range(n_src):
                tb[np.uint64(o0 + i)] = _get64(recv, np.uint64(ids + i * k), k)
        elif timed:
            for i in range(n_src):
                tb[np.uint64(o0 + i)] = np.iinfo(np.int64).max
        src_nodes[src] = n_src
        p += size
    return (rows, kk, ff, rr, qq, fan_t, flag_t, bound_t, tb, src_nodes, src_flags,
            src_next)


@numba.njit(cache=True, nogil=True, inline="always")
def _node_bound(fan, rep, cap):
    """Most neighbors one node can get at fanout ``fan >= 0``: ``fan`` with replacement, else
    at most the graph's largest degree ``cap`` too."""
    if rep != 0 or fan <= cap:
        return np.int64(fan)
    return np.int64(cap)


@numba.njit(cache=True, nogil=True, inline="always")
def _reply_words(flags, k):
    """``(words per node, words per neighbor)`` of a reply block whose requests' flags OR to
    ``flags``: a count (and the node's original id), a neighbor id (and its edge id)."""
    return (2 if flags & ORIG_IDS else 1), (1 + (k if flags & EDGE_IDS else 0))


@numba.njit(cache=True, nogil=True)
def reply_bounds(sizes, node_bound, flags, where, ocount, me, k):
    """Per destination, the most words its reply block can hold, from ``node_bound``
    (:func:`request_bounds`; fanouts ``>= 0``); :func:`pack_replies` computes the same."""
    W = ocount.shape[0]
    ooff = np.zeros(W + 1, np.int64)
    for d in range(W):
        ooff[d + 1] = ooff[d] + ocount[d]
    fl = 0
    for s in range(sizes.shape[0]):  # every request has a header in every block
        fl |= flags[s]
    F = np.zeros(W, np.int64)
    j = 0
    for s in range(sizes.shape[0]):
        b = node_bound[s]
        for _ in range(sizes[s]):
            q = where[j]
            j += 1
            lo, hi = 0, W - 1  # the destination whose run of positions holds q
            while lo < hi:
                mid = (lo + hi) // 2
                if ooff[mid + 1] <= q:
                    lo = mid + 1
                else:
                    hi = mid
            F[lo] += b
    node_w, edge_w = _reply_words(fl, k)
    out = np.zeros(W, np.int64)
    for d in range(W):
        if d != me and ocount[d] > 0:
            out[d] = ocount[d] * node_w + F[d] * edge_w
    return out


@numba.njit(cache=True, nogil=True)
def pack_replies(counts, nbr, eids, rows, orig, req, node_bound, first, src_nodes, src_flags,
                 bounded, wire, k):
    """Reply blocks for every source; with ``bounded``, also each block's bound (what
    :func:`reply_bounds` computes on the requester's side), checked.

    Sources' nodes follow each other in ``counts``, ``rows``, ``req`` from position ``first``
    in rank order; ``node_bound[req[i]]`` is the most neighbors node ``i`` may get
    (:func:`gather_work`). Returns ``(buf, sizes, bounds)`` (``bounds`` is ``sizes`` without
    ``bounded``).
    """
    W = src_nodes.shape[0]
    sizes = np.zeros(W, np.int64)
    bounds = np.zeros(W, np.int64)
    a = first
    e = 0
    for i in range(first):
        e += counts[i]
    starts = np.empty(W, np.int64)
    estarts = np.empty(W, np.int64)
    for src in range(W):
        n = src_nodes[src]
        starts[src] = a
        estarts[src] = e
        E = 0
        B = 0
        for i in range(a, a + n):
            u = np.uint64(i)
            E += counts[u]
            if bounded:
                B += node_bound[req[u]]
        if n > 0:
            node_w, edge_w = _reply_words(src_flags[src], k)
            if bounded and E > B:
                raise ValueError("a node got more neighbors than its fanout allows")
            sizes[src] = n * node_w + E * edge_w
            bounds[src] = n * node_w + (B if bounded else E) * edge_w
        a += n
        e += E
    total = 0
    for src in range(W):
        total += sizes[src]
    buf = np.empty(total, wire.dtype)
    p = 0
    for src in range(W):
        n = src_nodes[src]
        if n == 0:
            continue
        fl = src_flags[src]
        a = starts[src]
        e0 = estarts[src]
        q = p
        E = 0
        for i in range(n):
            c = counts[np.uint64(a + i)]
            buf[np.uint64(q + i)] = c
            E += c
        q += n
        if fl & ORIG_IDS:
            for i in range(n):
                buf[np.uint64(q + i)] = orig[np.uint64(rows[np.uint64(a + i)])]
            q += n
        for i in range(E):
            buf[np.uint64(q + i)] = nbr[np.uint64(e0 + i)]
        q += E
        if fl & EDGE_IDS:
            for i in range(E):
                _put64(buf, np.uint64(q + i * k), eids[np.uint64(e0 + i)], k)
            q += E * k
        p += sizes[src]
    return buf, sizes, bounds


@numba.njit(cache=True, nogil=True)
def unpack_replies(back, bsizes, ocount, me, counts_own, nbr_own, eids_own, rows_own, orig,
                   where, edge_ids, want_orig, k):
    """Every node's neighbor list (and edge ids, and original id) in the original node order.

    Own results (``counts_own`` ..., kernel rows ``rows_own``) fill destination ``me``'s slots;
    the reply blocks in ``back`` (block ``d`` starts after ``bsizes[:d]`` words and may end
    before ``bsizes[d]``) fill the others. Returns ``(counts, neighbors, edge ids, original
    ids)``; the last two are empty unless asked for.
    """
    W = ocount.shape[0]
    n = where.shape[0]
    cnt = np.empty(n, np.int64)  # per destination-order position
    src = np.empty(n, np.int64)  # start of its list: >= 0 in nbr_own, < 0: -(1 + index in back)
    esrc = np.empty(n, np.int64)  # start of its edge ids in eids_own / back
    og = np.empty(n if want_orig else 0, np.int64)
    q = 0
    p = 0
    e_own = 0
    for d in range(W):
        if d == me:
            for i in range(ocount[d]):
                c = counts_own[i]
                cnt[q] = c
                src[q] = e_own
                esrc[q] = e_own
                if want_orig:
                    og[q] = orig[rows_own[i]]
                e_own += c
                q += 1
            continue
        if ocount[d] == 0:
            continue
        nd = ocount[d]
        E = 0
        for i in range(nd):
            E += back[np.uint64(p + i)]
        o = p + nd
        e = o + (nd if want_orig else 0)
        ee = e + E
        for i in range(nd):
            c = np.int64(back[np.uint64(p + i)])
            cnt[q] = c
            src[q] = -(1 + e)
            esrc[q] = ee
            if want_orig:
                og[q] = back[np.uint64(o + i)]
            e += c
            ee += c * k
            q += 1
        p += bsizes[d]
    total = 0
    for i in range(n):
        total += cnt[i]
    out_c = np.empty(n, np.int64)
    out_n = np.empty(total, np.int64)
    out_e = np.empty(total if edge_ids else 0, np.int64)
    out_o = np.empty(n if want_orig else 0, np.int64)
    o = 0
    for j in range(n):
        q = where[j]
        c = cnt[q]
        out_c[j] = c
        if want_orig:
            out_o[j] = og[q]
        s = src[q]
        if s >= 0:
            for i in range(c):
                out_n[np.uint64(o + i)] = nbr_own[np.uint64(s + i)]
            if edge_ids:
                for i in range(c):
                    out_e[np.uint64(o + i)] = eids_own[np.uint64(s + i)]
        else:
            s = -s - 1
            for i in range(c):
                out_n[np.uint64(o + i)] = back[np.uint64(s + i)]
            if edge_ids:
                es = esrc[q]
                for i in range(c):
                    out_e[np.uint64(o + i)] = _get64(back, np.uint64(es + i * k), k)
        o += c
    return out_c, out_n, out_e, out_o


@numba.njit(cache=True, nogil=True)
def pack_lookup(keys, inner, me, lo, table, wire):
    """One pass of a lookup to the keys' owners (bucket ``d`` of the boundaries ``inner``).

    Keys of bucket ``me`` are answered here (``table[key - lo]``); the others are packed in
    bucket order (duplicates too: no sort, no hash). Returns ``(out, buf, counts, pos)``: the
    answers (own ones filled), the keys to send, their count per bucket, each one's ``out`` slot.
    """
    n = keys.shape[0]
    W = inner.shape[0] + 1
    owner = np.empty(n, np.int64)
    counts = np.zeros(W, np.int64)
    for i in range(n):
        a = _bucket(inner, keys[i])
        owner[i] = a
        if a != me:
            counts[a] += 1
    fill = np.zeros(W, np.int64)
    for d in range(1, W):
        fill[d] = fill[d - 1] + counts[d - 1]
    m = fill[W - 1] + counts[W - 1]
    buf = np.empty(m, wire.dtype)
    pos = np.empty(m, np.int64)
    out = np.empty(n, np.int64)
    for i in range(n):
        d = owner[i]
        if d == me:
            out[i] = table[keys[i] - lo]
        else:
            q = fill[d]
            fill[d] += 1
            buf[q] = keys[i]
            pos[q] = i
    return out, buf, counts, pos


@numba.njit(cache=True, nogil=True)
def answer_lookup(keys, lo, table, wire):
    """``table[key - lo]`` of every received key, as wire words."""
    out = np.empty(keys.shape[0], wire.dtype)
    for i in range(keys.shape[0]):
        out[i] = table[np.int64(keys[i]) - lo]
    return out
