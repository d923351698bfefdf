"""Distributed ingest and partitioning write the same files as the single-process partitioner.

Real ranks (W = 1, 2, 3), every distributed method, the options that renumber edges (reverse
edges, self-loops, duplicates), several input forms (one text file read by byte ranges, a
directory of mixed shards, a glob, generated R-MAT, an .npz read by rank 0) and node rows from
.npy files or generated. Files are compared byte for byte.
"""

from __future__ import annotations

import filecmp
import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from mnmg_sampler.errors import PartitionError
from mnmg_sampler.graph.datasets import load_graph
from mnmg_sampler.graph.partition import partition
from mnmg_sampler.graph.partition_io import MANIFEST, load_partition
from mnmg_sampler.graph.permute import node_features, node_labels

from .harness import run_ranks

N = 90


def _edges(seed: int = 0, m: int = 600):
    rng = np.random.default_rng(seed)
    src = rng.integers(0, N, m)
    dst = rng.integers(0, N - 3, m)  # a few nodes without in-edges
    src[::17] = dst[::17]  # self-loops
    src[5::29], dst[5::29] = src[4::29][: src[5::29].size], dst[4::29][: dst[5::29].size]  # dups
    src[0] = N - 1  # the largest id occurs
    return src.astype(np.int64), dst.astype(np.int64)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("inputs")
    src, dst = _edges()
    text = "".join(f"{s} {t}\n" for s, t in zip(src, dst, strict=True))
    (d / "one.txt").write_text("# comment line\n" + text)
    shards = d / "shards"
    shards.mkdir()
    cut = [0, 90, 250, 260, 430, 600]
    (shards / "a.txt").write_text("".join(f"{s}\t{t}\n" for s, t in
                                          zip(src[:90], dst[:90], strict=True)))
    with gzip.open(shards / "b.txt.gz", "wt") as f:
        f.write("".join(f"{s} {t}\n" for s, t in zip(src[90:250], dst[90:250], strict=True)))
    np.save(shards / "c.npy", np.stack([src[250:260], dst[250:260]], axis=1))
    np.save(shards / "d.src.npy", src[260:430])
    np.save(shards / "d.dst.npy", dst[260:430])
    (shards / "e.edges").write_text("".join(f"{s} {t}\n" for s, t in
                                            zip(src[430:], dst[430:], strict=True)))
    assert cut[-1] == src.size
    globbed = d / "glob"
    globbed.mkdir()
    for i in range(4):
        sl = slice(i * 150, (i + 1) * 150)
        np.save(globbed / f"p{i}.npy", np.stack([src[sl], dst[sl]], axis=1))
    (globbed / "ignored.json").write_text("{}")
    rng = np.random.default_rng(1)
    np.save(d / "x.npy", rng.standard_normal((N, 4)).astype(np.float32))
    np.save(d / "y.npy", rng.integers(0, 5, N).astype(np.int64))
    np.savez(d / "g.npz", src=src, dst=dst, x=np.load(d / "x.npy"), y=np.load(d / "y.npy"))
    return {"text": str(d / "one.txt"), "shards": str(shards),
            "glob": str(globbed / "p*.npy"), "rmat": "rmat:7:4", "big": "rmat:14:8",
            "npz": str(d / "g.npz"),
            "x": str(d / "x.npy"), "y": str(d / "y.npy")}


# (input, method, seed, undirected, drop_self_loops, drop_duplicates, node data)
CASES = [
    ("text", "random", 3, False, False, False, "files"),
    ("text", "hash", 5, True, True, True, "files"),
    ("shards", "range", 0, True, False, False, None),
    ("shards", "random", 1, False, True, True, "files"),
    ("glob", "hash", 2, True, False, True, None),
    ("rmat", "random", 4, True, True, True, "synthetic"),
    ("npz", "random", 7, True, False, True, "input"),
    ("big", "range", 0, True, False, False, None),  # files > 512 KiB: sampled-block checksums
]


def _reference(inputs: dict, case, world: int, out: Path) -> Path:
    kind, method, seed, und, loops, dups, data = case
    g = load_graph(inputs[kind], undirected=und, drop_self_loops=loops, drop_duplicates=dups,
                   seed=seed)
    if data == "files":
        g.x = np.load(inputs["x"], mmap_mode="r")
        g.y = np.load(inputs["y"], mmap_mode="r")
    elif data == "synthetic":
        ids = np.arange(g.num_nodes)
        g.x, g.y = node_features(ids, 6, 9, num_classes=3), node_labels(ids, 3, 9)
    return partition(g, world, method, out, seed=seed)


