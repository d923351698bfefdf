"""The one-hop CPU kernel: valid edges, exact counts, uniform draws, determinism, threads."""

from __future__ import annotations

import itertools

import numba
import numpy as np
import pytest
from scipy import stats

from mnmg_sampler.graph.csr import CSRGraph
from mnmg_sampler.ops import cpu, rng

P_MIN = 1e-4  # fixed threshold; keys are deterministic, so the chi-square tests never flake


def _random_graph(n=200, m=3000, seed=0, **kw) -> CSRGraph:
    g = np.random.default_rng(seed)
    return CSRGraph.from_edges(g.integers(0, n, m), g.integers(0, n, m), n, **kw)


def _run(graph, nodes, keys, fanout, replace=False, seed=0, hop=0, eids=True):
    nodes = np.asarray(nodes, np.int64)
    keys = np.broadcast_to(np.asarray(keys, np.int64), nodes.shape)
    return cpu.sample_neighbors(graph.indptr, graph.indices, graph.edge_ids if eids else None,
                                nodes, nodes, keys, seed, hop, fanout, replace)


def _split(counts, arr):
    off = np.concatenate([[0], np.cumsum(counts)])
    return [arr[off[i]:off[i + 1]] for i in range(len(counts))]


def _reference(graph, node, key, fanout, replace, seed=0, hop=0):
    """Plain-Python specification: rng draws + Floyd's algorithm; returns CSR positions."""
    deg = int(graph.indptr[node + 1] - graph.indptr[node])
    with np.errstate(over="ignore"):
        base = rng.stream_base(np.uint64(seed), np.uint64(key), np.uint64(hop), np.uint64(node))

        def b(i, n):
            return int(rng.bounded(rng.draw(base, np.uint64(i)), np.uint64(n)))

        if deg == 0:
            return []
        if fanout < 0 or (not replace and deg <= fanout):
            return list(range(deg))
        if replace:
            return [b(j, deg) for j in range(fanout)]
        out: list[int] = []
        for i in range(fanout):
            j = deg - fanout + i
            t = b(i, j + 1)
            out.append(j if t in out else t)
        return out


@pytest.mark.parametrize("fanout", [1, 3, 10, -1])
@pytest.mark.parametrize("replace", [False, True])
def test_edges_exist_counts_and_eids(fanout, replace):
    g = _random_graph()
    nodes = np.arange(g.num_nodes)
    counts, nbr, eid = _run(g, nodes, 5, fanout, replace)
    deg = g.degrees()
    if fanout < 0:
        expect = deg
    elif replace:
        expect = np.where(deg > 0, fanout, 0)
    else:
        expect = np.minimum(deg, fanout)
    np.testing.assert_array_equal(counts, expect)
    assert nbr.size == eid.size == counts.sum()
    # every (neighbor -> node) is an input edge, and e_id names exactly that edge
    src = g.indices[np.argsort(g.edge_ids)]  # input edge list, by id
    dst = np.repeat(np.arange(g.num_nodes), deg)[np.argsort(g.edge_ids)]
    tgt = np.repeat(nodes, counts)
    np.testing.assert_array_equal(src[eid], nbr)
    np.testing.assert_array_equal(dst[eid], tgt)


def test_no_repeated_positions_without_replacement():
    # a multigraph: repeated (src, dst) pairs are distinct edges, so check positions (edge ids)
    g = _random_graph(n=30, m=3000, seed=1)
    counts, _, eid = _run(g, np.arange(30), np.arange(30) * 7 + 1, 13)
    for e in _split(counts, eid):
        assert np.unique(e).size == e.size
    assert (counts == np.minimum(g.degrees(), 13)).all()


def test_all_neighbors_in_csr_order_when_fanout_covers_degree():
    g = _random_graph()
    nodes = np.arange(g.num_nodes)
    for fan in (-1, int(g.degrees().max())):
        counts, nbr, eid = _run(g, nodes, 3, fan)
        np.testing.assert_array_equal(counts, g.degrees())
        np.testing.assert_array_equal(nbr, g.indices)
        np.testing.assert_array_equal(eid, g.edge_ids)


def test_csr_positions_as_edge_ids_when_eids_none():
    g = _random_graph()
    counts, nbr, pos = _run(g, np.arange(g.num_nodes), 9, 4, eids=False)
    np.testing.assert_array_equal(g.indices[pos], nbr)
    starts = np.repeat(g.indptr[:-1], counts)
    ends = np.repeat(g.indptr[1:], counts)
    assert ((pos >= starts) & (pos < ends)).all()


