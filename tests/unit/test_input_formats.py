"""Bring your own data: every input form loads through every entry point (Python, CLI, YAML).

One small graph with features, labels and split masks is written in each supported form; each
must load to the same edges (and the node data the form can carry), through ``load_graph`` /
``partition_graph``, through ``mnmg-sampler info`` / ``partition``, and through a YAML config
(``dataset.*`` keys, as the job reads it).
"""

from __future__ import annotations

import gzip
import re

import numpy as np
import pytest
import torch

from mnmg_sampler import GraphFormatError, load_graph, load_partition, partition_graph
from mnmg_sampler.commands.cli import main
from mnmg_sampler.config import check_paths, load_config
from mnmg_sampler.errors import MemoryBudgetError
from mnmg_sampler.graph.api import split_from_partitions
from mnmg_sampler.graph.datasets import FORMATS
from mnmg_sampler.train.setup import load_dataset

N, E, F = 30, 90, 4
_rng = np.random.default_rng(5)
SRC = _rng.integers(0, N, E).astype(np.int64)
DST = _rng.integers(0, N, E).astype(np.int64)
SRC[0], DST[0] = N - 1, 0  # the largest id occurs, so max id + 1 == N
X = _rng.standard_normal((N, F)).astype(np.float32)
Y = _rng.integers(0, 3, N).astype(np.int64)
TRAIN = np.zeros(N, bool)
TRAIN[:12] = True
VAL = np.zeros(N, bool)
VAL[12:20] = True
TEST = ~(TRAIN | VAL)


def _edges_text(sep: str, header: str | None = None, weights: bool = False) -> str:
    lines = [] if header is None else [header]
    for i, (s, d) in enumerate(zip(SRC, DST, strict=True)):
        lines.append(sep.join([str(s), str(d)] + ([f"{0.5 * i:.1f}"] if weights else [])))
    return "\n".join(lines) + "\n"


def _write(tmp, form: str):
    """Write the graph in ``form``; returns (path, carries_node_data, keeps_edge_order)."""
    if form == "txt":
        p = tmp / "g.txt"
        p.write_text("# a SNAP-style comment\n" + _edges_text("\t"))
        return p, False, True
    if form == "txt.gz":
        p = tmp / "g.edges.gz"
        p.write_bytes(gzip.compress(_edges_text(" ", header="source target").encode()))
        return p, False, True
    if form == "csv-header":
        p = tmp / "g.csv"
        p.write_text(_edges_text(",", header="weight_col_first_is_src,dst,w", weights=True)
                     .replace("weight_col_first_is_src", "src"))
        return p, False, True
    if form == "tsv.gz-no-header":
        p = tmp / "g.tsv.gz"
        p.write_bytes(gzip.compress(_edges_text("\t").encode()))
        return p, False, True
    if form == "npy":
        p = tmp / "edge_index.npy"
        np.save(p, np.stack([SRC, DST]))
        return p, False, True
    if form == "npz-edge_index":
        p = tmp / "g.npz"
        np.savez(p, edge_index=np.stack([SRC, DST]), x=X, y=Y, train_mask=TRAIN, val_mask=VAL,
                 test_mask=TEST)
        return p, True, True
    if form == "npz-src-dst":
        p = tmp / "g2.npz"
        np.savez(p, src=SRC, dst=DST, num_nodes=np.int64(N), x=X, y=Y,
                 train_mask=np.flatnonzero(TRAIN), val_mask=VAL, test_mask=TEST)
        return p, True, True
    if form == "scipy":
        sp = pytest.importorskip("scipy.sparse")
        p = tmp / "adj.npz"
        m = sp.coo_matrix((np.ones(E), (SRC, DST)), shape=(N, N))
        sp.save_npz(p, m)  # COO keeps every entry (duplicates too), in order
        return p, False, True
    if form == "scipy-csr":
        sp = pytest.importorskip("scipy.sparse")
        p = tmp / "adj_csr.npz"
        m = sp.csr_matrix((np.ones(E), (SRC, DST)), shape=(N, N))
        sp.save_npz(p, m)  # CSR sums duplicates and sorts by row
        return p, False, False
    if form == "pyg-data":
        tg = pytest.importorskip("torch_geometric.data")
        p = tmp / "data.pt"
        torch.save(tg.Data(x=torch.from_numpy(X), y=torch.from_numpy(Y),
                           edge_index=torch.from_numpy(np.stack([SRC, DST])),
                           train_mask=torch.from_numpy(TRAIN), val_mask=torch.from_numpy(VAL),
                           test_mask=torch.from_numpy(TEST)), p)
        return p, True, True
    if form == "ogb-dir":
        d = tmp / "ogbn_mini"
        (d / "raw").mkdir(parents=True)
        (d / "split" / "random").mkdir(parents=True)

        def gz(rel, rows):
            (d / rel).write_bytes(gzip.compress(("\n".join(rows) + "\n").encode()))

        gz("raw/edge.csv.gz", [f"{s},{t}" for s, t in zip(SRC, DST, strict=True)])
        gz("raw/num-node-list.csv.gz", [str(N)])
        gz("raw/node-feat.csv.gz", [",".join(f"{v:.9g}" for v in row) for row in X])
        gz("raw/node-label.csv.gz", [str(v) for v in Y])
        for name, m in (("train", TRAIN), ("valid", VAL), ("test", TEST)):
            gz(f"split/random/{name}.csv.gz", [str(i) for i in np.flatnonzero(m)])
        return d, True, True
    if form == "parquet":
        pa = pytest.importorskip("pyarrow")
        pq = pytest.importorskip("pyarrow.parquet")
        p = tmp / "g.parquet"
        pq.write_table(pa.table({"weight": np.ones(E), "source": SRC, "target": DST}), p)
        return p, False, True
    raise AssertionError(form)