def _distributed(rank, world, inputs, cases, root):
    from mnmg_sampler.distributed.ingest import partition_distributed

    stats = []
    for i, (kind, method, seed, und, loops, dups, data) in enumerate(cases):
        files = data == "files"
        synth = data == "synthetic"
        s = partition_distributed(
            inputs[kind], Path(root) / f"dist-{i}", method, seed, undirected=und,
            drop_self_loops=loops, drop_duplicates=dups,
            features=inputs["x"] if files else None, labels=inputs["y"] if files else None,
            feature_dim=6 if synth else 0, num_classes=3 if synth else 0, data_seed=9,
            chunk=37)  # small rounds: many all-to-all rounds per step
        stats.append(s["edge_cut"])
    return stats


def _same_dirs(a: Path, b: Path) -> None:
    ma, mb = json.loads((a / MANIFEST).read_text()), json.loads((b / MANIFEST).read_text())
    assert ma == mb
    for rel in ma["files"]:
        assert filecmp.cmp(a / rel, b / rel, shallow=False), rel
    assert sorted(p.relative_to(a) for p in a.rglob("*")) == \
        sorted(p.relative_to(b) for p in b.rglob("*"))


# W=2 covers the exchange of W=3 (every rank sends to every other); W=3 runs with SLOW=1
@pytest.mark.parametrize("world", [1, 2, pytest.param(3, marks=pytest.mark.slow)])
def test_distributed_partition_writes_the_single_process_files(inputs, world, tmp_path):
    run_ranks(_distributed, world, inputs, CASES, str(tmp_path), timeout=300)
    for i, case in enumerate(CASES):
        ref = _reference(inputs, case, world, tmp_path / f"ref-{i}")
        _same_dirs(ref, tmp_path / f"dist-{i}")
        p = load_partition(tmp_path / f"dist-{i}", world - 1, world)
        assert p.num_local_nodes > 0
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".mnmg-partial")]


def _bad(rank, world, spec, out, method):
    from mnmg_sampler.distributed.ingest import partition_distributed

    partition_distributed(spec, out, method)


def _bad_each(rank, world, cases):
    """``_bad`` for each case on the same ranks (one spawn for all): the error each raised (an
    error agreed on every rank leaves the group usable for the next case)."""
    out = []
    for case in cases:
        try:
            _bad(rank, world, *case)
        except Exception as e:  # returned, and checked by the test
            out.append(e)
        else:
            out.append(None)
    return out


def test_errors_are_raised_on_every_rank(inputs, tmp_path):
    metis, missing = zip(*run_ranks(_bad_each, 2, [
        (inputs["text"], str(tmp_path / "o"), "metis"),
        # only rank 0 reads the npz: the others agree
        (str(tmp_path / "missing.npz"), str(tmp_path / "o"), "random")], timeout=180),
        strict=True)
    assert all(isinstance(err, PartitionError) and "single process" in str(err)
               for err in metis)
    assert all(isinstance(err, Exception) for err in missing), missing  # raised on every rank
    assert not (tmp_path / "o").exists()


def test_parquet_shards(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    src, dst = _edges(seed=4)
    d = tmp_path / "pq"
    d.mkdir()
    for i in range(3):
        sl = slice(i * 200, (i + 1) * 200)
        pq.write_table(pa.table({"src": src[sl], "dst": dst[sl]}), d / f"e{i}.parquet")
    case = ("pq", "random", 2, True, True, True, None)
    run_ranks(_distributed, 2, {"pq": str(d)}, [case], str(tmp_path), timeout=300)
    ref = _reference({"pq": str(d)}, case, 2, tmp_path / "ref")
    _same_dirs(ref, tmp_path / "dist-0")
    assert read_manifest_nodes(ref) == N


def read_manifest_nodes(d: Path) -> int:
    return json.loads((d / MANIFEST).read_text())["num_nodes"]


def test_cli_on_two_ranks_matches_single_process(tmp_path):
    # ``partition`` on 2 pooled ranks (what torchrun's ranks run; a launch under torchrun is
    # test_offline_sample's and test_train_job's)
    from mnmg_sampler.commands.cli import main

    from .cli_ranks import cli_ranks

    args = ["rmat:8:4", "--method", "hash", "--seed", "3", "--undirected", "--drop-duplicates"]
    runs = cli_ranks(["partition", *args, "--out", str(tmp_path / "d"), "--chunk-rows", "100"])
    for r in runs:
        assert r.returncode == 0, r.stderr[-3000:]
    assert "2 ranks" in runs[0].stdout and "output" in runs[0].stdout
    with pytest.raises(SystemExit) as e:
        main(["partition", *args, "--parts", "2", "--out", str(tmp_path / "s")])
    assert e.value.code == 0
    _same_dirs(tmp_path / "s", tmp_path / "d")
    for r in cli_ranks(["partition", *args, "--parts", "3", "--out", str(tmp_path / "x")]):
        assert r.returncode == 2 and "--parts 3 under torchrun with 2 ranks" in r.stderr, \
            r.stderr[-3000:]