def test_empty_input_and_isolated_nodes():
    g = CSRGraph.from_edges(np.array([0, 1]), np.array([1, 2]), 5)
    counts, nbr, eid = _run(g, [], 0, 3)
    assert counts.size == nbr.size == eid.size == 0
    counts, nbr, _ = _run(g, [0, 3, 4, 1], 0, 3, replace=True)
    np.testing.assert_array_equal(counts, [0, 0, 0, 3])
    np.testing.assert_array_equal(nbr, [0, 0, 0])


@pytest.mark.parametrize("replace", [False, True])
def test_matches_plain_python_specification(replace):
    g = _random_graph(n=50, m=800, seed=3)
    nodes = np.arange(50)
    keys = np.array([rng.request_key(1, 0, i) for i in range(50)], np.int64)
    counts, nbr, eid = _run(g, nodes, keys, 6, replace, seed=11, hop=2, eids=False)
    for v, pos in zip(nodes, _split(counts, eid), strict=True):
        ref = _reference(g, int(v), int(keys[v]), 6, replace, seed=11, hop=2)
        np.testing.assert_array_equal(pos - g.indptr[v], ref)


@pytest.mark.parametrize("fanout", [15, 40, 63])
def test_matches_specification_on_wide_rows(fanout):
    """Rows of degree <= 64 and > 64 take different duplicate tests in Floyd's algorithm."""
    g = np.random.default_rng(8)
    deg = np.concatenate([g.integers(fanout + 1, 65, 30), g.integers(65, 300, 30)])
    graph = CSRGraph.from_edges(g.integers(0, 60, deg.sum()), np.repeat(np.arange(60), deg), 60)
    assert (deg <= 64).any() and (deg > 64).any()
    nodes = np.arange(60)
    keys = nodes * 1009 + 3
    counts, _, pos = _run(graph, nodes, keys, fanout, eids=False, seed=4, hop=1)
    for v, p in zip(nodes, _split(counts, pos), strict=True):
        ref = _reference(graph, int(v), int(keys[v]), fanout, False, seed=4, hop=1)
        np.testing.assert_array_equal(p - graph.indptr[v], ref)


@pytest.mark.parametrize("replace", [False, True])
def test_without_edge_ids_and_int32_ids(replace):
    """``with_eids=False`` only drops the edge ids; int32 rows/nodes give the same draws."""
    g = _random_graph(seed=9)
    nodes = np.random.default_rng(2).integers(0, g.num_nodes, 500)
    keys = nodes * 13 + 1
    full = cpu.sample_neighbors(g.indptr, g.indices, g.edge_ids, nodes, nodes, keys, 3, 1, 4,
                                replace)
    n32 = nodes.astype(np.int32)
    for e in (g.edge_ids, None):
        counts, nbr, eid = cpu.sample_neighbors(g.indptr, g.indices, e, n32, n32, keys, 3, 1, 4,
                                                replace, with_eids=False)
        np.testing.assert_array_equal(counts, full[0])
        np.testing.assert_array_equal(nbr, full[1])
        assert eid.size == 0 and nbr.dtype == np.int64
    counts, nbr, eid = cpu.sample_neighbors(g.indptr, g.indices, g.edge_ids, n32, n32, keys, 3,
                                            1, 4, replace)
    for x, y in zip((counts, nbr, eid), full, strict=True):
        np.testing.assert_array_equal(x, y)


def test_per_node_fanouts_and_replace_arrays():
    g = _random_graph(seed=4)
    nodes = np.arange(g.num_nodes)
    fan = np.array([1, 3, -1, 7] * 50, np.int64)
    rep = np.array([0, 1] * 100, np.uint8)
    counts, nbr, eid = _run(g, nodes, 2, fan, rep)
    # each node's draws equal those of a call with that node's scalar fanout/replace
    for v in range(0, g.num_nodes, 17):
        c1, n1, e1 = _run(g, [v], 2, int(fan[v]), bool(rep[v]))
        off = counts[:v].sum()
        np.testing.assert_array_equal(nbr[off:off + counts[v]], n1)
        np.testing.assert_array_equal(eid[off:off + counts[v]], e1)


def test_same_key_identical_different_keys_differ():
    g = _random_graph(seed=5)
    nodes = np.arange(g.num_nodes)
    a = _run(g, nodes, 123, 3)
    b = _run(g, nodes, 123, 3)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
    c = _run(g, nodes, 124, 3)
    np.testing.assert_array_equal(a[0], c[0])  # counts depend only on degree and fanout
    assert not np.array_equal(a[1], c[1])
    # different seed and different hop also change the draws
    assert not np.array_equal(a[1], _run(g, nodes, 123, 3, seed=1)[1])
    assert not np.array_equal(a[1], _run(g, nodes, 123, 3, hop=1)[1])


