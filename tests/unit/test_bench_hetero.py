"""``bench single --hetero``: the typed view holds exactly the graph's edges, the measurement
runs end to end on a small graph (no timing is asserted), the homogeneous reference on the
segments samples the typed kernel's edge counts, and the DGL heterograph peer gets the same
typed graph, seeds and fanouts (a fake peer stands in for DGL's venv)."""

from __future__ import annotations

import json
import os
import stat
import sys

import numpy as np
import pytest

from mnmg_sampler.bench import dgl_hetero_peer
from mnmg_sampler.bench.hetero import bench_hetero, save_typed_graph, typed_view
from mnmg_sampler.graph.csr import CSRGraph
from mnmg_sampler.graph.typed import typed_graph


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
    k = res["kernel"]
    # the reference samples the typed kernel's (node, relation) segments: the same edge counts
    assert k["typed"]["edges"] == k["homogeneous_segments"]["edges"]
    assert k["segments"] == 3 * k["nodes"]
    assert k["homogeneous"]["edges"] != k["typed"]["edges"]  # k per node, not per relation
    assert res["dgl"] == {"available": False, "error": "not measured"}


def _spec():
    g = np.random.default_rng(1)
    return {"num_nodes": {"a": 40, "b": 30},
            "edge_index": {("a", "x", "b"): np.stack([g.integers(0, 40, 200),
                                                      g.integers(0, 30, 200)]),
                           ("b", "y", "a"): np.stack([g.integers(0, 30, 150),
                                                      g.integers(0, 40, 150)]),
                           ("a", "z", "a"): np.stack([g.integers(0, 40, 90),
                                                      g.integers(0, 40, 90)])}}


def test_saved_typed_graph_is_the_input_edge_for_edge(tmp_path):
    spec = _spec()
    tg = typed_graph(spec)
    path = tmp_path / "g.npz"
    save_typed_graph(tg, path, "b", np.arange(5))
    num_nodes, rels, input_type, seeds = dgl_hetero_peer.load(str(path))
    assert num_nodes == {"a": 40, "b": 30} and input_type == "b"
    np.testing.assert_array_equal(seeds, np.arange(5))
    assert set(rels) == set(spec["edge_index"])
    for et, (src, dst) in rels.items():  # DGL edge i of a relation is its input edge i
        np.testing.assert_array_equal(np.stack([src, dst]), spec["edge_index"][et])


def test_peer_arguments():
    a = dgl_hetero_peer.parse_args(["--graph", "g.npz", "--fanouts", "4,3", "--replace"])
    assert a.fanouts == [4, 3] and a.replace and a.batch_size == 1024
    for bad in (["--batch-size", "0"], ["--threads", "0"], ["--fanouts", "4,x"]):
        with pytest.raises(SystemExit):
            dgl_hetero_peer.parse_args(["--graph", "g.npz", *bad])


FAKE = """
import json, sys
sys.path.insert(0, {root!r})
from mnmg_sampler.bench import dgl_hetero_peer
assert sys.argv[1].endswith("dgl_hetero_peer.py"), sys.argv
a = dgl_hetero_peer.parse_args(sys.argv[2:])
if {fail}:
    print("boom", file=sys.stderr)
    sys.exit(3)
num_nodes, rels, input_type, seeds = dgl_hetero_peer.load(a.graph)
print(json.dumps({{"peer": "fake", "version": "0", "sampled_edges_per_s": 1000.0,
                  "edges_per_batch": 1.0, "fanouts": a.fanouts, "batches": a.batches,
                  "batch_size": a.batch_size, "threads": a.threads, "replace": a.replace,
                  "input_type": input_type, "seeds": int(seeds.size),
                  "edges": sum(int(s.size) for s, _ in rels.values())}}))
"""


def _fake_python(tmp_path, fail: bool):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    script = tmp_path / "fake_peer.py"
    script.write_text(FAKE.format(root=root, fail=fail))
    py = tmp_path / "python"
    py.write_text(f"#!/bin/sh\nexec {sys.executable} {script} \"$@\"\n")
    py.chmod(py.stat().st_mode | stat.S_IEXEC)
    return py


def test_bench_hetero_runs_the_peer_on_the_same_seeds(tmp_path):
    g = _graph()
    seeds = np.flatnonzero(g.degrees() > 0)
    res = bench_hetero(g, seeds, [4, 3], True, 0, 16, 2, 200, 2,
                       peer=_fake_python(tmp_path, False), peer_repeats=2)
    d = res["dgl"]
    assert d["available"] and d["peer"] == "fake" and len(d["sampled_edges_per_s_runs"]) == 2
    assert d["fanouts"] == [4, 3] and d["replace"] and d["batch_size"] == 16
    t0_seeds = int((seeds < typed_view(g)[1][1]).sum())
    assert d["batches"] == 2 and d["seeds"] == min(t0_seeds, 32) and d["input_type"] == "t0"
    assert d["edges"] == g.num_edges
    # the peer's runs were interleaved with ours: one repeat before each, none added after
    assert len(res["multihop"]["typed"]["seconds"]) == 2
    assert d["typed_vs_dgl"] == pytest.approx(res["multihop"]["typed"]["per_s"] / 1000.0)


def test_bench_hetero_reports_a_failing_peer(tmp_path):
    g = _graph()
    seeds = np.flatnonzero(g.degrees() > 0)
    res = bench_hetero(g, seeds, [4], False, 0, 16, 2, 100, 1,
                       peer=_fake_python(tmp_path, True))
    assert not res["dgl"]["available"]
    assert res["dgl"]["error"].startswith("exit 3") and "boom" in res["dgl"]["error"]
    assert json.dumps(res)  # the JSON output stays serialisable
