"""Edge time columns of CSV / TSV / parquet tables, and the temporal edge split
(docs/temporal.md)."""

from __future__ import annotations

import numpy as np
import pytest

from mnmg_sampler.errors import ConfigError, GraphFormatError
from mnmg_sampler.graph.temporal import load_temporal_graph
from mnmg_sampler.graph.temporal_split import split_edges_by_time, temporal_edge_split


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
    from mnmg_sampler.cli import main
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
