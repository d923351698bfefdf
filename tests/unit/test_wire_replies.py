"""One distributed hop between two simulated ranks, in one process: the reply block the owner
packs has exactly the size the requester computes without being told (a bounded exchange), and
the requester unpacks every node's neighbors, edge ids and original id in frontier order, equal
to sampling the whole frontier in place."""

from __future__ import annotations

import numpy as np
import pytest

from mnmg_sampler.graph.csr import CSRGraph
from mnmg_sampler.ops import wire
from mnmg_sampler.sampling.sampler import run_cpu_kernel

SEED, HOP = 5, 1


def _graph() -> CSRGraph:
    rng = np.random.default_rng(2)
    n = 120
    src = np.concatenate([rng.integers(0, n, 900), np.zeros(40, np.int64)])  # node 0: a hub
    dst = np.concatenate([rng.integers(0, n - 8, 900), rng.integers(0, n, 40)])
    return CSRGraph.from_edges(src, dst, n)


@pytest.mark.parametrize("word", [np.int32, np.int64])
@pytest.mark.parametrize("bits", [0, wire.EDGE_IDS, wire.ORIG_IDS, wire.EDGE_IDS | wire.ORIG_IDS])
def test_bounded_reply_sizes_agree_and_unpack_in_frontier_order(word, bits):
    g = _graph()
    n = g.num_nodes
    k = 8 // np.dtype(word).itemsize
    w0 = np.empty(0, word)
    inner = np.array([n // 2], np.int64)
    empty = np.empty(0, np.int64)  # rank 0 owns [0, n/2), rank 1 the rest
    cap = int(np.diff(g.indptr).max())
    orig = (np.arange(n, dtype=np.int64) * 7 + 3) % 1000  # a row's "original id"
    rng = np.random.default_rng(int(bits) + k)
    # rank 0's frontier: three requests; one with replacement and a fanout above every degree
    sizes = np.array([9, 14, 6], np.int64)
    nodes = rng.integers(0, n, int(sizes.sum())).astype(np.int64)
    nodes[0] = 0  # the hub
    keys = np.array([11, 12, 13], np.int64)
    fans = np.array([3, cap + 4, 0], np.int64)
    flags = np.array([0, wire.REPLACE, 0], np.int64) | bits
    nxt = np.array([0, 77], np.int64)  # the bound of rank 0's next block to rank 1
    fan2 = fans[:, None]
    rel_off = np.array([0, 1], np.int64)
    buf, send, ocount, where, mine = wire.pack_requests(nodes, sizes, keys, fan2, flags, inner,
                                                        0, w0, k, nxt, True, empty)
    # rank 1 (owner, no frontier of its own) serves rank 0's block
    lo1 = n // 2
    # received into a buffer of a bound larger than the block: the block says its own size
    recv = np.zeros(buf.size + 5, buf.dtype)
    recv[:buf.size] = buf
    rows, kk, ff, rr, req, _, _, node_bound, _, src_nodes, src_flags, src_next = \
        wire.gather_work(empty, empty, empty, np.empty((0, 1), np.int64), empty, empty, recv,
                         np.array([recv.size, 0]), lo1, k, empty, cap, rel_off)
    assert src_next.tolist() == [77, 0] and src_nodes[0] == ocount[1]
    edge = bool(bits & wire.EDGE_IDS)
    c, nb, e = run_cpu_kernel(g.indptr, g.indices, g.edge_ids, rows + lo1, rows + lo1, kk, SEED,
                              HOP, ff, rr, True)
    out, rsz, rbound = wire.pack_replies(c, nb, e, rows, orig[lo1:], req, node_bound, 0,
                                         src_nodes, src_flags, True, w0, k)
    bound = wire.reply_bounds(sizes, wire.request_bounds(fan2, flags, cap, rel_off), flags,
                              where, ocount, 0, k)
    assert rbound.tolist() == bound[::-1].tolist()  # rank 1's bound to 0 == what 0 expects of 1
    assert out.size == rsz.sum() <= rbound.sum()  # the block itself is not padded
    back = np.zeros(int(bound.sum()), out.dtype)  # what rank 0 receives: a buffer of the bound
    back[:out.size] = out
    # rank 0 samples its own nodes and unpacks
    lo0 = 0
    keys_n, fans_n, reps_n = (np.repeat(keys, sizes), np.repeat(fans, sizes),
                              np.repeat(flags & wire.REPLACE, sizes).astype(np.uint8))
    own_rows = nodes[mine] - lo0
    oc, onb, oe = run_cpu_kernel(g.indptr, g.indices, g.edge_ids, own_rows, own_rows,
                                 keys_n[mine], SEED, HOP, fans_n[mine], reps_n[mine], True)
    want_o = bool(bits & wire.ORIG_IDS)
    counts, nbr, eid, origs = wire.unpack_replies(back, bound, ocount, 0, oc, onb, oe, own_rows,
                                                  orig, where, edge, want_o, k)
    wc, wn, we = run_cpu_kernel(g.indptr, g.indices, g.edge_ids, nodes, nodes, keys_n, SEED, HOP,
                                fans_n, reps_n, True)
    assert np.array_equal(counts, wc) and np.array_equal(nbr, wn)
    assert np.array_equal(eid, we) if edge else eid.size == 0
    assert np.array_equal(origs, orig[nodes]) if want_o else origs.size == 0


def test_lookup_packs_by_owner_and_answers_its_own():
    inner = np.array([10, 20], np.int64)  # three ranks: [0, 10), [10, 20), [20, ...)
    table = np.arange(100, 110, dtype=np.int64)  # rank 1's rows
    keys = np.array([25, 3, 12, 3, 21, 15], np.int64)
    out, send, counts, pos = wire.pack_lookup(keys, inner, 1, 10, table, np.empty(0, np.int32))
    assert counts.tolist() == [2, 0, 2]
    assert send.tolist() == [3, 3, 25, 21] and send.dtype == np.int32  # repeats travel
    assert pos.tolist() == [1, 3, 0, 4]
    assert out[2] == 102 and out[5] == 105  # own keys answered here
    ans = wire.answer_lookup(np.array([12, 10], np.int32), 10, table, np.empty(0, np.int32))
    assert ans.tolist() == [102, 100] and ans.dtype == np.int32
