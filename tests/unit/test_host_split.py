"""host_groups._split: one pass equals numpy's masks and bincounts, per request, in order."""

import numpy as np
import pytest

from mnmg_sampler.distributed.host_groups import _split


@pytest.mark.parametrize("sizes", [[], [0], [5, 0, 7], [1, 1, 1, 12]])
def test_split_equals_masks_and_bincounts(sizes):
    rng = np.random.default_rng(len(sizes))
    sizes = np.asarray(sizes, np.int64)
    nodes = rng.integers(0, 100, int(sizes.sum())).astype(np.int64)
    inner = np.array([25, 50, 75], np.int64)  # 4 owners; owners 1 and 3 on this host
    on_host = np.array([False, True, False, True])
    owners = np.searchsorted(inner, nodes, side="right")
    hit, miss_n, miss_s, hit_n, hit_s = _split(nodes, sizes, owners, on_host)
    want = on_host[owners]
    seg = np.repeat(np.arange(sizes.size), sizes)
    np.testing.assert_array_equal(hit, want)
    np.testing.assert_array_equal(miss_n, nodes[~want])
    np.testing.assert_array_equal(hit_n, nodes[want])
    np.testing.assert_array_equal(miss_s, np.bincount(seg[~want], minlength=sizes.size))
    np.testing.assert_array_equal(hit_s, np.bincount(seg[want], minlength=sizes.size))
    assert miss_n.dtype == hit_n.dtype == miss_s.dtype == np.int64
