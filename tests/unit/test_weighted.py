"""Weighted neighbor sampling: target law, zero weights, counts, determinism, validation."""

from __future__ import annotations

import itertools

import numba
import numpy as np
import pytest
from scipy import stats

from mnmg_sampler.errors import EdgeWeightError, GraphFormatError
from mnmg_sampler.graph.csr import CSRGraph
from mnmg_sampler.ops import cpu
from mnmg_sampler.ops.weighted import (
    REBUILD_AFTER,
    check_weights,
    local_weighted_hop_fn,
    sample_neighbors_weighted,
)
from mnmg_sampler.sampling.sampler import MultiHopSampler, SampleRequest

P_MIN = 1e-4  # fixed seeds and keys: deterministic, so these tests cannot flake
KEYS = 40_000


def _star(weights):
    """Node ``d`` has in-neighbors ``0..d-1`` in CSR order (neighbor id == row position)."""
    d = len(weights)
    g = CSRGraph.from_edges(np.arange(d), np.full(d, d), d + 1)
    w = np.zeros(g.num_edges, np.float32)
    w[g.indptr[d]:g.indptr[d + 1]] = weights
    return g, w


def _run(g, w, nodes, keys, fanout, replace=False, seed=0, hop=0, eids=True, **kw):
    nodes = np.asarray(nodes, np.int64)
    keys = np.broadcast_to(np.asarray(keys, np.int64), nodes.shape)
    return sample_neighbors_weighted(g.indptr, g.indices, g.edge_ids if eids else None, w,
                                     nodes, nodes, keys, seed, hop, fanout, replace, **kw)


def _ordered_probs(w, k):
    """Exact probability of every ordered k-tuple of successive sampling (PPSWOR)."""
    w = np.asarray(w, np.float64)
    out = {}
    for t in itertools.permutations(np.flatnonzero(w > 0).tolist(), k):
        p, left = 1.0, w.sum()
        for v in t:
            p *= w[v] / left
            left -= w[v]
        out[t] = p
    return out


def _chi2_ordered(picks, probs):
    cells = list(probs)
    index = {t: i for i, t in enumerate(cells)}
    obs = np.bincount([index[tuple(r)] for r in picks.tolist()], minlength=len(cells))
    exp = np.array([probs[t] for t in cells]) * picks.shape[0]
    assert exp.min() >= 5  # the chi-square approximation holds
    return stats.chisquare(obs, exp).pvalue


@pytest.mark.parametrize("weights", [
    [1, 2, 3, 4, 0, 5, 1, 4],
    [2000, 1, 1, 0, 1, 3],  # one dominant weight: draws after it are mostly rejected -> rebuild
])
def test_without_replacement_matches_successive_sampling(weights):
    g, w = _star(weights)
    d, k = len(weights), 3
    counts, nbr, _ = _run(g, w, np.full(KEYS, d), np.arange(KEYS) * 7 + 3, k)
    assert (counts == k).all()
    picks = nbr.reshape(KEYS, k)
    assert (w[picks] > 0).all()  # zero weight never drawn
    assert all(len(set(r)) == k for r in picks.tolist())  # no repeats
    probs = _ordered_probs(weights, k)
    if max(weights) > 1000:  # the rare orders (dominant weight not first) are too rare to bin
        probs = {t: p for t, p in probs.items() if t[0] == 0}
        picks = picks[picks[:, 0] == 0]
        total = sum(probs.values())
        probs = {t: p / total for t, p in probs.items()}
        # the dominant neighbor is always taken, and first with probability w0 / sum(w)
        assert (nbr.reshape(KEYS, k) == 0).any(axis=1).all()
    assert _chi2_ordered(picks, probs) > P_MIN
    # inclusion frequencies: each neighbor's count against the exact inclusion probability
    full = _ordered_probs(weights, k)
    incl = np.zeros(d)
    for t, p in full.items():
        incl[list(t)] += p
    got = np.bincount(nbr, minlength=d)
    nz = incl > 0
    assert stats.chisquare(got[nz], incl[nz] / incl.sum() * got.sum()).pvalue > P_MIN


