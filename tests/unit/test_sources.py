"""Splittable inputs: rank shares concatenate to the single-process edges, in input order."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from mnmg_sampler.errors import GraphFormatError
from mnmg_sampler.graph.datasets import load_graph, read_share
from mnmg_sampler.graph.sources import read_text_range, shard_files


def _cat(spec, world):
    shares = [read_share(spec, r, world) for r in range(world)]
    return (np.concatenate([s.src for s in shares]), np.concatenate([s.dst for s in shares]))


@pytest.mark.parametrize("world", [1, 2, 3, 7, 40])
def test_byte_ranges_cut_at_line_starts(tmp_path, world):
    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, 10**6, 25), rng.integers(0, 9, 25)
    lines = ["# header"] + [f"{s}\t{d}" if i % 3 else f"  {s} {d}  # c" for i, (s, d)
                            in enumerate(zip(src, dst, strict=True))] + [""]
    p = tmp_path / "e.txt"
    p.write_text("\n".join(lines[:-1]) + "\n\n")
    s, d = _cat(str(p), world)
    np.testing.assert_array_equal(s, src)
    np.testing.assert_array_equal(d, dst)


def test_no_trailing_newline_and_empty_file(tmp_path):
    p = tmp_path / "e.txt"
    p.write_text("1 2\n3 4")
    for w in (1, 2, 5):
        s, d = _cat(str(p), w)
        assert s.tolist() == [1, 3] and d.tolist() == [2, 4]
    q = tmp_path / "empty.txt"
    q.write_text("")
    assert read_text_range(q, 0, 3)[0].size == 0


def test_bad_line_is_named_with_its_byte_range(tmp_path):
    p = tmp_path / "e.txt"
    p.write_text("1 2\n" * 50 + "1 x\n" + "3 4\n" * 50)
    with pytest.raises(GraphFormatError, match=r"e\.txt \(bytes \d+\.\.\d+\)"):
        _cat(str(p), 2)


def test_shards_in_name_order_and_loaded_as_one_graph(tmp_path):
    d = tmp_path / "s"
    d.mkdir()
    (d / "b.txt").write_text("2 3\n")
    with gzip.open(d / "a.txt.gz", "wt") as f:
        f.write("0 1\n1 2\n")
    np.save(d / "c.npy", np.array([[3, 4], [4, 0]]))
    np.save(d / "d.src.npy", np.array([5]))
    np.save(d / "d.dst.npy", np.array([1]))
    (d / "notes.md").write_text("not edges")
    assert [p.name for p in shard_files(d)] == ["a.txt.gz", "b.txt", "c.npy", "d.src.npy"]
    for w in (1, 2, 3, 6):
        s, t = _cat(str(d), w)
        assert s.tolist() == [0, 1, 2, 3, 4, 5] and t.tolist() == [1, 2, 3, 4, 0, 1]
    g = load_graph(str(d))
    assert g.num_nodes == 6 and g.num_edges == 6 and g.name == str(d)
    g2 = load_graph(str(d / "*.npy"))
    assert g2.num_edges == 3
    ogb = tmp_path / "ogb" / "raw"
    ogb.mkdir(parents=True)  # an OGB directory is not a shard directory
    from mnmg_sampler.graph.sources import is_sharded

    (ogb / "edge.csv.gz").write_bytes(gzip.compress(b"0,1\n"))
    assert is_sharded(d) and is_sharded(str(d / "*.txt")) and not is_sharded(ogb.parent)
    assert not is_sharded(str(d / "c.npy")) and not is_sharded("rmat:4")


def test_bad_shards(tmp_path):
    with pytest.raises(GraphFormatError, match="no edge files"):
        shard_files(tmp_path / "*.txt")
    (tmp_path / "a").mkdir()
    np.save(tmp_path / "a" / "x.npy", np.zeros((3, 3)))
    with pytest.raises(GraphFormatError, match="not a usable edge array"):
        read_share(str(tmp_path / "a"), 0, 1)
    (tmp_path / "b").mkdir()
    np.save(tmp_path / "b" / "f.npy", np.zeros((3, 2), np.float32))
    with pytest.raises(GraphFormatError, match="integer array"):
        read_share(str(tmp_path / "b" / "*.npy"), 0, 1)


def test_rmat_shares_and_whole_inputs():
    from mnmg_sampler.graph.rmat import rmat_edges

    s, d = _cat("rmat:6:3", 5)
    rs, rd = rmat_edges(6, 3)
    np.testing.assert_array_equal(s, rs)
    np.testing.assert_array_equal(d, rd)
    sh0, sh1 = read_share("cora", 0, 2), read_share("cora", 1, 2)
    assert sh1.src.size == 0 and sh0.x is not None and sh0.num_nodes == 2708
