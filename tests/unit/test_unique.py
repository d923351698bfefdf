"""graph/unique.py: the sort-based answers equal numpy's for every shape and dtype used."""

import numpy as np
import pytest

from mnmg_sampler.graph.unique import has_duplicates, sorted_unique


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8])
@pytest.mark.parametrize("n", [0, 1, 2, 7, 1000])
def test_sorted_unique_equals_numpy(dtype, n):
    rng = np.random.default_rng(n)
    a = rng.integers(0, max(2, n // 3), n).astype(dtype)
    got = sorted_unique(a)
    want = np.unique(a)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    assert has_duplicates(a) == (want.size != a.size)


def test_duplicates_found_and_distinct_values_pass():
    assert not has_duplicates(np.arange(1024)[::-1])
    assert has_duplicates(np.array([5, 1, 9, 1]))
    assert not has_duplicates(np.empty(0, np.int64))
    np.testing.assert_array_equal(sorted_unique(np.array([[3, 1], [3, 2]])), [1, 2, 3])