def test_rebuild_path_is_taken_and_exact():
    """With one huge weight, the second draw needs the rebuilt sums: its law is w / (W - w0)."""
    weights = [1e6, 1, 2, 3, 4]
    g, w = _star(weights)
    counts, nbr, _ = _run(g, w, np.full(KEYS, 5), np.arange(KEYS), 2)
    picks = nbr.reshape(KEYS, 2)
    assert (picks[:, 0] == 0).mean() > 0.99
    second = picks[picks[:, 0] == 0, 1]
    # a rejection sampler would need ~1e5 draws per second pick; REBUILD_AFTER bounds it
    assert REBUILD_AFTER < 100
    exp = np.array(weights[1:]) / sum(weights[1:]) * second.size
    assert stats.chisquare(np.bincount(second, minlength=5)[1:], exp).pvalue > P_MIN


def test_with_replacement_matches_weights():
    weights = [1, 2, 0, 3, 4, 5, 1]
    g, w = _star(weights)
    d, k = len(weights), 3
    counts, nbr, _ = _run(g, w, np.full(KEYS, d), np.arange(KEYS) * 5 + 1, k, replace=True)
    assert (counts == k).all()
    picks = nbr.reshape(KEYS, k)
    p = np.array(weights, np.float64) / sum(weights)
    nz = p > 0
    assert (picks != 2).all()
    assert stats.chisquare(np.bincount(nbr, minlength=d)[nz], p[nz] * nbr.size).pvalue > P_MIN
    # draws are independent: the joint law of (draw 0, draw 1) is the product
    pair = picks[:, 0] * d + picks[:, 1]
    joint = np.outer(p, p).ravel()
    obs = np.bincount(pair, minlength=d * d)
    keep = joint > 0
    assert obs[~keep].sum() == 0
    assert stats.chisquare(obs[keep], joint[keep] * KEYS).pvalue > P_MIN