def test_result_independent_of_call_composition():
    """A node's draws do not depend on which other nodes share the call, or their order."""
    g = _random_graph(seed=6)
    nodes = np.arange(g.num_nodes)
    keys = nodes * 31 + 5
    counts, nbr, _ = _run(g, nodes, keys, 4)
    perm = np.random.default_rng(0).permutation(g.num_nodes)[:80]
    c2, n2, _ = _run(g, perm, keys[perm], 4)
    full = _split(counts, nbr)
    for v, got in zip(perm, _split(c2, n2), strict=True):
        np.testing.assert_array_equal(got, full[v])


def test_thread_count_invariance():
    g = _random_graph(n=2000, m=40_000, seed=7)
    nodes = np.random.default_rng(1).integers(0, 2000, 5000)
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = _run(g, nodes, 77, 5)
        numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
        two = _run(g, nodes, 77, 5)
    finally:
        numba.set_num_threads(before)
    for x, y in zip(one, two, strict=True):
        np.testing.assert_array_equal(x, y)


# --- uniformity: one node of degree 10, many keys ---------------------------------------------

DEG, FAN, KEYS = 10, 3, 20_000


def _star():
    # node DEG has in-neighbors 0..DEG-1 in CSR order, so neighbor id == position
    return CSRGraph.from_edges(np.arange(DEG), np.full(DEG, DEG), DEG + 1)


@pytest.mark.parametrize("keyset", ["sequential", "request_key"])
def test_uniform_without_replacement(keyset):
    g = _star()
    keys = (np.arange(KEYS, dtype=np.int64) if keyset == "sequential"
            else np.array([rng.request_key(0, 0, b) for b in range(KEYS)], np.int64))
    counts, nbr, _ = _run(g, np.full(KEYS, DEG), keys, FAN)
    assert (counts == FAN).all()
    picks = nbr.reshape(KEYS, FAN)
    assert (np.sort(picks, axis=1)[:, 1:] != np.sort(picks, axis=1)[:, :-1]).all()
    # each position appears with probability 3/10
    assert stats.chisquare(np.bincount(picks.ravel(), minlength=DEG)).pvalue > P_MIN
    # every one of the C(10, 3) = 120 subsets is equally likely
    subsets = {s: i for i, s in enumerate(itertools.combinations(range(DEG), FAN))}
    idx = [subsets[tuple(row)] for row in np.sort(picks, axis=1).tolist()]
    freq = np.bincount(idx, minlength=len(subsets))
    assert freq.size == 120 and (freq > 0).all()
    assert stats.chisquare(freq).pvalue > P_MIN
    # Floyd's algorithm makes the *set* uniform, not the order within it: slot 0 is drawn from
    # [0, deg - fanout] only. Aggregations are order-free, so only the set is promised.
    assert picks[:, 0].max() == DEG - FAN


def test_uniform_with_replacement():
    g = _star()
    keys = np.arange(KEYS, dtype=np.int64) * 3 + 1
    counts, nbr, _ = _run(g, np.full(KEYS, DEG), keys, FAN, replace=True)
    assert (counts == FAN).all()
    picks = nbr.reshape(KEYS, FAN)
    assert stats.chisquare(np.bincount(picks.ravel(), minlength=DEG)).pvalue > P_MIN
    # the 3 draws are independent: joint distribution over the 1000 ordered triples
    triples = picks[:, 0] * 100 + picks[:, 1] * 10 + picks[:, 2]
    assert stats.chisquare(np.bincount(triples, minlength=1000)).pvalue > P_MIN
    # repeats happen as often as they should: P(all distinct) = 10*9*8/1000 = 0.72
    distinct = (picks[:, 0] != picks[:, 1]) & (picks[:, 0] != picks[:, 2]) & (
        picks[:, 1] != picks[:, 2])
    assert stats.binomtest(int(distinct.sum()), KEYS, 0.72).pvalue > P_MIN


def test_uniform_across_nodes_with_one_key():
    """With one key, many different nodes' draws are uniform too (the node counter mixes)."""
    n = 4000
    src = np.tile(np.arange(DEG), n)
    dst = np.repeat(np.arange(n), DEG)
    g = CSRGraph.from_edges(src, dst, n)
    counts, nbr, _ = _run(g, np.arange(n), 99, 2)
    picks = nbr.reshape(n, 2)
    pair = np.sort(picks, axis=1)
    idx = pair[:, 0] * DEG + pair[:, 1]
    freq = np.bincount(idx, minlength=DEG * DEG)
    freq = freq[[a * DEG + b for a in range(DEG) for b in range(a + 1, DEG)]]
    assert stats.chisquare(freq).pvalue > P_MIN
