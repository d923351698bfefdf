"""Odd but real inputs (issue 23): each read correctly or refused with one typed line.

Byte-order marks, header rows, non-integer fields, other encodings, bool and float id arrays,
ids and node counts that would size a huge CSR, and sparse 64-bit ids (renumbered).
"""

from __future__ import annotations

import gzip
import warnings

import numpy as np
import pytest
import torch

from mnmg_sampler.errors import GraphFormatError, MemoryBudgetError, SamplingInputError
from mnmg_sampler.graph.build import RENUMBER_FLOOR, ReadOptions, should_renumber
from mnmg_sampler.graph.datasets import load_graph
from mnmg_sampler.sampling.sampler import sample


@pytest.fixture(autouse=True)
def _warnings_are_errors():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's UserWarning must never leak
        yield


def _edges(g) -> list[tuple[int, int]]:
    dst = np.repeat(np.arange(g.num_nodes), g.degrees())
    order = np.argsort(g.edge_ids, kind="stable")
    return list(zip(g.original_ids(g.indices[order]).tolist(),
                    g.original_ids(dst[order]).tolist(), strict=True))


def _write(path, text: str | bytes):
    data = text.encode() if isinstance(text, str) else text
    if path.name.endswith(".gz"):
        data = gzip.compress(data)
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("name", ["g.txt", "g.txt.gz", "g.csv", "g.tsv", "g.edges"])
def test_utf8_bom_is_stripped(tmp_path, name):
    sep = "," if name.endswith(".csv") else "\t" if name.endswith(".tsv") else " "
    p = _write(tmp_path / name, f"\ufeff0{sep}1\n1{sep}2\n")
    assert _edges(load_graph(p)) == [(0, 1), (1, 2)]


@pytest.mark.parametrize("name", ["g.txt", "g.csv"])
@pytest.mark.parametrize("enc", ["utf-16", "utf-16-be", "utf-32"])
def test_wide_encodings_are_refused(tmp_path, name, enc):
    p = _write(tmp_path / name, "0 1\n1 2\n".encode(enc))
    with pytest.raises(GraphFormatError, match=r"g\.(txt|csv) is UTF-(16|32).*not UTF-8"):
        load_graph(p)


def test_latin1_header_names_file_and_line(tmp_path):
    p = _write(tmp_path / "g.csv", "# comment\nsourc\xe9,dst\n0,1\n".encode("latin-1"))
    with pytest.raises(GraphFormatError, match=r"g\.csv, line 2: byte 0xe9 is not UTF-8"):
        load_graph(p)
    q = _write(tmp_path / "g.txt", "0 1\n1 \xe9\n".encode("latin-1"))
    with pytest.raises(GraphFormatError, match=r"g\.txt, line 2: a non-ASCII byte"):
        load_graph(q)


@pytest.mark.parametrize("name, body", [
    ("g.txt", "src dst\n0 1\n1 2\n"),
    ("g.txt", "# made by hand\n\nsource target\r\n0 1\r\n1 2\r\n"),
    ("g.txt.gz", "\ufeffsrc\tdst\n0\t1\n1\t2\n"),
    ("g.csv", "src,dst\n0,1\n1,2\n"),
    ("g.csv", "\ufeff\"from\",\"to\",\"w\"\r\n0,1,0.5\r\n\r\n1,2,0.25\r\n"),
    ("g.tsv.gz", "# c\nu\tv\n0\t1\n# c2\n1\t2\n"),
])
def test_header_rows(tmp_path, name, body):
    g = load_graph(_write(tmp_path / name, body))
    assert _edges(g) == [(0, 1), (1, 2)]
    assert g.header is not None and not any(c.isdigit() for c in g.header[1])


def test_header_line_is_reported_by_info(tmp_path, capsys):
    from mnmg_sampler.commands.cli import main

    p = _write(tmp_path / "g.txt", "# c\nsrc dst\n0 1\n")
    with pytest.raises(SystemExit) as ei:
        main(["info", str(p)])
    assert ei.value.code == 0
    out = capsys.readouterr().out
    assert "header row" in out and "line 2" in out and "src dst" in out and "renumbered" in out
    ids, src, dst = _hashed(50, 100)
    q = tmp_path / "h.npz"
    np.savez(q, src=src, dst=dst)
    for flag, word in (([], "distinct ids (largest"),
                       (["--renumber", "false"], "Nothing was allocated. Fix:")):
        with pytest.raises(SystemExit) as ei:
            main(["info", str(q), *flag])
        out = capsys.readouterr()
        assert word in out.out + out.err


