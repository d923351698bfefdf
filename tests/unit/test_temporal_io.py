"""Edge time columns of CSV / TSV / parquet tables, and the temporal edge split
(docs/temporal.md)."""

from __future__ import annotations

import numpy as np
import pytest

from mnmg_sampler.errors import ConfigError, GraphFormatError
from mnmg_sampler.graph.link_split import split_edges_by_time, temporal_edge_split
from mnmg_sampler.graph.temporal import load_temporal_graph


def _edges(m=60, n=15, seed=0):
    g = np.random.default_rng(seed)
    return g.integers(0, n, m), g.integers(0, n, m), g.integers(-5, 1000, m)


def _check_graph(g, src, dst, t):
    assert g.node_types == ("node",) and g.time_attr == "ts"
    assert g.num_nodes == max(src.max(), dst.max()) + 1
    np.testing.assert_array_equal(g.edge_time, t[g.edge_ids])  # each entry: its edge's time
    seg = np.repeat(np.arange(g.num_nodes), np.diff(g.indptr))
    np.testing.assert_array_equal(seg, dst[g.edge_ids])  # row v holds the edges into v
    np.testing.assert_array_equal(g.indices, src[g.edge_ids])


@pytest.mark.parametrize("suffix, sep", [(".csv", ","), (".tsv", "\t"), (".csv.gz", ",")])
def test_time_column_of_a_text_table(tmp_path, suffix, sep):
    import gzip

    src, dst, t = _edges()
    text = f"weight{sep}DST{sep}src{sep}TS\n" + "".join(
        f"0.5{sep}{d}{sep}{s}{sep}{x}\n" for s, d, x in zip(src, dst, t, strict=True))
    p = tmp_path / f"e{suffix}"
    if suffix.endswith(".gz"):
        p.write_bytes(gzip.compress(text.encode()))
    else:
        p.write_text(text)
    _check_graph(load_temporal_graph(p, time_attr="ts"), src, dst, t)


@pytest.mark.parametrize("row, msg", [("1,2,1.5", "line 3"), ("1,2,", "line 3"),
                                      ("1,2,nan", "line 3"), ("1,-2,4", "line 3")])
def test_bad_text_times_are_typed_errors_naming_the_line(tmp_path, row, msg):
    p = tmp_path / "e.csv"
    p.write_text(f"src,dst,ts\n0,1,5\n{row}\n")
    with pytest.raises(GraphFormatError, match=msg):
        load_temporal_graph(p, time_attr="ts")


def test_missing_column_or_header_is_a_typed_error(tmp_path):
    p = tmp_path / "e.csv"
    p.write_text("src,dst,when\n0,1,5\n")
    with pytest.raises(GraphFormatError, match="no column 'ts'"):
        load_temporal_graph(p, time_attr="ts")
    p.write_text("0,1,5\n")
    with pytest.raises(GraphFormatError, match="no header"):
        load_temporal_graph(p, time_attr="ts")