FORMS = ["txt", "txt.gz", "csv-header", "tsv.gz-no-header", "npy", "npz-edge_index",
         "npz-src-dst", "scipy", "scipy-csr", "pyg-data", "ogb-dir", "parquet"]


def _edge_list(g) -> list[tuple[int, int]]:
    dst = np.repeat(np.arange(g.num_nodes), np.diff(g.indptr))
    order = np.argsort(g.edge_ids, kind="stable")
    return list(zip(g.indices[order].tolist(), dst[order].tolist(), strict=True))


def _check(g, carries: bool, ordered: bool, separate: bool = False) -> None:
    assert g.num_nodes == N
    want = list(zip(SRC.tolist(), DST.tolist(), strict=True))
    if ordered:
        assert _edge_list(g) == want
    else:
        assert sorted(set(_edge_list(g))) == sorted(set(want))
    if carries or separate:
        np.testing.assert_allclose(g.x, X, rtol=1e-6)
        assert g.y.dtype == np.int64 and np.array_equal(g.y, Y)
        assert set(g.masks) == {"train", "val", "test"}
        for k, m in (("train", TRAIN), ("val", VAL), ("test", TEST)):
            assert np.array_equal(g.masks[k], m), k
    else:
        assert g.x is None and g.y is None and not g.masks


def _separate_files(tmp):
    np.save(tmp / "feat.npy", X)
    (tmp / "labels.csv").write_text("\n".join(map(str, Y)) + "\n")
    np.save(tmp / "train_ids.npy", np.flatnonzero(TRAIN))  # ids, OGB style
    torch.save(torch.from_numpy(VAL), tmp / "val.pt")
    np.savez(tmp / "test.npz", mask=TEST)
    return {"x": tmp / "feat.npy", "y": tmp / "labels.csv",
            "masks": {"train": tmp / "train_ids.npy", "val": tmp / "val.pt",
                      "test": tmp / "test.npz"}}


def test_every_registered_format_is_covered():
    names = {f.name for f in FORMATS}
    assert len(names) == 9, names
    assert len(FORMS) >= len(names)


# --------------------------------------------------------------------------- Python


@pytest.mark.parametrize("form", FORMS)
def test_python_load_graph_and_partition_graph(tmp_path, form):
    path, carries, ordered = _write(tmp_path, form)
    g = load_graph(path)
    _check(g, carries, ordered)
    _check(load_graph(str(path)), carries, ordered)
    out = partition_graph(path, num_parts=2, out=tmp_path / "parts", seed=1)
    parts = [load_partition(out, r, 2) for r in range(2)]
    assert sum(p.num_local_nodes for p in parts) == N
    assert parts[0].num_edges == g.num_edges == (E if ordered else len(set(_edge_list(g))))
    split = split_from_partitions(out)
    if carries:
        assert np.array_equal(split["train"], np.flatnonzero(TRAIN))
        assert np.array_equal(split["test"], np.flatnonzero(TEST))
        x = np.zeros_like(X)
        for p in parts:
            x[np.asarray(p.orig_ids)] = p.x
        np.testing.assert_allclose(x, X, rtol=1e-6)
    else:
        assert split is None