@pytest.mark.parametrize("name", ["g.txt", "g.csv", "g.txt.gz"])
@pytest.mark.parametrize("first, where", [
    ("0 1e3", "1e3"), ("0 1.5", "1.5"), ("a 1", "a 1"), ("0 -", "0 -"), ("1 x y", "x"),
])
def test_first_line_with_a_number_is_data_not_a_header(tmp_path, name, first, where):
    body = first.replace(" ", ",") if name.endswith(".csv") else first
    p = _write(tmp_path / name, f"{body}\n1 2\n".replace(" ", "," if ".csv" in name else " "))
    with pytest.raises(GraphFormatError) as ei:
        load_graph(p)
    msg = str(ei.value)
    assert "g." in msg and "line 1" in msg, msg
    assert "\n" not in msg.strip()


def test_later_bad_line_in_a_table(tmp_path):
    p = _write(tmp_path / "g.csv", "src,dst\n0,1\n\n1,2.5\n")
    with pytest.raises(GraphFormatError, match=r"g\.csv, line 4: .*'1,2\.5'"):
        load_graph(p)


@pytest.mark.parametrize("name", ["g.txt", "g.csv"])
def test_header_only_or_empty_file_is_an_empty_graph(tmp_path, name):
    for body in ("src dst\n", "", "# only a comment\n\n"):
        g = load_graph(_write(tmp_path / name, body.replace(" ", ",") if ".csv" in name
                              else body))
        assert g.num_nodes == 0 and g.num_edges == 0


# -- bool and float arrays are not ids -----------------------------------------------------


@pytest.mark.parametrize("arrays, needle", [
    (dict(src=np.array([True, False]), dst=np.array([False, True])), "'src' is a 1-d bool"),
    (dict(edge_index=np.array([[True, False], [False, True]])), "bool array"),
    (dict(src=np.array([0.0, 1.5]), dst=np.array([1.0, 2.0])), "'src' is a 1-d float64"),
    (dict(edge_index=np.array([[0.0, 1.0], [1.0, 2.5]])), "fractional"),
    (dict(edge_index=np.array([[0.0, 1.0], [1.0, 2.0]])), "float64 array"),
    (dict(edge_index=np.array([[0, 2**63], [1, 2]], np.uint64)), "above 2\\*\\*63 - 1"),
])
def test_npz_ids_must_be_integers(tmp_path, arrays, needle):
    p = tmp_path / "g.npz"
    np.savez(p, **arrays)
    with pytest.raises(GraphFormatError, match=needle):
        load_graph(p)


@pytest.mark.parametrize("data", [
    torch.tensor([[True, False], [False, True]]),
    (np.array([0.5, 1.0]), np.array([1.0, 2.0])),
    {"edge_index": torch.tensor([[0.0, 1.0], [1.0, 2.0]])},
])
def test_in_memory_ids_must_be_integers(data):
    with pytest.raises(GraphFormatError, match="integer"):
        load_graph(data)


def test_sample_takes_a_bool_mask_as_pyg_does():
    g = load_graph(torch.tensor([[1, 2, 3, 0], [0, 0, 1, 2]]))
    mask = torch.tensor([True, False, True, False])
    b = sample(g, mask, [2])
    assert b.n_id[:b.batch_size].tolist() == [0, 2]
    assert torch.equal(b.n_id, sample(g, np.array([0, 2]), [2]).n_id)
    for bad, needle in ((torch.tensor([True, False]), "bool mask of length 2, but the graph "
                                                       "has 4 nodes"),
                        (np.ones(5, bool), "length 5"),
                        (np.array([0.0, 1.0]), "dtype float64"),
                        (np.array([4]), "out of range")):
        with pytest.raises(SamplingInputError, match=needle):
            sample(g, bad, [2])


# -- memory sized by input is checked first ------------------------------------------------


