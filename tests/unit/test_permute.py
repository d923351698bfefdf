"""Keyed permutations, id-wise partition methods and counter-based node data."""

from __future__ import annotations

import numpy as np
import pytest

from mnmg_sampler.errors import PartitionError
from mnmg_sampler.graph import permute as P
from mnmg_sampler.graph.csr import CSRGraph
from mnmg_sampler.graph.partition import assign_nodes, part_node_ids, partition_graph
from mnmg_sampler.graph.rmat import rmat_edge_range, rmat_edges


@pytest.mark.parametrize("n", [1, 2, 3, 5, 64, 1000, 70_001])
def test_permute_is_a_bijection_with_inverse(n):
    x = np.arange(n)
    p = P.permute(x, n, 7)
    assert np.array_equal(np.sort(p), x)
    assert np.array_equal(P.unpermute(p, n, 7), x)
    assert np.array_equal(P.permute(x[::-1], n, 7), p[::-1])  # id by id
    if n > 10:
        assert not np.array_equal(p, P.permute(x, n, 8))


def test_compiled_and_numpy_permutations_agree(monkeypatch):
    n = 300_000
    x = np.arange(n)
    compiled = P.permute(x, n, 3)
    monkeypatch.setattr(P, "_COMPILED_FROM", 1 << 62)
    assert np.array_equal(compiled, P.permute(x, n, 3))


def test_rmat_edge_ranges_concatenate_to_the_graph():
    s, d = rmat_edges(9, 4, seed=2)
    cuts = [0, 1, 700, 701, 2048]
    parts = [rmat_edge_range(9, 4, a, b, seed=2) for a, b in zip(cuts, cuts[1:], strict=False)]
    np.testing.assert_array_equal(np.concatenate([p[0] for p in parts]), s)
    np.testing.assert_array_equal(np.concatenate([p[1] for p in parts]), d)
    a, b = rmat_edge_range(9, 4, 100, 200, seed=2, chunk=7)  # chunking changes nothing
    np.testing.assert_array_equal(a, s[100:200])
    np.testing.assert_array_equal(b, d[100:200])


@pytest.mark.parametrize("method", ["random", "range", "hash"])
@pytest.mark.parametrize("parts", [1, 2, 3, 7])
def test_id_wise_assignment_and_part_enumeration(method, parts):
    n = 1001
    a = assign_nodes(np.arange(n), n, parts, method, seed=5)
    for r in range(parts):
        np.testing.assert_array_equal(part_node_ids(r, n, parts, method, 5, chunk=97),
                                      np.flatnonzero(a == r))
    if method != "hash":
        assert np.bincount(a, minlength=parts).max() - np.bincount(a, minlength=parts).min() <= 1
    g = CSRGraph.from_edges(np.arange(n) % 13, np.arange(n), n)
    np.testing.assert_array_equal(partition_graph(g, parts, method, seed=5).assignment, a)


def test_metis_budget_error_says_single_process():
    g = CSRGraph.from_edges(np.arange(50), (np.arange(50) + 1) % 50, 50)
    with pytest.raises(PartitionError, match="one process.*--method random"):
        partition_graph(g, 2, "metis", metis_max_edges=10)


def test_synthetic_node_data_is_id_wise_and_learnable():
    ids = np.arange(20_000)
    x, y = P.node_features(ids, 8, 3, num_classes=4), P.node_labels(ids, 4, 3)
    np.testing.assert_array_equal(x[500:600], P.node_features(ids[500:600], 8, 3, 4))
    assert x.dtype == np.float32 and set(np.unique(y)) == {0, 1, 2, 3}
    noise = P.node_features(ids, 8, 3)
    assert abs(float(noise.mean())) < 0.02 and abs(float(noise.std()) - 1) < 0.02
    centres = np.stack([x[y == c].mean(0) for c in range(4)])
    assert (np.argmin(((x[:, None] - centres) ** 2).sum(-1), 1) == y).mean() > 0.6