def test_equal_weights_give_a_uniform_sample():
    g, w = _star([2.5] * 10)
    counts, nbr, _ = _run(g, w, np.full(KEYS // 2, 10), np.arange(KEYS // 2), 3)
    picks = np.sort(nbr.reshape(-1, 3), axis=1)
    assert (counts == 3).all() and (picks[:, 1:] != picks[:, :-1]).all()
    subsets = {s: i for i, s in enumerate(itertools.combinations(range(10), 3))}
    freq = np.bincount([subsets[tuple(r)] for r in picks.tolist()], minlength=120)
    assert stats.chisquare(freq).pvalue > P_MIN


def _random_weighted(n=300, m=6000, seed=0, zero=0.3):
    r = np.random.default_rng(seed)
    g = CSRGraph.from_edges(r.integers(0, n, m), r.integers(0, n, m), n)
    w = r.random(m).astype(np.float32) + np.float32(0.01)
    w[r.random(m) < zero] = 0
    # a few rows with only zero weights, and one heavy row
    for v in (3, 4, 5):
        w[g.indptr[v]:g.indptr[v + 1]] = 0
    return g, w


def _nonzero_per_row(g, w):
    return np.array([(w[g.indptr[v]:g.indptr[v + 1]] > 0).sum() for v in range(g.num_nodes)])


@pytest.mark.parametrize("fanout", [1, 4, 25, -1, 0])
@pytest.mark.parametrize("replace", [False, True])
def test_counts_edges_exist_and_zero_weights_never_drawn(fanout, replace):
    g, w = _random_weighted()
    nodes = np.arange(g.num_nodes)
    counts, nbr, eid = _run(g, w, nodes, 11, fanout, replace)
    nz = _nonzero_per_row(g, w)
    if fanout < 0:
        expect = nz
    elif replace:
        expect = np.where(nz > 0, fanout, 0)
    else:
        expect = np.minimum(nz, fanout)
    np.testing.assert_array_equal(counts, expect)
    assert counts[3:6].sum() == 0  # all-zero rows yield nothing
    _, _, pos = _run(g, w, nodes, 11, fanout, replace, eids=False)
    assert (w[pos] > 0).all()
    np.testing.assert_array_equal(g.indices[pos], nbr)
    np.testing.assert_array_equal(g.edge_ids[pos], eid)
    tgt = np.repeat(nodes, counts)
    assert ((pos >= g.indptr[tgt]) & (pos < g.indptr[tgt + 1])).all()
    if not replace:
        for v in range(g.num_nodes):
            seg = pos[counts[:v].sum():counts[:v + 1].sum()]
            assert np.unique(seg).size == seg.size
    if fanout < 0:  # every positive-weight neighbor, in CSR order
        np.testing.assert_array_equal(pos, np.flatnonzero(w > 0))


def test_deterministic_threads_composition_and_no_eids():
    g, w = _random_weighted(n=3000, m=60_000, seed=2)
    nodes = np.random.default_rng(1).integers(0, 3000, 6000)
    keys = nodes * 13 + 7
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = _run(g, w, nodes, keys, 5)
        numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
        two = _run(g, w, nodes, keys, 5)
    finally:
        numba.set_num_threads(before)
    for x, y in zip(one, two, strict=True):
        np.testing.assert_array_equal(x, y)
    # a node's draws do not depend on the other nodes of the call
    sub = np.arange(0, 6000, 37)
    c, nb, _ = _run(g, w, nodes[sub], keys[sub], 5)
    off = np.concatenate([[0], np.cumsum(one[0])])
    np.testing.assert_array_equal(nb, np.concatenate([one[1][off[i]:off[i + 1]] for i in sub]))
    # no edge ids: same neighbors, empty ids; another key changes the draws
    c2, nb2, e2 = _run(g, w, nodes, keys, 5, with_eids=False)
    np.testing.assert_array_equal(nb2, one[1])
    assert e2.size == 0
    assert not np.array_equal(_run(g, w, nodes, keys + 1, 5)[1], one[1])


@pytest.mark.parametrize("replace", [False, True])
def test_unvalidated_bad_weights_count_as_zero(replace):
    """The kernels do not raise on weights check_weights rejects, nor hang: they never draw them."""
    g, w = _random_weighted(seed=6)
    r = np.random.default_rng(3)
    bad = r.random(w.size) < 0.2
    w[bad] = r.choice(np.array([-1.0, np.nan, np.inf, -np.inf], np.float32), bad.sum())
    nodes = np.arange(g.num_nodes)
    counts, _, pos = _run(g, w, nodes, 5, 6, replace, eids=False)
    assert pos.size > 0 and (w[pos] > 0).all() and np.isfinite(w[pos]).all()
    clean = np.where(bad, np.float32(0), w)
    np.testing.assert_array_equal(counts, _run(g, clean, nodes, 5, 6, replace)[0])
    np.testing.assert_array_equal(pos, _run(g, clean, nodes, 5, 6, replace, eids=False)[2])


def test_check_weights():
    np.testing.assert_array_equal(check_weights([0, 1.5, 2], 3), np.array([0, 1.5, 2], np.float32))
    assert check_weights(np.arange(3), 3).dtype == np.float32
    for bad in ([1, -1, 2], [1, np.nan, 2], [1, np.inf, 2], [1e39, 1, 1]):
        with pytest.raises(EdgeWeightError, match="entry"):
            check_weights(np.array(bad, np.float64), 3)
    with pytest.raises(EdgeWeightError, match="shape"):
        check_weights([1, 2], 3)
    with pytest.raises(GraphFormatError):  # a GraphFormatError, so loaders' handlers catch it
        check_weights(np.array(["a", "b"]), 2)


def test_local_weighted_hop_fn_samples_positive_edges_only():
    g, w = _random_weighted(seed=4)
    s = MultiHopSampler(local_weighted_hop_fn(g, w, seed=3), g.num_nodes)
    seeds = np.arange(0, 300, 3)
    (b,) = s.sample([SampleRequest(seeds, [4, 3], key=9)])
    assert b.e_id.numel() > 0
    pos = np.argsort(g.edge_ids)[b.e_id.numpy()]  # edge id -> CSR position
    assert (w[pos] > 0).all()
    (again,) = s.sample([SampleRequest(seeds, [4, 3], key=9)])
    assert np.array_equal(b.e_id.numpy(), again.e_id.numpy())
    (lean,) = s.sample([SampleRequest(seeds, [4, 3], key=9, edge_ids=False)])
    assert lean.e_id.numel() == 0
    assert np.array_equal(lean.n_id.numpy(), b.n_id.numpy())
    assert np.array_equal(lean.edge_index.numpy(), b.edge_index.numpy())
    # equal weights draw exactly like the uniform kernel would count them
    ones = np.ones(g.num_edges, np.float32)
    (u,) = MultiHopSampler(local_weighted_hop_fn(g, ones, seed=3), g.num_nodes).sample(
        [SampleRequest(seeds, [4], key=9)])
    c_uniform = cpu.sample_neighbors(g.indptr, g.indices, None, seeds, seeds, 9, 3, 0, 4,
                                     False)[0]
    assert u.e_id.numel() == c_uniform.sum()
    with pytest.raises(EdgeWeightError):
        local_weighted_hop_fn(g, -ones, seed=3)
