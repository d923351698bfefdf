"""R-MAT generator: determinism, sizes, id range, skew, and argument checks."""

from __future__ import annotations

import numpy as np
import pytest

from mnmg_sampler.errors import GraphFormatError
from mnmg_sampler.graph.rmat import rmat_edges, rmat_graph


def test_same_seed_same_edges_and_other_seed_differs():
    s1, d1 = rmat_edges(10, 8, seed=5)
    s2, d2 = rmat_edges(10, 8, seed=5)
    np.testing.assert_array_equal(s1, s2)
    np.testing.assert_array_equal(d1, d2)
    s3, d3 = rmat_edges(10, 8, seed=6)
    assert not (np.array_equal(s1, s3) and np.array_equal(d1, d3))
    assert (s1 != s3).mean() > 0.5


@pytest.mark.parametrize("scale, ef", [(1, 1), (6, 3), (11, 16)])
def test_counts_dtype_and_range(scale, ef):
    src, dst = rmat_edges(scale, ef, seed=1)
    assert src.dtype == np.int64 and dst.dtype == np.int64
    assert src.shape == dst.shape == (ef * 2**scale,)
    for a in (src, dst):
        assert a.min() >= 0 and a.max() < 2**scale


def test_degree_skew_and_isolated_nodes():
    g = rmat_graph(12, 16, seed=0)
    deg = g.degrees()
    assert g.num_nodes == 4096 and g.num_edges == 16 * 4096
    assert deg.mean() == 16
    assert deg.max() > 20 * deg.mean()  # heavy tail
    assert np.median(deg) < deg.mean()
    assert (deg == 0).sum() > 0.1 * g.num_nodes  # many nodes without in-edges


def test_quadrant_probabilities():
    # with a=1 every edge is (0, 0) before the permutation: one node holds all edges
    src, dst = rmat_edges(8, 4, a=1.0, b=0.0, c=0.0, seed=3)
    assert np.unique(src).size == 1 and np.array_equal(src, dst)
    # with b=1 every edge goes from the image of 0 to the image of 2**scale - 1
    src, dst = rmat_edges(8, 4, a=0.0, b=1.0, c=0.0, seed=3)
    assert np.unique(src).size == 1 and np.unique(dst).size == 1 and src[0] != dst[0]
    # scale 1 shows the quadrant frequencies directly (the permutation only swaps 0 and 1)
    src, dst = rmat_edges(1, 20000, seed=4)
    hub = np.bincount(src[src == dst]).argmax()  # the image of node 0
    freq = {
        "a": np.mean((src == hub) & (dst == hub)),
        "b": np.mean((src == hub) & (dst != hub)),
        "c": np.mean((src != hub) & (dst == hub)),
        "d": np.mean((src != hub) & (dst != hub)),
    }
    for q, p in {"a": 0.57, "b": 0.19, "c": 0.19, "d": 0.05}.items():
        assert abs(freq[q] - p) < 0.015, (q, freq[q])


def test_graph_options_and_name():
    g = rmat_graph(8, 4, seed=2, undirected=True, drop_self_loops=True, drop_duplicates=True)
    assert g.name == "rmat:8:4" and g.num_nodes == 256
    dst = np.repeat(np.arange(g.num_nodes), g.degrees())
    assert not np.any(g.indices == dst)
    pairs = set(zip(g.indices.tolist(), dst.tolist(), strict=True))
    assert len(pairs) == g.num_edges  # no duplicates
    assert all((d, s) in pairs for s, d in pairs)  # symmetric


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(scale=0), "scale"),
        (dict(scale=41), "scale"),
        (dict(scale=4, edge_factor=0), "edge factor"),
        (dict(scale=4, a=0.6, b=0.3, c=0.3), "probabilities"),
        (dict(scale=4, a=-0.1), "probabilities"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(GraphFormatError, match=match):
        rmat_edges(**kwargs)
