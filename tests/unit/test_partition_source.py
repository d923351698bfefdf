"""Partition manifests: every key checked, the recorded source, and what --overwrite may replace."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mnmg_sampler.commands.cli import main
from mnmg_sampler.errors import PartitionError
from mnmg_sampler.graph.csr import CSRGraph
from mnmg_sampler.graph.partition import partition
from mnmg_sampler.graph.partition_io import (
    MANIFEST,
    check_replaceable,
    load_partition,
    make_source,
    read_manifest,
    source_differences,
)


def _graph() -> CSRGraph:
    rng = np.random.default_rng(0)
    return CSRGraph.from_edges(rng.integers(0, 50, 300), rng.integers(0, 50, 300), 50, name="g")


@pytest.fixture
def written(tmp_path):
    return partition(_graph(), 2, "random", tmp_path / "parts", seed=1)


def _edit(d, fn) -> None:
    m = json.loads((d / MANIFEST).read_text())
    fn(m)
    (d / MANIFEST).write_text(json.dumps(m))


@pytest.mark.parametrize("damage, key", [
    (lambda m: m["files"]["part0/indices.npy"].pop("checksum"), "checksum"),
    (lambda m: m["files"]["new_to_orig.npy"].pop("bytes"), "bytes"),
    (lambda m: m["parts"][1].pop("files"), "files"),
    (lambda m: m.pop("num_edges"), "num_edges"),
    (lambda m: m.pop("boundaries"), "boundaries"),
    (lambda m: m["files"].pop("part1/orig_ids.npy"), "part1/orig_ids.npy"),
    (lambda m: m["files"].pop("orig_to_new.npy"), "orig_to_new.npy"),
    (lambda m: m["files"]["part0/indptr.npy"].update(shape="7"), "shape"),
])
def test_manifest_with_a_missing_or_bad_key_is_a_partition_error(written, damage, key):
    _edit(written, damage)
    for rank in (0, 1):  # never a KeyError, whichever part is opened
        with pytest.raises(PartitionError, match="inconsistent") as e:
            load_partition(written, rank)
        assert key in str(e.value) and "Fix:" in str(e.value)


def test_old_manifest_without_source_still_loads(written):
    _edit(written, lambda m: m.pop("source", None))
    assert load_partition(written, 1, world_size=2).num_parts == 2
    assert source_differences(read_manifest(written), make_source(
        "x", method="random", seed=1, parts=2)) == [
        "no source recorded (written by an older mnmg-sampler)"]


def test_cli_records_the_input_file_and_settings(tmp_path, capsys):
    src = tmp_path / "g.txt"
    src.write_text("".join(f"{i} {(i * 7 + 1) % 40}\n" for i in range(40)))
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        main(["partition", str(src), "--parts", "2", "--method", "random", "--seed", "4",
              "--out", str(out)])
    assert e.value.code == 0
    s = read_manifest(out)["source"]
    assert s["input"]["kind"] == "file" and s["input"]["path"] == str(src.resolve())
    assert s["input"]["bytes"] == src.stat().st_size and len(s["input"]["sha256_ends"]) == 64
    assert s["partition"] == {"method": "random", "seed": 4, "parts": 2}
    assert s["load"]["undirected"] is False
    want = make_source(src, method="random", seed=4, parts=2, graph_seed=4)
    assert source_differences(read_manifest(out), want) == []
    # same size, other content: the input changed
    src.write_text(src.read_text().replace("0 1\n", "0 2\n", 1))
    diffs = source_differences(read_manifest(out), make_source(src, method="random", seed=4,
                                                               parts=2))
    assert len(diffs) == 1 and diffs[0].startswith("input")
    # a copy of the same file elsewhere is the same input
    copy = tmp_path / "copy.txt"
    copy.write_bytes(src.read_bytes())
    assert source_differences({"source": make_source(src, method="range", seed=0, parts=2)},
                              make_source(copy, method="range", seed=0, parts=2)) == []


def test_source_differences_name_the_setting():
    have = {"source": make_source("cora", method="random", seed=0, parts=2)}
    assert source_differences(have, make_source("cora", method="random", seed=0, parts=2)) == []
    assert make_source("cora", method="random", seed=0, parts=2)["load"]["undirected"] is True
    diffs = source_differences(have, make_source("rmat:6", method="metis", seed=0, parts=4))
    assert diffs[0].startswith("input cora -> rmat:6:16")
    assert "partition.method 'random' -> 'metis'" in diffs and "partition.parts 2 -> 4" in diffs
    assert make_source("rmat:6", method="range", seed=0, parts=1) == make_source(
        "RMAT:6:16", method="range", seed=0, parts=1)


def test_overwrite_refuses_a_foreign_directory(tmp_path, capsys):
    home = tmp_path / "home"
    (home / "docs").mkdir(parents=True)
    (home / "thesis.tex").write_text("years of work")
    with pytest.raises(SystemExit) as e:
        main(["partition", "cora", "--parts", "2", "--method", "range", "--out", str(home),
              "--overwrite"])
    assert e.value.code == 2
    assert "holds no mnmg-sampler partition manifest" in capsys.readouterr().err
    assert (home / "thesis.tex").read_text() == "years of work" and (home / "docs").is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home"]  # no temporary left over
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(PartitionError, match="not a directory"):
        partition(_graph(), 2, "range", f, overwrite=True)
    assert f.read_text() == "x"


def test_overwrite_refuses_ours_with_foreign_files_and_accepts_ours(written):
    (written / "notes.txt").write_text("mine")
    with pytest.raises(PartitionError, match="also holds notes.txt"):
        check_replaceable(written)
    with pytest.raises(PartitionError, match="also holds notes.txt"):
        partition(_graph(), 3, "range", written, overwrite=True)
    assert (written / "notes.txt").read_text() == "mine"
    (written / "notes.txt").unlink()
    (written / "placement" / "k" / "host-0").mkdir(parents=True)  # what jobs write beside
    partition(_graph(), 3, "range", written, overwrite=True)
    assert read_manifest(written)["num_parts"] == 3
    assert not (written / "placement").exists()  # the old layout's placements went with it


def test_overwrite_accepts_an_empty_directory(tmp_path):
    (tmp_path / "empty").mkdir()
    out = partition(_graph(), 2, "range", tmp_path / "empty", overwrite=True)
    assert load_partition(out, 0).num_parts == 2


def test_overwrite_of_a_foreign_json_manifest_is_refused(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    (d / MANIFEST).write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(PartitionError, match="no mnmg-sampler partition manifest"):
        check_replaceable(d)


def test_node_data_files_and_directories_are_part_of_the_source(tmp_path):
    feats = tmp_path / "x.npy"
    np.save(feats, np.zeros((3, 2), np.float32))
    ogb = tmp_path / "ogb"
    (ogb / "raw").mkdir(parents=True)
    (ogb / "raw" / "edge.csv").write_text("0,1\n")
    base = make_source(ogb, method="range", seed=0, parts=2, node_data={"features": feats,
                                                                        "labels": None})
    assert base["input"]["kind"] == "directory" and list(base["node_data"]) == ["features"]
    have = {"source": base}
    assert source_differences(have, make_source(ogb, method="range", seed=0, parts=2,
                                                node_data={"features": feats})) == []
    np.save(feats, np.ones((3, 2), np.float32))  # same size, new content
    (ogb / "raw" / "edge.csv").write_text("0,2\n")
    diffs = source_differences(have, make_source(ogb, method="range", seed=0, parts=2,
                                                 node_data={"features": feats,
                                                            "labels": feats}))
    assert [d.split()[0:3] for d in diffs] == [["input", "directory", str(ogb.resolve())],
                                               ["node", "data", "features"],
                                               ["node", "data", "labels"]]
