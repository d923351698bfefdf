"""``bench single --hetero``: the typed view holds exactly the graph's edges, and the
measurement runs end to end on a small graph (no timing is asserted)."""

from __future__ import annotations

import numpy as np

from mnmg_sampler.bench.hetero import bench_hetero, typed_view
from mnmg_sampler.graph.csr import CSRGraph


def _graph():
    g = np.random.default_rng(0)
    return CSRGraph.from_edges(g.integers(0, 500, 6000), g.integers(0, 500, 6000), 500)


def test_typed_view_has_the_same_edges():
    g = _graph()
    tg, bounds = typed_view(g)
    assert tg.num_nodes == g.num_nodes and tg.num_edges == g.num_edges
    assert len(tg.edge_types) == 9
    np.testing.assert_array_equal(tg.node_type_offset, bounds)  # internal ids = original ids
    dst = np.repeat(np.arange(g.num_nodes), g.degrees())
    orig = sorted(zip(g.indices.tolist(), dst.tolist(), strict=True))
    seg_dst = []
    for t in range(3):
        n_rel = tg.rel_offset[t + 1] - tg.rel_offset[t]
        per = np.diff(tg.indptr)[tg.seg_base[t]:tg.seg_base[t] + (bounds[t + 1] - bounds[t])
                                 * n_rel].reshape(-1, n_rel).sum(axis=1)
        seg_dst.append(np.repeat(np.arange(bounds[t], bounds[t + 1]), per))
    typed_edges = sorted(zip(tg.indices.tolist(), np.concatenate(seg_dst).tolist(), strict=True))
    assert typed_edges == orig


def test_bench_hetero_runs():
    g = _graph()
    seeds = np.flatnonzero(g.degrees() > 0)
    res = bench_hetero(g, seeds, [4, 3], False, 0, 32, 3, 200, 1)
    for part in ("kernel", "multihop"):
        for name in ("homogeneous", "typed"):
            assert res[part][name]["edges"] > 0 and res[part][name]["per_s"] > 0
        assert np.isfinite(res[part]["cost_ratio"])
    assert res["kernel"]["relations"] == 9 and res["multihop"]["batches"] == 3
