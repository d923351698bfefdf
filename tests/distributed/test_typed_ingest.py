"""Every-rank ingest of a typed input writes the single-process typed partitioner's files.

An OGB hetero directory whose relations come in every per-relation form (``edge.csv.gz`` with
and without ``num-edge-list``, plain ``edge.csv``, ``edge.npy`` of shape (E, 2) and (2, E)),
with feature and label rows and splits, partitioned on W = 2 and 3 real ranks with every
distributed method and small exchange rounds; the files are compared byte for byte. Bad input
raises a typed error on every rank and leaves nothing behind.
"""

from __future__ import annotations

import filecmp
import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from mnmg_sampler.errors import GraphFormatError
from mnmg_sampler.graph.partition import partition, partition_graph, write_partitions
from mnmg_sampler.graph.typed_io import read_ogb_hetero_dir

from ..typed_graphs import typed_spec
from .harness import run_ranks
from .test_ingest import _same_dirs

FORMS = {("author", "writes", "paper"): "csv.gz+count", ("paper", "rev_writes", "author"): "csv.gz",
         ("paper", "cites", "paper"): "csv", ("paper", "has", "field"): "npyT",
         ("field", "of", "paper"): "npy+count"}  # 3 edges: a (2, 2) slice on W = 2


def _gz(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        f.write(text)


def write_hetero_dir(root: Path, spec: dict, forms: dict | None = None) -> Path:
    """``spec`` (the plain dict form) as an OGB hetero directory, each relation in its form."""
    raw = root / "raw"
    n = spec["num_nodes"]
    _gz(raw / "num-node-dict.csv.gz", ",".join(n) + "\n" + ",".join(str(v) for v in n.values()))
    for et, ei in spec["edge_index"].items():
        d = raw / "relations" / "___".join(et)
        d.mkdir(parents=True)
        form = (forms or FORMS)[et]
        rows = "".join(f"{a},{b}\n" for a, b in ei.T)
        if form.startswith("npy"):
            np.save(d / "edge.npy", ei if form == "npyT" else ei.T.copy())  # (2, E) or (E, 2)
        elif form == "csv":
            (d / "edge.csv").write_text(rows)
        else:
            _gz(d / "edge.csv.gz", rows)
        if form.endswith("+count"):
            _gz(d / "num-edge-list.csv.gz", f"{ei.shape[1]}\n")
    for t, x in spec["x"].items():
        _gz(raw / "node-feat" / t / "node-feat.csv.gz",
            "".join(",".join(repr(float(v)) for v in row) + "\n" for row in x))
    for t, y in spec["y"].items():
        _gz(raw / "node-label" / t / "node-label.csv.gz", "".join(f"{v}\n" for v in y))
    for t, m in spec["masks"].items():
        for split, stem in (("train", "train"), ("val", "valid"), ("test", "test")):
            if split in m:
                _gz(root / "split" / "s" / t / f"{stem}.csv.gz",
                    "".join(f"{v}\n" for v in np.flatnonzero(m[split])))
    return root


@pytest.fixture(scope="module")
def hetero_dir(tmp_path_factory) -> Path:
    spec = typed_spec(3)
    spec["edge_index"][("paper", "cites", "paper")] = spec["edge_index"][
        ("paper", "cites", "paper")][:, :0]  # an empty relation
    return write_hetero_dir(tmp_path_factory.mktemp("typed") / "mag", spec)


CASES = [("random", 3), ("range", 0), ("hash", 5)]


def _partition(rank, world, path, root, cases):
    from mnmg_sampler.distributed.ingest import partition_typed_distributed

    return [partition_typed_distributed(path, Path(root) / f"{m}-{s}", m, s, chunk=7)["edge_cut"]
            for m, s in cases]


@pytest.mark.parametrize("world", [2, 3])
def test_typed_ingest_writes_the_single_process_files(hetero_dir, world, tmp_path):
    cuts = run_ranks(_partition, world, str(hetero_dir), str(tmp_path), CASES, timeout=300)
    assert all(c == cuts[0] for c in cuts)
    g = read_ogb_hetero_dir(hetero_dir)
    for i, (method, seed) in enumerate(CASES):
        plan = partition_graph(g, world, method, seed)
        write_partitions(g, plan, tmp_path / f"ref-{i}")
        _same_dirs(tmp_path / f"ref-{i}", tmp_path / f"{method}-{seed}")
        assert cuts[0][i] == plan.edge_cut


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict[str, str]:
    """``typed_spec`` saved three ways: a HeteroData (split masks as bool, weights on one
    relation), its ``to_dict()``, and the plain dict form (a split as ids)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("torch_geometric")
    from ..typed_graphs import hetero_data

    d = tmp_path_factory.mktemp("pt")
    spec = typed_spec(4)
    h = hetero_data(spec)
    h["paper"].train_mask = torch.from_numpy(spec["masks"]["paper"]["train"])
    cites = ("paper", "cites", "paper")
    h[cites].edge_weight = torch.from_numpy(spec["edge_weight"][cites])
    torch.save(h, d / "h.pt")
    torch.save(h.to_dict(), d / "hd.pt")
    plain = {k: {kk: torch.as_tensor(vv) if not isinstance(vv, int) else vv
                 for kk, vv in v.items()} for k, v in spec.items() if k != "masks"}
    plain["masks"] = {"paper": {"test": torch.from_numpy(np.flatnonzero(
        spec["masks"]["paper"]["test"]))}}
    torch.save(plain, d / "spec.pt")
    return {k: str(d / f"{k}.pt") for k in ("h", "hd", "spec")}


def _partition_each(rank, world, paths, root, method, seed):
    from mnmg_sampler.distributed.ingest import partition_typed_distributed

    for k, path in paths.items():
        partition_typed_distributed(path, Path(root) / k, method, seed, chunk=11)


@pytest.mark.parametrize("world, method", [(2, "random"), (3, "hash")])
def test_saved_hetero_data_read_by_slices(saved, world, method, tmp_path):
    from mnmg_sampler.graph.typed_io import load_typed_graph

    run_ranks(_partition_each, world, saved, str(tmp_path), method, 1, timeout=300)
    for k, path in saved.items():
        partition(load_typed_graph(path), world, method, tmp_path / f"ref-{k}", 1)
        _same_dirs(tmp_path / f"ref-{k}", tmp_path / k)
    assert (tmp_path / "h" / "part0" / "weights.npy").is_file()
    assert (tmp_path / "h" / "part0" / "mask.paper.train.npy").is_file()


def _bad_each(rank, world, paths, root):
    from mnmg_sampler.distributed.ingest import partition_typed_distributed

    out = []
    for i, p in enumerate(paths):
        try:
            partition_typed_distributed(p, Path(root) / f"o{i}", "random")
        except Exception as e:  # returned, and checked by the test
            out.append(e)
        else:
            out.append(None)
    return out


def test_bad_typed_input_raises_on_every_rank(hetero_dir, tmp_path):
    def broken(name: str, edit) -> str:
        d = tmp_path / name
        shutil.copytree(hetero_dir, d)
        edit(d / "raw" / "relations")
        return str(d)

    writes, rev = "author___writes___paper", "paper___rev_writes___author"
    paths = [
        broken("missing", lambda r: (r / writes / "edge.csv.gz").unlink()),
        # the last rows are out of range: only the last rank reads them
        broken("range", lambda r: _gz(r / rev / "edge.csv.gz", "0,1\n1,2\n4,99\n")),
        broken("columns", lambda r: _gz(r / rev / "edge.csv.gz", "0,1\n1,2\n4,5,6\n")),
        broken("count", lambda r: _gz(r / writes / "num-edge-list.csv.gz", "71\n")),
    ]
    got = run_ranks(_bad_each, 2, paths, str(tmp_path), timeout=180)
    expected = ["has no edge.csv.gz", "destination id 99, outside the 23 nodes",
                "number of columns changed from 2 to 3", "the 71 rows num-edge-list"]
    for rank_errors in got:  # every rank raises, before any exchange
        for e, text in zip(rank_errors, expected, strict=True):
            assert isinstance(e, GraphFormatError) and text in str(e), (e, text)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(("o", ".mnmg-partial"))]


def test_cli_on_two_ranks_matches_single_process(hetero_dir, tmp_path):
    from mnmg_sampler.commands.cli import main

    from .cli_ranks import cli_ranks

    args = [str(hetero_dir), "--method", "hash", "--seed", "3"]
    runs = cli_ranks(["partition", *args, "--out", str(tmp_path / "d"), "--chunk-rows", "5"])
    for r in runs:
        assert r.returncode == 0, r.stderr[-3000:]
    assert "of 3 types" in runs[0].stdout and "2 ranks" in runs[0].stdout
    with pytest.raises(SystemExit) as e:
        main(["partition", *args, "--parts", "2", "--out", str(tmp_path / "s")])
    assert e.value.code == 0
    _same_dirs(tmp_path / "s", tmp_path / "d")  # the manifests' source included
    for r in cli_ranks(["partition", *args, "--undirected", "--out", str(tmp_path / "u")]):
        assert r.returncode == 2 and "--undirected applies to homogeneous graphs" in r.stderr, \
            r.stderr[-3000:]


def test_cli_reads_a_saved_hetero_data_on_every_rank(saved, tmp_path):
    from mnmg_sampler.commands.cli import main

    from .cli_ranks import cli_ranks

    args = [saved["h"], "--method", "random", "--seed", "2"]
    runs = cli_ranks(["partition", *args, "--out", str(tmp_path / "d")])
    for r in runs:
        assert r.returncode == 0, r.stderr[-3000:]
    assert "s on 2 ranks" in runs[0].stdout  # every rank partitioned, not rank 0 alone
    with pytest.raises(SystemExit) as e:
        main(["partition", *args, "--parts", "2", "--out", str(tmp_path / "s")])
    assert e.value.code == 0
    _same_dirs(tmp_path / "s", tmp_path / "d")


def test_a_typed_job_partitions_a_saved_file_on_every_rank(hetero_dir, tmp_path):
    """``train`` on an OGB hetero directory partitions it on every rank (each reads 1/W, the
    files the single-process partitioner writes) and trains on the parts."""
    from .cli_ranks import train_job

    run, records = train_job("configs/hetero.yaml", [
        f"dataset.name={hetero_dir}", "sampler.fanouts=[3,2]",
        "sampler.eval_fanouts=[3,2]", "training.epochs=1", "model.hidden=8",
        "model.embedding_dim=4", "sampler.batch_size=8", "partition.seed=4"], tmp_path)
    # the split comes from the directory's masks (train and test)
    assert "on 2 ranks (random)" in run.stderr, run.stderr[-3000:]  # every rank read 1/W
    assert records[-1]["event"] == "final" and "test_acc" in records[-1]
    partition(read_ogb_hetero_dir(hetero_dir), 2, "random", tmp_path / "ref", seed=4)
    files = json.loads((tmp_path / "ref" / "manifest.json").read_text())["files"]
    for rel in files:  # the job's manifest records the job's source; the parts are the same
        assert filecmp.cmp(tmp_path / "ref" / rel, tmp_path / "parts" / rel, shallow=False), rel
