"""The typed kernel: one-type graphs bit-identical to the homogeneous kernels, relations drawing
independently, per-relation fanouts (uniform and weighted) respected in one call."""

from __future__ import annotations

import numpy as np
import pytest

from mnmg_sampler.graph.csr import CSRGraph
from mnmg_sampler.graph.typed import typed_graph
from mnmg_sampler.ops import cpu, typed, weighted

N, E = 300, 3000


def _edges(seed=0, n=N, m=E):
    g = np.random.default_rng(seed)
    return g.integers(0, n, m), (g.integers(0, n, m) ** 2) % n  # skewed in-degrees


def _weights(m, seed=1):
    g = np.random.default_rng(seed)
    w = (g.random(m) + 0.05).astype(np.float32)
    w[g.random(m) < 0.3] = 0
    return w


def _one_type(src, dst, w=None):
    spec = {"num_nodes": {"n": N}, "edge_index": {("n", "to", "n"): np.stack([src, dst])}}
    if w is not None:
        spec["edge_weight"] = {"n__to__n": w}
    return typed_graph(spec)


def _nodes(k=200, seed=2):
    g = np.random.default_rng(seed)
    return g.permutation(N)[:k], g.integers(0, 2**62, k)


@pytest.mark.parametrize("fanout", [1, 3, 10, -1])
@pytest.mark.parametrize("replace", [0, 1])
def test_one_type_equals_homogeneous_kernel(fanout, replace):
    src, dst = _edges()
    g = CSRGraph.from_edges(src, dst, N)
    tg = _one_type(src, dst)
    # the one-type layout is the homogeneous CSR itself
    for a, b in ((tg.indptr, g.indptr), (tg.indices, g.indices), (tg.edge_ids, g.edge_ids)):
        np.testing.assert_array_equal(a, b)
    rows, keys = _nodes()
    c, nb, e = cpu.sample_neighbors(g.indptr, g.indices, g.edge_ids, rows, rows, keys, 7, 2,
                                    fanout, replace)
    c2, nb2, r2, e2 = typed.sample_typed_neighbors(tg, rows, rows, keys, np.zeros(rows.size),
                                                   [[fanout]], [replace], 7, 2)
    assert nb.size > 0
    for a, b in ((c, c2), (nb, nb2), (e, e2)):
        np.testing.assert_array_equal(a, b)
    assert (r2 == 0).all()


@pytest.mark.parametrize("fanout", [1, 4, -1])
@pytest.mark.parametrize("replace", [0, 1])
def test_one_type_weighted_equals_weighted_kernel(fanout, replace):
    src, dst = _edges()
    w = _weights(E)
    g = CSRGraph.from_edges(src, dst, N)
    tg = _one_type(src, dst, w)
    rows, keys = _nodes()
    c, nb, e = weighted.sample_neighbors_weighted(g.indptr, g.indices, g.edge_ids, w[g.edge_ids],
                                                  rows, rows, keys, 7, 2, fanout, replace)
    c2, nb2, _, e2 = typed.sample_typed_neighbors(tg, rows, rows, keys, np.zeros(rows.size),
                                                  [[fanout]], [replace], 7, 2)
    assert nb.size > 0
    for a, b in ((c, c2), (nb, nb2), (e, e2)):
        np.testing.assert_array_equal(a, b)


def _two_relations(w=None):
    """Type ``a`` (N nodes) samples from ``b`` along relations x and y with the same edges."""
    src, dst = _edges()
    ei = np.stack([src % 50, dst])
    spec = {"num_nodes": {"a": N, "b": 50},
            "edge_index": {("b", "x", "a"): ei, ("b", "y", "a"): ei,
                           ("a", "z", "b"): ei[::-1] % 50}}
    if w is not None:
        spec["edge_weight"] = {("b", "y", "a"): w}
    return typed_graph(spec), src % 50, dst


def test_relations_of_one_node_draw_independently():
    tg, _, _ = _two_relations()
    rows, keys = _nodes()
    rows = tg.to_internal("a", rows)
    c, nb, rel, e = typed.sample_typed_neighbors(tg, rows, rows, keys, np.zeros(rows.size),
                                                 [[3, 3, 3]], [0], 0, 1)
    rx, ry = tg.relation_index(("b", "x", "a")), tg.relation_index(("b", "y", "a"))
    # the same neighborhoods under two relations: equal streams would give equal edge ids
    assert (rel == rx).sum() == (rel == ry).sum() > 0
    assert not np.array_equal(e[rel == rx], e[rel == ry])


@pytest.mark.parametrize("weighted_y", [False, True])
def test_per_relation_fanouts_and_edges_exist(weighted_y):
    w = _weights(E) if weighted_y else None
    tg, src, dst = _two_relations(w)
    rows, keys = _nodes(150)
    rows_a = tg.to_internal("a", rows)
    rows_b = tg.to_internal("b", np.arange(50))
    allrows = np.concatenate([rows_a, rows_b])
    allkeys = np.concatenate([keys, np.arange(50)])
    req = np.concatenate([np.zeros(150, np.int64), np.ones(50, np.int64)])
    rx, ry, rz = (tg.relation_index(e) for e in (("b", "x", "a"), ("b", "y", "a"),
                                                  ("a", "z", "b")))
    fan = np.zeros((2, 3), np.int64)
    fan[0, rx], fan[0, ry], fan[0, rz] = 2, 5, 7  # z ends at b: not used by request 0's a nodes
    fan[1, rx], fan[1, ry], fan[1, rz] = 9, 9, 0  # nor x, y by request 1's b nodes; z gets 0
    c, nb, rel, e = typed.sample_typed_neighbors(tg, allrows, allrows, allkeys, req, fan,
                                                 [0, 0], 3, 0)
    assert c[150:].sum() == 0  # fanout 0 for z
    assert set(np.unique(rel).tolist()) <= {rx, ry}
    off = np.concatenate([[0], np.cumsum(c)])
    for i in range(150):
        v = rows[i]
        mine = slice(off[i], off[i + 1])
        for r, k in ((rx, 2), (ry, 5)):
            sel = rel[mine] == r
            eids = e[mine][sel]
            # every sampled edge exists in its relation and ends at v
            np.testing.assert_array_equal(dst[eids], v)
            np.testing.assert_array_equal(nb[mine][sel], tg.to_internal("b", src[eids]))
            cand = np.flatnonzero(dst == v)
            if r == ry and w is not None:
                cand = cand[w[cand] > 0]
            assert np.unique(eids).size == eids.size == min(k, cand.size)


def test_parallel_kernels_equal_serial_and_empty_call(monkeypatch):
    tg, _, _ = _two_relations(_weights(E))
    rows = np.arange(tg.num_nodes)  # both types; "b" has one relation, "a" two
    keys = rows * 31
    req = np.zeros(rows.size, np.int64)
    fan = np.array([[3, -1, 2]])
    serial = typed.sample_typed_neighbors(tg, rows, rows, keys, req, fan, [0], 1, 1)
    monkeypatch.setattr(cpu, "PARALLEL_MIN_NODES", 0)
    monkeypatch.setattr(cpu.numba, "get_num_threads", lambda: 2)
    assert cpu._parallel(rows.size)
    par = typed.sample_typed_neighbors(tg, rows, rows, keys, req, fan, [0], 1, 1)
    assert serial[1].size > 0
    for a, b in zip(serial, par, strict=True):
        np.testing.assert_array_equal(a, b)
    empty = typed.sample_typed_neighbors(tg, rows[:0], rows[:0], keys[:0], req[:0], fan, [0], 1, 1)
    assert all(a.size == 0 for a in empty)
