"""The keyed shuffle (``graph.permute.feistel``) is a uniform permutation: chi-square tests with
fixed keys, whose thresholds (a 5-sigma tail, p < 1e-6) leave no room to flake, yet fail for
weak permutations such as a one- or two-round Feistel network."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from mnmg_sampler.graph.permute import feistel, feistel_keys
from mnmg_sampler.loaders.neighbor import epoch_order, shuffle_keys


def _critical(dof: int, z: float = 5.0) -> float:
    """Chi-square quantile at ``z`` standard deviations (Wilson-Hilferty; p ~ 3e-7 for z=5)."""
    a = 2.0 / (9.0 * dof)
    return dof * (1.0 - a + z * np.sqrt(a)) ** 3


def _chi2(counts: np.ndarray, expected: float) -> float:
    return float(((counts - expected) ** 2 / expected).sum())


def _orderings(n: int, keys: int, rounds: int) -> np.ndarray:
    """How often each of the n! orderings of [0, n) comes out, over ``keys`` keys."""
    index = {p: i for i, p in enumerate(itertools.permutations(range(n)))}
    counts = np.zeros(len(index), np.int64)
    for k in range(keys):
        counts[index[tuple(feistel(np.arange(n), n, feistel_keys(7, k, rounds=rounds)))]] += 1
    return counts


def _positions(n: int, epochs: int, order) -> np.ndarray:
    """counts[i, p]: epochs in which element i went to position p."""
    counts = np.zeros((n, n), np.int64)
    for e in range(epochs):
        counts[np.arange(n), order(e)] += 1
    return counts


@pytest.mark.parametrize("n", [3, 4])
def test_every_ordering_equally_frequent(n):
    keys = 500 * 24
    counts = _orderings(n, keys, rounds=12)
    assert (counts > 0).all()  # every ordering is reachable
    dof = counts.size - 1
    assert _chi2(counts, keys / counts.size) < _critical(dof)


@pytest.mark.parametrize("rounds", [1, 3])
def test_weak_feistel_networks_fail_the_ordering_test(rounds):
    keys = 500 * 24
    counts = _orderings(4, keys, rounds=rounds)
    assert _chi2(counts, keys / counts.size) > _critical(counts.size - 1)


@pytest.mark.parametrize("n", [10, 37])
def test_loader_shuffle_puts_each_seed_anywhere_uniformly(n):
    # the loader's epoch order of n seeds (a domain of 16 or 64 values, cycle-walked to n)
    epochs = 100 * n
    counts = _positions(n, epochs, lambda e: epoch_order(0, n, n, shuffle_keys(True, 3, e)))
    assert (counts.sum(0) == epochs).all() and (counts.sum(1) == epochs).all()  # permutations
    assert _chi2(counts, epochs / n) < _critical((n - 1) ** 2)


def test_a_one_round_network_fails_the_position_test():
    n, epochs = 10, 1500
    counts = _positions(n, epochs, lambda e: feistel(np.arange(n), n,
                                                     feistel_keys(3, e, rounds=1)))
    assert _chi2(counts, epochs / n) > _critical((n - 1) ** 2)


def test_feistel_is_a_bijection_with_its_inverse():
    for n in (1, 2, 3, 5, 16, 17, 1000, 4097):
        keys = feistel_keys(n, 1)
        x = np.arange(n)
        y = feistel(x, n, keys)
        assert np.array_equal(np.sort(y), x)
        assert np.array_equal(feistel(y, n, keys, inverse=True), x)
        sub = x[::3][::-1]  # any subset, any order: the same images
        assert np.array_equal(feistel(sub, n, keys), y[sub])