def test_huge_id_without_renumbering_is_a_memory_error(tmp_path):
    p = _write(tmp_path / "g.txt", "0 1\n1 10000000000\n")
    with pytest.raises(MemoryBudgetError) as ei:
        load_graph(p, renumber=False)
    msg = str(ei.value)
    assert "10,000,000,001 rows" in msg and "GiB" in msg and "Fix:" in msg
    assert "\n" not in msg


@pytest.mark.parametrize("num_nodes", [10**12, 2**40 + 10])
def test_npz_num_nodes_is_checked_before_allocating(tmp_path, num_nodes):
    p = tmp_path / "g.npz"
    np.savez(p, src=np.array([0, 1]), dst=np.array([1, 2]), num_nodes=np.array(num_nodes))
    with pytest.raises(MemoryBudgetError, match=f"{num_nodes:,} rows"):
        load_graph(p)


def test_bound_still_applies_when_memory_fits():
    with pytest.raises(GraphFormatError, match="above the bound 100"):
        load_graph((np.array([0]), np.array([101])), max_node_id=100)


def test_rmat_scale_is_checked_before_allocating():
    with pytest.raises(MemoryBudgetError, match="rmat:40:16"):
        load_graph("rmat:40")


# -- sparse (hashed) ids are renumbered ----------------------------------------------------


def test_renumber_rule():
    assert not should_renumber(RENUMBER_FLOOR - 1, 10)  # small: never worth it
    assert should_renumber(RENUMBER_FLOOR, 10)
    assert not should_renumber(4 * 10**6 - 1, 10**6)  # dense enough
    assert should_renumber(4 * 10**6, 10**6)
    with pytest.raises(GraphFormatError, match="renumber='auto', 'true' or 'false'"):
        ReadOptions(renumber="sometimes")


def _hashed(n: int = 2000, m: int = 6000, seed: int = 0):
    rng = np.random.default_rng(seed)
    ids = np.unique(rng.integers(0, 2**63 - 1, n, dtype=np.int64))
    return ids, ids[rng.integers(0, ids.size, m)], ids[rng.integers(0, ids.size, m)]


@pytest.mark.parametrize("fmt", ["txt", "csv", "npz", "memory"])
def test_hashed_ids_are_renumbered_and_kept(tmp_path, fmt):
    ids, src, dst = _hashed()
    if fmt == "txt":
        spec = tmp_path / "g.txt"
        spec.write_text("".join(f"{a} {b}\n" for a, b in zip(src, dst, strict=True)))
    elif fmt == "csv":
        spec = tmp_path / "g.csv"
        spec.write_text("user,item\n" + "".join(f"{a},{b}\n" for a, b in
                                                zip(src, dst, strict=True)))
    elif fmt == "npz":
        spec = tmp_path / "g.npz"
        np.savez(spec, src=src, dst=dst)
    else:
        spec = (torch.from_numpy(src), torch.from_numpy(dst))
    g = load_graph(spec)
    used = np.unique(np.concatenate([src, dst]))
    assert g.num_nodes == used.size and np.array_equal(g.node_ids, used)
    assert _edges(g) == list(zip(src.tolist(), dst.tolist(), strict=True))
    b = sample(g, used[:5], [3, 2], seed=1)  # seeds and n_id in the input's ids
    assert b.n_id[:5].tolist() == used[:5].tolist()
    assert np.isin(b.n_id.numpy(), used).all()
    with pytest.raises(SamplingInputError, match="not a node of the graph"):
        sample(g, np.array([12345]), [3])


def test_renumber_true_false_and_declared_num_nodes(tmp_path):
    p = _write(tmp_path / "g.txt", "10 20\n20 30\n")
    dense = load_graph(p)  # small ids: kept as they are
    assert dense.node_ids is None and dense.num_nodes == 31
    forced = load_graph(p, renumber=True)
    assert forced.node_ids.tolist() == [10, 20, 30] and forced.num_nodes == 3
    q = tmp_path / "g.npz"  # a declared node count is the file's word: auto keeps the ids
    np.savez(q, src=np.array([0, 5]), dst=np.array([5, 2**21]), num_nodes=np.array(2**21 + 1))
    assert load_graph(q).node_ids is None
    y = np.arange(2**21 + 1) % 7
    np.savez(q, src=np.array([0, 5]), dst=np.array([5, 2**21]), y=y)
    g = load_graph(q)  # renumbered; y follows the nodes
    assert g.node_ids.tolist() == [0, 5, 2**21] and g.y.tolist() == [0, 5, 2**21 % 7]


