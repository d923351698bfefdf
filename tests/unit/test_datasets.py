"""load_graph specs (cora, rmat:, paths), nonisolated_nodes, and the info command."""

from __future__ import annotations

import gzip
import re

import numpy as np
import pytest

from mnmg_sampler.commands.cli import main
from mnmg_sampler.errors import GraphFormatError
from mnmg_sampler.graph.datasets import load_graph, nonisolated_nodes
from mnmg_sampler.graph.rmat import rmat_graph


def test_embedded_cora():
    g = load_graph("cora")
    assert g.name == "cora"
    assert g.num_nodes == 2708
    assert g.num_edges == 2 * 5429  # undirected by default: every link both ways
    assert g.x.shape == (2708, 1433) and g.x.dtype == np.float32
    assert set(np.unique(g.x).tolist()) == {0.0, 1.0}
    assert g.y.shape == (2708,) and g.y.dtype == np.int64
    assert np.unique(g.y).tolist() == list(range(7))
    assert nonisolated_nodes(g).size == 2708


def test_cora_options():
    assert load_graph("cora", undirected=False).num_edges == 5429
    assert load_graph("CORA", drop_duplicates=True).num_edges == 10556
    assert load_graph("cora", drop_self_loops=True).num_edges == 10858  # Cora has none


def test_rmat_spec():
    g = load_graph("rmat:9:4", seed=3)
    assert g.name == "rmat:9:4" and g.num_nodes == 512 and g.num_edges == 4 * 512
    ref = rmat_graph(9, 4, seed=3)
    np.testing.assert_array_equal(g.indices, ref.indices)
    assert load_graph("rmat:8").num_edges == 16 * 256
    assert not np.array_equal(load_graph("rmat:8", seed=1).indices, load_graph("rmat:8").indices)
    u = load_graph("rmat:8:2", undirected=True)
    assert u.num_edges == 2 * 2 * 256


@pytest.mark.parametrize("spec", ["rmat:", "rmat:x", "rmat:4:y", "rmat:4:2:1"])
def test_bad_rmat_spec(spec):
    with pytest.raises(GraphFormatError, match="rmat:SCALE"):
        load_graph(spec)


def test_paths_dispatch(tmp_path):
    p = tmp_path / "e.txt"
    p.write_text("0 1\n1 2\n")
    assert load_graph(str(p)).num_edges == 2
    assert load_graph(p, undirected=True).num_edges == 4
    pz = tmp_path / "e.txt.gz"
    with gzip.open(pz, "wt") as f:
        f.write("0 1\n1 2\n2 0\n")
    assert load_graph(str(pz)).num_edges == 3
    pn = tmp_path / "e.npz"
    np.savez(pn, src=np.array([0, 1]), dst=np.array([2, 2]), num_nodes=np.int64(4))
    g = load_graph(str(pn))
    assert g.num_nodes == 4 and g.num_edges == 2
    assert nonisolated_nodes(g).tolist() == [2]


def test_gnn_benchmark_path_detected_by_keys(tmp_path):
    pn = tmp_path / "mini.npz"
    np.savez(pn, adj_data=np.ones(2, np.float32), adj_indices=np.array([1, 0], np.int32),
             adj_indptr=np.array([0, 1, 2, 2], np.int32), adj_shape=np.array([3, 3]),
             labels=np.array([0, 1, 1], np.int8))
    g = load_graph(str(pn))
    assert g.num_nodes == 3 and g.num_edges == 2  # a path keeps directed by default
    assert g.y.tolist() == [0, 1, 1] and g.x is None


def test_unknown_spec_lists_forms(tmp_path):
    with pytest.raises(GraphFormatError) as ei:
        load_graph("corra")
    msg = str(ei.value)
    assert "'corra'" in msg and "did you mean 'cora'" in msg and "rmat:SCALE" in msg
    with pytest.raises(GraphFormatError, match=r"missing\.txt.*no such built-in dataset or file"):
        load_graph(str(tmp_path / "missing.txt"))
    weird = tmp_path / "g.xyz"
    weird.write_text("0,1\n")
    with pytest.raises(GraphFormatError, match="not recognised") as ei:
        load_graph(str(weird))
    assert "supported formats" in str(ei.value) and "OGB" in str(ei.value)


def test_nonisolated_nodes():
    g = rmat_graph(10, 4, seed=0)
    ids = nonisolated_nodes(g)
    deg = g.degrees()
    assert ids.dtype == np.int64
    assert np.all(deg[ids] >= 1)
    assert ids.size == np.count_nonzero(deg)
    assert np.all(np.diff(ids) > 0)


def test_info_command(capsys, tmp_path):
    with pytest.raises(SystemExit) as ei:
        main(["info", "cora"])
    assert ei.value.code == 0
    out = capsys.readouterr().out
    assert "2,708" in out and "10,858" in out
    assert "(2708, 1433) float32" in out and "7 classes" in out
    assert "min/mean/median/max/p99" in out and "load time" in out
    p = tmp_path / "e.txt"
    p.write_text("0 1\n0 1\n3 3\n")
    with pytest.raises(SystemExit):
        main(["info", str(p), "--drop-duplicates", "--drop-self-loops", "--undirected"])
    out = capsys.readouterr().out
    assert re.search(r"^nodes +4$", out, re.M)
    assert re.search(r"^edges +2 \(CSR entries\)$", out, re.M)
    assert re.search(r"^isolated nodes +2 \(50\.0%\)$", out, re.M)
    assert re.search(r"^features x +none$", out, re.M)


def test_info_command_error_exit_code(capsys):
    with pytest.raises(SystemExit) as ei:
        main(["info", "no-such-graph"])
    assert ei.value.code == 2
    assert "no-such-graph" in capsys.readouterr().err
