"""Typed graphs in: the dict form, HeteroData, saved .pt files, OGB hetero directories; typed
errors for bad input; ``mnmg-sampler info`` on a hetero input."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
import torch

from mnmg_sampler.errors import GraphFormatError, MemoryBudgetError
from mnmg_sampler.graph.typed import typed_graph
from mnmg_sampler.graph.typed_io import load_typed_graph, read_ogb_hetero_dir

pyg = pytest.importorskip("torch_geometric")
from torch_geometric.data import HeteroData  # noqa: E402

WRITES = ("author", "writes", "paper")
CITES = ("paper", "cites", "paper")


def _spec():
    g = np.random.default_rng(0)
    return {
        "num_nodes": {"paper": 8, "author": 5},
        "edge_index": {WRITES: np.array([[0, 1, 2, 3, 4, 0], [0, 1, 2, 3, 4, 7]]),
                       "paper__cites__paper": np.array([[1, 2, 3, 4, 5, 6], [0, 0, 1, 2, 3, 3]])},
        "x": {"paper": g.random((8, 4), dtype=np.float32),
              "author": g.random((5, 3)).astype(np.float16)},
        "y": {"paper": np.arange(8) % 3},
        "masks": {"paper": {"train": np.arange(4), "test": np.arange(8) >= 6}},
        "edge_weight": {CITES: np.arange(1, 7, dtype=np.float32)},
    }


def _hetero_data() -> HeteroData:
    s = _spec()
    d = HeteroData()
    d["paper"].x = torch.from_numpy(s["x"]["paper"])
    d["paper"].y = torch.from_numpy(s["y"]["paper"])
    d["paper"].train_mask = torch.arange(8) < 4
    d["paper"].test_mask = torch.arange(8) >= 6
    d["author"].x = torch.from_numpy(s["x"]["author"])
    d[WRITES].edge_index = torch.from_numpy(s["edge_index"][WRITES])
    d[CITES].edge_index = torch.from_numpy(s["edge_index"]["paper__cites__paper"])
    d[CITES].edge_weight = torch.from_numpy(s["edge_weight"][CITES])
    return d


def _check(g):
    assert g.node_types == ("author", "paper")
    assert g.num_nodes_dict() == {"author": 5, "paper": 8}
    assert g.num_edges_dict() == {WRITES: 6, CITES: 6}
    assert g.x["author"].dtype == np.float16 and g.x["paper"].shape == (8, 4)
    np.testing.assert_array_equal(g.y["paper"], np.arange(8) % 3)
    np.testing.assert_array_equal(np.flatnonzero(g.masks["paper"]["train"]), np.arange(4))
    assert g.weighted.tolist() == [1 if et == CITES else 0 for et in g.edge_types]
    # every (node, relation) segment lists exactly that relation's in-edges, ids ascending
    src = {WRITES: [0, 1, 2, 3, 4, 0], CITES: [1, 2, 3, 4, 5, 6]}
    dst = {WRITES: [0, 1, 2, 3, 4, 7], CITES: [0, 0, 1, 2, 3, 3]}
    for r, et in enumerate(g.edge_types):
        t = g.node_types.index(et[2])
        j = r - g.rel_offset[t]
        R_t = g.rel_offset[t + 1] - g.rel_offset[t]
        for v in range(g.num_nodes_of(et[2])):
            s = g.seg_base[t] + v * R_t + j
            e = g.edge_ids[g.indptr[s]:g.indptr[s + 1]]
            assert e.tolist() == [i for i in range(6) if dst[et][i] == v]
            soff = g.node_type_offset[g.node_types.index(et[0])]
            assert (g.indices[g.indptr[s]:g.indptr[s + 1]] - soff).tolist() == \
                [src[et][i] for i in e]
            if et == CITES:
                np.testing.assert_array_equal(g.weights[g.indptr[s]:g.indptr[s + 1]], e + 1)


def test_dict_form():
    _check(typed_graph(_spec()))


def test_hetero_data_and_saved_files(tmp_path):
    d = _hetero_data()
    _check(load_typed_graph(d))
    _check(load_typed_graph(d.to_dict()))
    torch.save(d, tmp_path / "h.pt")
    torch.save(d.to_dict(), tmp_path / "hd.pt")
    tensors = {k: {kk: torch.from_numpy(np.asarray(vv)) if not isinstance(vv, dict) else
                   {s: torch.from_numpy(np.asarray(m)) for s, m in vv.items()}
                   for kk, vv in v.items()} for k, v in _spec().items()}
    torch.save(tensors, tmp_path / "spec.pt")  # numpy arrays are refused by weights_only
    for f in ("h.pt", "hd.pt", "spec.pt"):
        _check(load_typed_graph(tmp_path / f))


def _gz(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        f.write(text)


def _ogb_dir(root, count_ok=True):
    s = _spec()
    raw = root / "raw"
    _gz(raw / "num-node-dict.csv.gz", "paper,author\n8,5\n")
    for et, key in ((WRITES, WRITES), (CITES, "paper__cites__paper")):
        d = raw / "relations" / "___".join(et)
        ei = s["edge_index"][key]
        _gz(d / "edge.csv.gz", "".join(f"{a},{b}\n" for a, b in ei.T))
        _gz(d / "num-edge-list.csv.gz", f"{ei.shape[1] + (0 if count_ok else 1)}\n")
    for t in ("paper", "author"):
        x = s["x"][t]
        _gz(raw / "node-feat" / t / "node-feat.csv.gz",
            "".join(",".join(repr(float(v)) for v in row) + "\n" for row in x))
    _gz(raw / "node-label" / "paper" / "node-label.csv.gz",
        "".join(f"{v}\n" for v in s["y"]["paper"]))
    _gz(root / "split" / "time" / "paper" / "train.csv.gz", "0\n1\n2\n3\n")
    return root


def test_ogb_hetero_dir(tmp_path):
    g = load_typed_graph(_ogb_dir(tmp_path / "mag"))
    assert g.num_nodes_dict() == {"author": 5, "paper": 8}
    assert g.num_edges_dict() == {WRITES: 6, CITES: 6}
    assert g.x["author"].shape == (5, 3) and g.x["paper"].dtype == np.float32
    np.testing.assert_allclose(g.x["paper"], _spec()["x"]["paper"])
    np.testing.assert_array_equal(np.flatnonzero(g.masks["paper"]["train"]), np.arange(4))
    with pytest.raises(GraphFormatError, match="num-edge-list"):
        read_ogb_hetero_dir(_ogb_dir(tmp_path / "bad", count_ok=False))


@pytest.mark.parametrize("change, match", [
    (lambda s: s["edge_index"].__setitem__(("venue", "has", "paper"), np.zeros((2, 1), int)),
     "node type 'venue'"),
    (lambda s: s["edge_index"].__setitem__(WRITES, np.array([[5], [0]])),
     "source id 5, outside the 5 nodes of type 'author'"),
    (lambda s: s["edge_index"].__setitem__(WRITES, np.array([[0], [-1]])), "destination id -1"),
    (lambda s: s["edge_index"].__setitem__(WRITES, np.zeros((3, 2), int)), "shape \\(3, 2\\)"),
    (lambda s: s["x"].__setitem__("paper", np.zeros((7, 2))), "has shape \\(7, 2\\)"),
    (lambda s: s["y"].__setitem__("venue", np.zeros(3)), "unknown node type"),
    (lambda s: s["edge_weight"].__setitem__(CITES, np.ones(5)), "shape \\(5,\\)"),
    (lambda s: s["edge_weight"].__setitem__(CITES, -np.ones(6)), "-1"),
    (lambda s: s["edge_weight"].__setitem__(WRITES[::-1], np.ones(6)), "no edge_index"),
    (lambda s: s["edge_index"].__setitem__("paper__cites", np.zeros((2, 1), int)),
     "not an edge type"),
    (lambda s: s["masks"]["paper"].__setitem__("holdout", np.arange(2)), "unknown splits"),
])
def test_bad_input_is_a_typed_error(change, match):
    s = _spec()
    change(s)
    with pytest.raises(GraphFormatError, match=match):
        typed_graph(s)


def test_memory_is_checked_before_building(monkeypatch):
    import mnmg_sampler.system.host_limits as hl

    monkeypatch.setattr(hl, "available_bytes", lambda: 100)
    with pytest.raises(MemoryBudgetError, match="typed CSR of 12 edges"):
        typed_graph(_spec())


def test_info_prints_types_and_relations(tmp_path, capsys):
    from mnmg_sampler.commands.cli import main

    torch.save(_hetero_data(), tmp_path / "h.pt")
    with pytest.raises(SystemExit) as ei:
        main(["info", str(tmp_path / "h.pt"), "--json"])
    assert ei.value.code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["node_types"] == {"author": 5, "paper": 8}
    assert out["edge_types"] == {"author__writes__paper": 6, "paper__cites__paper": 6}
    assert out["features"] == {"author": {"shape": [5, 3], "dtype": "float16"},
                               "paper": {"shape": [8, 4], "dtype": "float32"}}
    with pytest.raises(SystemExit) as ei:
        main(["info", str(_ogb_dir(tmp_path / "mag"))])
    assert ei.value.code == 0
    text = capsys.readouterr().out
    assert "edges author__writes__paper" in text and "features x author" in text
    with pytest.raises(SystemExit) as ei:
        main(["info", str(tmp_path / "h.pt"), "--undirected"])
    assert ei.value.code == 2 and "typed graph" in capsys.readouterr().err


def test_renumber_true_on_a_typed_graph_is_refused(tmp_path, capsys):
    # typed graphs keep per-type ids: --renumber true would be ignored, so it is refused in one
    # line (info and partition alike); auto and false are what happens anyway
    from mnmg_sampler.commands.cli import main

    torch.save(_hetero_data(), tmp_path / "h.pt")
    for argv in (["info", str(tmp_path / "h.pt"), "--renumber", "true"],
                 ["partition", str(tmp_path / "h.pt"), "--parts", "2", "--out",
                  str(tmp_path / "parts"), "--method", "random", "--renumber", "true"]):
        with pytest.raises(SystemExit) as ei:
            main(argv)
        err = capsys.readouterr().err
        assert ei.value.code == 2 and "--renumber true" in err and "typed graph" in err, err
        assert "Traceback" not in err and "Fix:" in err
    assert not (tmp_path / "parts").exists()
    with pytest.raises(SystemExit) as ei:
        main(["info", str(tmp_path / "h.pt"), "--renumber", "false", "--json"])
    assert ei.value.code == 0 and json.loads(capsys.readouterr().out)["node_types"]
