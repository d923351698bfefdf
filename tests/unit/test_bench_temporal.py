"""``bench single --temporal`` runs end to end on a small graph (no timing is asserted): the
temporal kernels sample fewer edges than the unbounded one (seeds at the median time)."""

from __future__ import annotations

import numpy as np

from mnmg_sampler.bench.temporal import bench_temporal
from mnmg_sampler.graph.csr import CSRGraph


def test_bench_temporal_runs():
    g = np.random.default_rng(0)
    graph = CSRGraph.from_edges(g.integers(0, 300, 6000), g.integers(0, 300, 6000), 300)
    seeds = np.flatnonzero(graph.degrees() > 0)
    res = bench_temporal(graph, seeds, [8], False, 0, 32, 200, 1)
    k = res["kernels"]
    assert 0 < k["temporal uniform"]["edges"] < k["uniform (no time)"]["edges"]
    assert k["temporal last"]["edges"] == k["temporal uniform"]["edges"]
    assert k["uniform on admissible edges"]["edges"] == k["temporal uniform"]["edges"]
    assert set(res["cost_ratio"]) == set(k)
