"""Negative sampling: uniform (chi-square, fixed seed), keyed draws, rejection, membership, and
with node time uniform over the nodes no later than the positive."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mnmg_sampler.errors import SamplingInputError
from mnmg_sampler.graph.csr import CSRGraph
from mnmg_sampler.ops.negative import (
    AdmissibleNodes,
    NegativeSampling,
    csr_has_edges,
    negative_candidates,
    sample_negatives,
)


def chi2_upper(dof: int, z: float = 4.0) -> float:
    """Wilson-Hilferty approximation of the chi-square quantile at ``z`` standard deviations."""
    a = 2.0 / (9.0 * dof)
    return dof * (1.0 - a + z * math.sqrt(a)) ** 3


def chi2_stat(counts: np.ndarray) -> float:
    e = counts.sum() / counts.size
    return float(((counts - e) ** 2 / e).sum())


def test_negatives_are_uniform_over_destinations():
    n = 997
    src = np.arange(4000) % 50
    neg = sample_negatives(src, np.arange(4000), seed=7, key=123, amount=50, num_nodes=n)
    counts = np.bincount(neg.ravel(), minlength=n)
    assert neg.min() >= 0 and neg.max() < n
    stat = chi2_stat(counts)
    assert stat < chi2_upper(n - 1), stat
    # a skewed sampler fails the same check: the test has power
    skew = np.minimum(neg.ravel(), neg.ravel() // 2 + 300) % n
    assert chi2_stat(np.bincount(skew, minlength=n)) > chi2_upper(n - 1)


def test_negatives_are_keyed_on_position_not_on_batch_composition():
    pos = np.arange(100, 160)
    src = pos % 7
    a = sample_negatives(src, pos, seed=1, key=9, amount=3, num_nodes=500)
    # any subset / order of the same positives draws the same negatives for each of them
    perm = np.random.default_rng(0).permutation(pos.size)[:25]
    b = sample_negatives(src[perm], pos[perm], seed=1, key=9, amount=3, num_nodes=500)
    assert np.array_equal(a[perm], b)
    assert not np.array_equal(a, sample_negatives(src, pos, seed=1, key=10, amount=3,
                                                  num_nodes=500))
    assert not np.array_equal(a, sample_negatives(src, pos, seed=2, key=9, amount=3,
                                                  num_nodes=500))
    # draw d of attempt 0 is candidate slot d
    assert np.array_equal(a[:, 1], negative_candidates(1, 9, pos, np.ones(pos.size), 500))


def _dense_graph():
    rng = np.random.default_rng(4)
    n = 30
    src, dst = rng.integers(0, n, 500), rng.integers(0, n, 500)
    return CSRGraph.from_edges(src, dst, n, drop_duplicates=True)


def _edge_set(g: CSRGraph) -> set:
    dst = np.repeat(np.arange(g.num_nodes), g.degrees())
    return set(zip(g.indices.tolist(), dst.tolist(), strict=True))


def test_membership_scan_matches_edge_set():
    g = _dense_graph()
    edges = _edge_set(g)
    s, d = np.meshgrid(np.arange(g.num_nodes), np.arange(g.num_nodes))
    s, d = s.ravel(), d.ravel()
    got = csr_has_edges(g.indptr, g.indices, d, s)
    want = np.array([(a, b) in edges for a, b in zip(s.tolist(), d.tolist(), strict=True)])
    assert np.array_equal(got, want) and want.any() and not want.all()


def test_rejection_never_returns_a_known_edge_and_keeps_accepted_draws():
    g = _dense_graph()  # ~40% of all pairs are edges: many rejections
    edges = _edge_set(g)
    pos = np.arange(300)
    src = pos % g.num_nodes
    calls = []

    def known(s, d):
        calls.append(s.size)
        return csr_has_edges(g.indptr, g.indices, d, s)

    neg = sample_negatives(src, pos, seed=3, key=5, amount=4, num_nodes=g.num_nodes,
                           known=known)
    for i in range(pos.size):
        for v in neg[i]:
            assert (int(src[i]), int(v)) not in edges
    assert len(calls) > 1 and calls[1] < calls[0]  # only rejected draws are redrawn
    plain = sample_negatives(src, pos, seed=3, key=5, amount=4, num_nodes=g.num_nodes)
    ok = ~known(np.repeat(src, 4), plain.ravel()).reshape(plain.shape)
    assert np.array_equal(neg[ok], plain[ok])


def test_rejection_gives_up_with_a_typed_error():
    g = CSRGraph.from_edges(np.zeros(5, np.int64), np.arange(5), 5)  # 0 -> every node
    with pytest.raises(SamplingInputError, match="known edge"):
        sample_negatives(np.zeros(3, np.int64), np.arange(3), seed=0, key=0, amount=1,
                         num_nodes=5, known=lambda s, d: csr_has_edges(g.indptr, g.indices,
                                                                       d, s), max_attempts=8)


@pytest.mark.parametrize("bad", [{"mode": "pairs"}, {"amount": 0}, {"amount": 1.5},
                                 {"max_attempts": 0}])
def test_bad_negative_sampling_is_a_typed_error(bad):
    with pytest.raises(SamplingInputError):
        NegativeSampling(**bad)


def test_cast():
    assert NegativeSampling.cast(None) is None
    assert NegativeSampling.cast("triplet") == NegativeSampling("triplet")
    assert NegativeSampling.cast({"amount": 2}).amount == 2
    with pytest.raises(SamplingInputError):
        NegativeSampling.cast(3)


def test_negatives_with_node_time_are_uniform_over_the_admissible_nodes():
    """Each positive's negatives: node time <= its time, uniform over exactly those nodes
    (chi-square per time, fixed seed), the same for any batch composition; with rejection the
    redraws stay admissible; a time before every node is a typed error."""
    n = 300
    node_time = np.random.default_rng(4).integers(0, 1000, n)
    node_time[17] = -5  # the earliest node: the only one admissible at time -5
    adm = AdmissibleNodes.of(node_time)
    assert np.all(np.diff(adm.times) >= 0) and np.array_equal(node_time[adm.order], adm.times)
    P = 3000
    t = np.array([-5, 250, 700, 10**6])[np.arange(P) % 4]
    src = np.arange(P) % 11
    neg = sample_negatives(src, np.arange(P), seed=3, key=9, amount=40, num_nodes=n,
                           admissible=adm, time=t)
    assert np.all(node_time[neg] <= t[:, None])
    for bound in (250, 700, 10**6):
        ok = np.flatnonzero(node_time <= bound)
        drawn = neg[t == bound].ravel()
        counts = np.bincount(drawn, minlength=n)[ok]
        assert counts.sum() == drawn.size and counts.min() > 0  # only and every admissible
        assert chi2_stat(counts) < chi2_upper(ok.size - 1), bound
    assert np.all(neg[t == -5] == 17)
    part = sample_negatives(src[5:9], np.arange(5, 9), seed=3, key=9, amount=40, num_nodes=n,
                            admissible=adm, time=t[5:9])
    np.testing.assert_array_equal(part, neg[5:9])  # keyed on the positive, not the batch
    known = lambda s, d: (d % 2) == 0  # noqa: E731 (reject even ids)
    rej = sample_negatives(src[1:200], np.arange(1, 200), seed=3, key=9, amount=3,
                           num_nodes=n, admissible=adm, time=t[1:200], known=known)
    assert np.all(rej % 2 == 1) and np.all(node_time[rej] <= t[1:200, None])
    with pytest.raises(SamplingInputError, match="before every candidate node"):
        sample_negatives(src[:2], np.arange(2), seed=3, key=9, amount=1, num_nodes=n,
                         admissible=adm, time=np.array([0, -6]))