def test_python_separate_node_files(tmp_path):
    path, _, _ = _write(tmp_path, "csv-header")
    _check(load_graph(path, **_separate_files(tmp_path)), False, True, separate=True)


def test_python_in_memory_forms(tmp_path):
    ei = torch.from_numpy(np.stack([SRC, DST]))
    for data in (ei, ei.numpy(), (torch.from_numpy(SRC), torch.from_numpy(DST)), (SRC, DST),
                 {"edge_index": ei, "x": X, "y": Y, "train_mask": TRAIN, "val_mask": VAL,
                  "test_mask": TEST}):
        g = load_graph(data)
        _check(g, isinstance(data, dict), True)
    tg = pytest.importorskip("torch_geometric.data")
    g = load_graph(tg.Data(edge_index=ei, x=torch.from_numpy(X), y=torch.from_numpy(Y),
                           train_mask=torch.from_numpy(TRAIN), val_mask=torch.from_numpy(VAL),
                           test_mask=torch.from_numpy(TEST)))
    _check(g, True, True)
    out = partition_graph(ei, x=torch.from_numpy(X), y=torch.from_numpy(Y), num_parts=2,
                          out=tmp_path / "mem", masks={"train": TRAIN, "val": VAL, "test": TEST})
    assert load_partition(out, 1, 2).x.shape[1] == F
    assert np.array_equal(split_from_partitions(out)["val"], np.flatnonzero(VAL))


def test_src_dst_pair_is_not_taken_for_a_path(tmp_path):
    from mnmg_sampler import partition

    big = np.arange(5000, dtype=np.int64)
    g = load_graph((big, big[::-1].copy()))  # str() of this pair is far too long for a path
    assert g.num_nodes == 5000 and g.num_edges == 5000
    out = partition((big, big[::-1].copy()), 2, "range", tmp_path / "p")
    assert load_partition(out, 1, 2).num_edges == 5000
    with pytest.raises(GraphFormatError, match="in-memory graph"):
        load_graph((big, big, big))
    with pytest.raises(GraphFormatError, match="no such built-in dataset or file"):
        load_graph("x" * 5000)


def test_node_id_bound(tmp_path):
    p = tmp_path / "huge.txt"
    p.write_text("0 1\n1 100000000000000000\n")  # 10**17: the 7 EiB allocation of issue 10
    g = load_graph(p)  # sparse ids: renumbered (issue 23), the original ids kept
    assert g.num_nodes == 3 and g.node_ids.tolist() == [0, 1, 10**17]
    with pytest.raises(MemoryBudgetError, match=r"CSR of 100,000,000,000,000,001 rows"):
        load_graph(p, renumber=False)  # memory is checked before the bound
    with pytest.raises(GraphFormatError, match="above the bound 100"):
        load_graph((np.array([0]), np.array([101])), max_node_id=100)
    csv = tmp_path / "huge.csv"
    csv.write_text("src,dst\n0,5000\n")
    with pytest.raises(GraphFormatError, match="above the bound 4999"):
        load_graph(csv, max_node_id=4999)
    assert load_graph(csv, max_node_id=5000).num_nodes == 5001


def test_unsupported_file_lists_every_format(tmp_path):
    p = tmp_path / "g.json"
    p.write_text("{}")
    with pytest.raises(GraphFormatError) as ei:
        load_graph(p)
    msg = str(ei.value)
    for f in FORMATS:
        assert f.name in msg
    d = tmp_path / "somedir"
    d.mkdir()
    with pytest.raises(GraphFormatError, match="directory without raw/edge.csv.gz"):
        load_graph(d)