def test_sample_command_speaks_the_input_ids(tmp_path):
    from mnmg_sampler.commands.cli import main

    ids, src, dst = _hashed(300, 900)
    p = tmp_path / "g.npz"
    np.savez(p, src=src, dst=dst)
    used = np.unique(np.concatenate([src, dst]))
    np.save(tmp_path / "seeds.npy", used[:20])
    out = tmp_path / "batches"
    with pytest.raises(SystemExit) as ei:
        main(["sample", str(p), "--seeds-file", str(tmp_path / "seeds.npy"), "--batch-size", "8",
              "--fanouts", "3,2", "--out", str(out)])
    assert ei.value.code == 0
    seen = []
    for f in sorted(out.glob("batch_*.npz")):
        b = np.load(f)
        assert np.isin(b["n_id"], used).all()
        seen.append(b["n_id"][:int(b["batch_size"])])
    assert sorted(np.concatenate(seen).tolist()) == sorted(used[:20].tolist())
    np.save(tmp_path / "bad.npy", np.array([7]))
    with pytest.raises(SystemExit) as ei:
        main(["sample", str(p), "--seeds-file", str(tmp_path / "bad.npy")])
    assert ei.value.code != 0


def test_rmat_share_is_checked_before_allocating():
    from mnmg_sampler.graph.datasets import read_share

    with pytest.raises(MemoryBudgetError, match="rmat:40:16: rank 0's"):
        read_share("rmat:40", 0, 2)


def test_renumber_config_key_and_partition_source(tmp_path):
    from mnmg_sampler.config import load_config
    from mnmg_sampler.graph.partition_io import make_source

    assert load_config(None, []).dataset.renumber == "auto"
    assert load_config(None, ["dataset.renumber=false"]).dataset.renumber is False
    p = _write(tmp_path / "g.txt", "0 1\n")
    auto = make_source(p, method="random", seed=0, parts=1)
    assert "renumber" not in auto["load"]  # the default: old manifests stay current
    assert make_source(p, method="random", seed=0, parts=1, renumber=True)["load"][
        "renumber"] == "true"


def test_pyg_stores_refuse_a_renumbered_graph():
    pytest.importorskip("torch_geometric")
    from types import SimpleNamespace

    from mnmg_sampler.pyg.stores import PartitionFeatureStore, PartitionGraphStore

    svc = SimpleNamespace(node_ids=np.array([5, 2**40]))
    for store in (PartitionFeatureStore, PartitionGraphStore):
        with pytest.raises(SamplingInputError, match="renumbered graph"):
            store(svc)


def test_ogb_tables_with_a_bom_or_empty_read_without_warnings(tmp_path):
    raw = tmp_path / "ogb" / "raw"
    raw.mkdir(parents=True)
    (raw / "edge.csv").write_bytes(b"\xef\xbb\xbf0,1\n1,2\n")
    (raw / "node-label.csv").write_text("")
    with pytest.raises(GraphFormatError, match="node-label has 0 rows"):
        load_graph(tmp_path / "ogb")
    (raw / "node-label.csv").unlink()
    assert _edges(load_graph(tmp_path / "ogb")) == [(0, 1), (1, 2)]


def test_auto_rule_on_large_dense_and_moderately_sparse_ids():
    n = RENUMBER_FLOOR + 5  # dense: every id used, no renumbering
    ring = np.arange(n)
    assert load_graph((ring, (ring + 1) % n)).node_ids is None
    rng = np.random.default_rng(0)  # 40,000 distinct ids below 2**21 on 300,000 edges: sparse
    ids = np.unique(rng.integers(0, 2**21, 40_000))
    src, dst = ids[rng.integers(0, ids.size, 300_000)], ids[rng.integers(0, ids.size, 300_000)]
    g = load_graph((src, dst))
    assert g.node_ids is not None and g.num_nodes == np.unique(np.concatenate([src, dst])).size