def test_time_column_of_a_parquet_table(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    src, dst, t = _edges()
    p = tmp_path / "e.parquet"
    pq.write_table(pa.table({"source": src, "target": dst, "ts": t}), p)
    _check_graph(load_temporal_graph(p, time_attr="ts"), src, dst, t)
    pq.write_table(pa.table({"source": src, "target": dst, "ts": t + 0.5}), p)
    with pytest.raises(GraphFormatError, match="non-integral"):
        load_temporal_graph(p, time_attr="ts")
    pq.write_table(pa.table({"source": src, "target": dst,
                             "ts": pa.array([None] + list(t[1:]), pa.int64())}), p)
    with pytest.raises(GraphFormatError, match="missing"):
        load_temporal_graph(p, time_attr="ts")


@pytest.mark.parametrize("fractions", [[0.7, 0.15, 0.15], [0.5, 0.2, 0.1], [0.0, 0.5, 0.5]])
def test_temporal_split_keeps_the_future_out_of_each_sampling_graph(fractions):
    g = np.random.default_rng(1)
    t = g.integers(0, 40, 500)  # many ties: cuts must not separate equal times
    s = temporal_edge_split(t, fractions)
    train, val, test = (s.edges[k] for k in ("train", "val", "test"))
    assert np.intersect1d(train, val).size == np.intersect1d(val, test).size == 0
    assert abs(train.size - round(fractions[0] * 500)) <= np.bincount(t).max()
    if train.size and val.size:
        assert t[train].max() < s.start["val"] == t[val].min()
    if val.size and test.size:
        assert t[val].max() < s.start["test"] == t[test].min()
    graph_train = s.graph["train"]
    # no validation or test edge, nor any edge at or after validation's start, in training
    assert np.intersect1d(graph_train, np.concatenate([val, test])).size == 0
    if val.size:
        assert np.all(t[graph_train] < s.start["val"])
        assert np.all(t[s.graph["val"]] < s.start["val"])
    np.testing.assert_array_equal(np.sort(graph_train), np.sort(train))
    if test.size:
        assert np.all(t[s.graph["test"]] < s.start["test"])
        np.testing.assert_array_equal(np.sort(s.graph["test"]),
                                      np.sort(np.concatenate([train, val])))
    later = np.flatnonzero(t >= (s.start["val"] if val.size else np.inf))
    assert np.intersect1d(graph_train, later).size == 0


def test_split_edges_by_time_arrays_and_errors():
    src, dst, t = _edges(m=100)
    out = split_edges_by_time(np.stack([src, dst]), t, [0.8, 0.1, 0.1])
    for k in ("train", "val", "test"):
        assert out[k].shape == (2, out[f"{k}_time"].size)
        assert np.all(np.diff(out[f"{k}_time"]) >= 0)  # ascending time
    assert out["val_time"].min() > out["graph_train_time"].max()
    assert out["graph_test"].shape[1] == out["train"].shape[1] + out["val"].shape[1]
    with pytest.raises(ConfigError):
        temporal_edge_split(t, [0.5, -0.1, 0.1])
    with pytest.raises(GraphFormatError):
        temporal_edge_split(np.full(5, np.nan), [0.8, 0.1, 0.1])


def test_cli_partition_reads_the_time_column(tmp_path, capsys):
    from mnmg_sampler.commands.cli import main
    from mnmg_sampler.graph.partition_io import load_partition

    src, dst, t = _edges()
    p = tmp_path / "e.csv"
    p.write_text("src,dst,ts\n" + "".join(f"{s},{d},{x}\n" for s, d, x in
                                          zip(src, dst, t, strict=True)))
    with pytest.raises(SystemExit) as ei:
        main(["partition", str(p), "--time-column", "ts", "--parts", "2", "--method", "random",
              "--out", str(tmp_path / "parts")])
    assert ei.value.code == 0, capsys.readouterr()
    seen = []
    for r in range(2):
        part = load_partition(tmp_path / "parts", r, 2)
        assert part.typed.time_attr == "ts"
        e = np.asarray(part.edge_ids)
        np.testing.assert_array_equal(np.asarray(part.typed.edge_time), t[e])
        seen.append(e)
    np.testing.assert_array_equal(np.sort(np.concatenate(seen)), np.arange(t.size))
    with pytest.raises(SystemExit) as ei:  # a typed error, not a traceback
        main(["partition", str(p), "--time-column", "when", "--parts", "2", "--method",
              "random", "--out", str(tmp_path / "p2")])
    assert ei.value.code != 0
    assert "no column 'when'" in capsys.readouterr().err


def _typed_stores(with_time=True):
    """A HeteroData.to_dict()-shaped mapping (per-type attribute dicts, tensors) and the plain
    dict form of the same graph with its times."""
    import torch

    g = np.random.default_rng(3)
    n = {"u": 9, "i": 7}
    rels = [("u", "rates", "i"), ("i", "rev", "u")]
    ei = {r: np.stack([g.integers(0, n[r[0]], 30), g.integers(0, n[r[2]], 30)]) for r in rels}
    et = {r: g.integers(0, 50, 30) for r in rels}
    nt = {t: g.integers(0, 50, k) for t, k in n.items()}
    stores = {t: {"num_nodes": k} for t, k in n.items()}
    stores |= {r: {"edge_index": torch.from_numpy(ei[r])} for r in rels}
    if with_time:
        for t in n:
            stores[t]["when"] = torch.from_numpy(nt[t])
        for r in rels:
            stores[r]["when"] = torch.from_numpy(et[r])
    plain = {"num_nodes": n, "edge_index": ei, "edge_time": et, "node_time": nt,
             "time_attr": "when"}
    return stores, plain


def test_saved_hetero_data_dict_reads_its_time(tmp_path):
    """A saved HeteroData.to_dict() (.pt) gets the time its types carry, as the in-memory one;
    a missing time attribute is a GraphFormatError naming it, never a graph without time."""
    import torch

    from mnmg_sampler.graph.typed import typed_graph

    stores, plain = _typed_stores()
    p = tmp_path / "g.pt"
    torch.save(stores, p)
    want = typed_graph(plain)
    for g in (load_temporal_graph(p, time_attr="when"), load_temporal_graph(stores, "when")):
        assert g.time_attr == "when"
        np.testing.assert_array_equal(g.edge_time, want.edge_time)
        np.testing.assert_array_equal(g.node_time, want.node_time)
        np.testing.assert_array_equal(g.edge_ids, want.edge_ids)
    with pytest.raises(GraphFormatError, match="no attribute 'time'"):
        load_temporal_graph(p)  # the default time_attr names no attribute here
    torch.save(_typed_stores(with_time=False)[0], p)
    with pytest.raises(GraphFormatError, match="no attribute 'when'"):
        load_temporal_graph(p, time_attr="when")
    untimed = {"num_nodes": plain["num_nodes"], "time_attr": "when",
               "edge_index": {r: torch.from_numpy(v) for r, v in plain["edge_index"].items()}}
    torch.save(untimed, p)  # the plain dict form without its edge_time / node_time keys
    with pytest.raises(GraphFormatError, match="no attribute 'when'"):
        load_temporal_graph(p, time_attr="when")


def test_saved_data_dict_reads_its_time(tmp_path):
    """A saved homogeneous Data.to_dict() (.pt): its time_attr is edge or node time, as in
    memory; without it, a GraphFormatError naming it."""
    import torch

    src, dst, t = _edges()
    d = {"edge_index": torch.from_numpy(np.stack([src, dst])), "num_nodes": 15,
         "ts": torch.from_numpy(t)}
    p = tmp_path / "d.pt"
    torch.save(d, p)
    g = load_temporal_graph(p, time_attr="ts")
    np.testing.assert_array_equal(g.edge_time, t[g.edge_ids])
    with pytest.raises(GraphFormatError, match="no attribute 'time'"):
        load_temporal_graph(p)


def _hetero_data(pyg, stores: dict):
    """A PyG ``HeteroData`` holding ``stores`` (per-type attribute dicts)."""
    data = pyg.HeteroData()
    for k, st in stores.items():
        for a, v in st.items():
            data[k][a] = v
    return data


def test_saved_hetero_data_object_reads_its_time(tmp_path):
    pyg = pytest.importorskip("torch_geometric.data")
    import torch

    stores, plain = _typed_stores()
    data = _hetero_data(pyg, stores)
    p = tmp_path / "h.pt"
    torch.save(data, p)
    from mnmg_sampler.graph.typed import typed_graph

    g = load_temporal_graph(p, time_attr="when")
    want = typed_graph(plain)
    np.testing.assert_array_equal(g.edge_time, want.edge_time)
    np.testing.assert_array_equal(g.node_time, want.node_time)
    with pytest.raises(GraphFormatError, match="no attribute 'ts'"):
        load_temporal_graph(p, time_attr="ts")


def test_partition_graph_keeps_every_time_attr_it_is_given(tmp_path):
    """``partition_graph`` (issue 32): a HeteroData's ``time_attr`` attributes (node and edge)
    and a homogeneous Data's edge ``time`` travel into the parts, which are typed; split masks
    and edge weights of the Data come along; ``time_attr=None`` reads no time (homogeneous
    parts); node data given beside a timed graph, and a time on only some relations, are typed
    errors at partition time that say how to keep or drop the time."""
    pyg = pytest.importorskip("torch_geometric.data")
    import torch

    from mnmg_sampler.graph.api import partition_graph
    from mnmg_sampler.graph.partition_io import load_partition, read_manifest

    stores, plain = _typed_stores()
    data = _hetero_data(pyg, stores)
    out = partition_graph(data, num_parts=2, out=tmp_path / "h", time_attr="when")
    parts = [load_partition(out, r, 2).typed for r in range(2)]
    assert all(tp.time_attr == "when" for tp in parts)
    for key, given in (("edge_time", plain["edge_time"]), ("node_time", plain["node_time"])):
        np.testing.assert_array_equal(  # every input time once, over the parts
            np.sort(np.concatenate([np.asarray(getattr(tp, key)) for tp in parts])),
            np.sort(np.concatenate(list(given.values()))))
    with pytest.raises(GraphFormatError, match="no times for"):  # time on one relation only
        del data["i", "rev", "u"].when
        partition_graph(data, num_parts=2, out=tmp_path / "h2", time_attr="when")

    src, dst, t = _edges()
    t = t + 1_600_000_000  # Unix seconds
    mask = torch.arange(15) < 10
    d = pyg.Data(edge_index=torch.from_numpy(np.stack([src, dst])), num_nodes=15,
                 time=torch.from_numpy(t), train_mask=mask,
                 edge_weight=torch.rand(src.size) + 0.1)
    out = partition_graph(d, num_parts=2, out=tmp_path / "d")
    m = read_manifest(out)["typed"]
    assert m["time_attr"] == "time" and m["node_types"] == ["node"] and m["weighted"]
    assert m["masks"] == {"node": ["train"]}
    seen = []
    for r in range(2):
        part = load_partition(out, r, 2)
        e = np.asarray(part.edge_ids)
        np.testing.assert_array_equal(np.asarray(part.typed.edge_time), t[e])
        seen.append(e)
    np.testing.assert_array_equal(np.sort(np.concatenate(seen)), np.arange(t.size))
    assert "typed" not in read_manifest(partition_graph(d, num_parts=2, out=tmp_path / "d0",
                                                         time_attr=None))
    with pytest.raises(GraphFormatError, match="time_attr=None"):
        partition_graph(d, x=np.zeros((15, 2), np.float32), num_parts=2, out=tmp_path / "d1")
    p = tmp_path / "e.csv"  # a table: its time column makes one-type typed parts
    p.write_text("src,dst,time\n" + "".join(f"{s},{d_},{x}\n" for s, d_, x in
                                            zip(src, dst, t, strict=True)))
    assert read_manifest(partition_graph(p, num_parts=2, out=tmp_path / "c"))["typed"][
        "time_attr"] == "time"
    p.write_text("src,dst,w\n" + "".join(f"{s},{d_},1\n" for s, d_ in
                                         zip(src, dst, strict=True)))
    assert "typed" not in read_manifest(partition_graph(p, num_parts=2, out=tmp_path / "c2"))


def test_hashed_ids_with_time_are_a_typed_error_saying_what_works(tmp_path):
    """A timed edge table with hashed (sparse 64-bit) ids: graphs with time are not renumbered
    yet, so partitioning it is a typed error before anything is allocated, with the two ways
    that work (ids 0..N-1, or no time: the homogeneous graph is renumbered)."""
    from mnmg_sampler.errors import MemoryBudgetError
    from mnmg_sampler.graph.api import partition_graph
    from mnmg_sampler.graph.partition_io import read_manifest

    g = np.random.default_rng(5)
    ids = g.integers(1 << 40, 1 << 62, 30, dtype=np.int64)
    src, dst, t = _edges()
    p = tmp_path / "hashed.csv"
    p.write_text("src,dst,time\n" + "".join(f"{ids[s]},{ids[d]},{x + 1_600_000_000}\n"
                                            for s, d, x in zip(src, dst, t, strict=True)))
    with pytest.raises((MemoryBudgetError, GraphFormatError), match="time_attr=None"):
        partition_graph(p, num_parts=2, out=tmp_path / "p")
    out = partition_graph(p, num_parts=2, out=tmp_path / "q", time_attr=None)
    assert "typed" not in read_manifest(out)  # renumbered homogeneous parts


def test_table_has_column_reads_headers_only(tmp_path):
    """Whether a table names the time column (which decides typed parts): CSV, gzipped TSV
    with a comment line, parquet; a headerless file or an unreadable one has no column."""
    import gzip

    from mnmg_sampler.graph.tables import table_has_column

    (tmp_path / "a.csv").write_text("src,dst,Time\n0,1,5\n")
    with gzip.open(tmp_path / "b.tsv.gz", "wt") as f:
        f.write("# ratings\nu\tv\tts\n0\t1\t5\n")
    (tmp_path / "c.csv").write_text("0,1,5\n1,2,6\n")
    assert table_has_column(tmp_path / "a.csv", "time")
    assert table_has_column(tmp_path / "b.tsv.gz", "ts")
    assert not table_has_column(tmp_path / "b.tsv.gz", "time")
    assert not table_has_column(tmp_path / "c.csv", "time")
    assert not table_has_column(tmp_path / "missing.csv", "time")
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"src": [0, 1], "dst": [1, 2], "time": [5, 6]}), tmp_path / "d.parquet")
    assert table_has_column(tmp_path / "d.parquet", "time")
    assert not table_has_column(tmp_path / "d.parquet", "when")