def test_bad_inputs_are_typed_errors(tmp_path):
    cases = {
        "one.csv": "src,dst\n0\n",
        "float.csv": "0,1\n1,2.5\n",
        "half.csv": "src,weight\n0,1\n",
        "neg.tsv": "0\t-1\n",
    }
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(GraphFormatError, match=re.escape(name)):
            load_graph(tmp_path / name)
    np.save(tmp_path / "bad.npy", np.zeros((3, 4), np.int64))
    with pytest.raises(GraphFormatError, match=r"shape \(3, 4\)"):
        load_graph(tmp_path / "bad.npy")
    torch.save({"x": torch.zeros(2)}, tmp_path / "noedges.pt")
    with pytest.raises(GraphFormatError, match="no 'edge_index'"):
        load_graph(tmp_path / "noedges.pt")
    with pytest.raises(GraphFormatError, match="labels have shape"):
        load_graph((SRC, DST), y=np.zeros(3, np.int64))
    with pytest.raises(GraphFormatError, match="outside"):
        load_graph((SRC, DST), masks={"train": np.array([0, N + 3])})


class _Evil:
    """Any class a file could name: loading must not instantiate it."""


def test_pickled_object_is_refused(tmp_path):
    p = tmp_path / "evil.pt"
    torch.save({"edge_index": torch.zeros(2, 1, dtype=torch.long), "obj": _Evil()}, p)
    with pytest.raises(GraphFormatError, match="weights_only=True"):
        load_graph(p)


# --------------------------------------------------------------------------- CLI


@pytest.mark.parametrize("form", FORMS)
def test_cli_info_and_partition(tmp_path, capsys, form):
    path, carries, _ = _write(tmp_path, form)
    with pytest.raises(SystemExit) as ei:
        main(["info", str(path)])
    out = capsys.readouterr().out
    assert ei.value.code == 0, out
    assert re.search(rf"^nodes +{N}$", out, re.M)
    assert bool(re.search(r"^split masks +train 12, val 8, test 10$", out, re.M)) == carries
    with pytest.raises(SystemExit) as ei:
        main(["partition", str(path), "--parts", "2", "--method", "random",
              "--out", str(tmp_path / "p")])
    assert ei.value.code == 0
    assert load_partition(tmp_path / "p", 0, 2).num_nodes == N


def test_cli_separate_node_files(tmp_path, capsys):
    path, _, _ = _write(tmp_path, "tsv.gz-no-header")
    files = _separate_files(tmp_path)
    with pytest.raises(SystemExit) as ei:
        main(["partition", str(path), "--parts", "2", "--method", "range", "--out",
              str(tmp_path / "p"), "--features", str(files["x"]), "--labels", str(files["y"]),
              "--train-mask", str(files["masks"]["train"]), "--val-mask",
              str(files["masks"]["val"]), "--test-mask", str(files["masks"]["test"])])
    assert ei.value.code == 0
    assert "masks       train 12, val 8, test 10" in capsys.readouterr().out
    assert np.array_equal(split_from_partitions(tmp_path / "p")["train"], np.flatnonzero(TRAIN))
    with pytest.raises(SystemExit) as ei:
        main(["info", str(path), "--max-node-id", "10"])
    assert ei.value.code == 2
    assert "above the bound 10" in capsys.readouterr().err


# --------------------------------------------------------------------------- YAML


@pytest.mark.parametrize("form", FORMS)
def test_yaml_dataset(tmp_path, form):
    path, carries, ordered = _write(tmp_path, form)
    cfg_file = tmp_path / "job.yaml"
    cfg_file.write_text(f"dataset:\n  name: {path}\n  undirected: false\n"
                        "  drop_duplicates: false\n")
    cfg = load_config(cfg_file)
    check_paths(cfg)
    _check(load_dataset(cfg), carries, ordered)


def test_yaml_separate_node_files(tmp_path):
    path, _, _ = _write(tmp_path, "npy")
    f = _separate_files(tmp_path)
    cfg_file = tmp_path / "job.yaml"
    cfg_file.write_text(
        f"dataset:\n  name: {path}\n  drop_duplicates: false\n  features: {f['x']}\n"
        f"  labels: {f['y']}\n  train_mask: {f['masks']['train']}\n"
        f"  val_mask: {f['masks']['val']}\n  test_mask: {f['masks']['test']}\n"
        "  max_node_id: 1000\n")
    cfg = load_config(cfg_file)
    check_paths(cfg)
    _check(load_dataset(cfg), False, True, separate=True)
    cfg = load_config(cfg_file, ["dataset.max_node_id=20"])
    with pytest.raises(GraphFormatError, match="above the bound 20"):
        load_dataset(cfg)
