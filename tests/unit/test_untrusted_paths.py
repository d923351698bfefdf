"""Paths from files and flags stay where they belong: a partition manifest cannot make a rank read
outside its directory, and `sample --out` never overwrites files it did not write."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch.distributed as dist

from mnmg_sampler.commands import cli
from mnmg_sampler.errors import PartitionError
from mnmg_sampler.graph.partition import partition
from mnmg_sampler.graph.partition_io import MANIFEST, load_partition, read_manifest
from mnmg_sampler.graph.rmat import rmat_graph


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    base = tmp_path_factory.mktemp("parts")
    return partition(rmat_graph(7, 4, seed=3), 2, "range", base / "p")


@pytest.fixture
def parts(made, tmp_path):
    d = tmp_path / "p"
    shutil.copytree(made, d)
    return d


def _point(d, name: str, rel: str) -> None:
    """Make part 0's ``name`` file ``rel`` in the manifest (and put the real file there)."""
    m = json.loads((d / MANIFEST).read_text())
    old = m["parts"][0]["files"][name]
    target = d / rel if not rel.startswith("/") else Path(rel)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(d / old, target)
    m["files"][rel] = m["files"].pop(old)
    m["parts"][0]["files"][name] = rel
    (d / MANIFEST).write_text(json.dumps(m))


@pytest.mark.parametrize("rel", ["../outside/y.npy", "part0/../../outside/y.npy",
                                 "part0\\..\\..\\y.npy", "./part0/y.npy", "part0//y.npy", ""])
def test_manifest_names_outside_the_directory_are_refused(parts, rel):
    if rel:
        _point(parts, "indices", rel)
    else:  # an empty name: edit the manifest only
        m = json.loads((parts / MANIFEST).read_text())
        m["files"][""] = m["files"]["part0/indices.npy"]
        (parts / MANIFEST).write_text(json.dumps(m))
    with pytest.raises(PartitionError, match="is not a relative path inside the directory"):
        read_manifest(parts)
    with pytest.raises(PartitionError):
        load_partition(parts, 0, 2)


def test_absolute_manifest_name_is_refused(parts, tmp_path):
    _point(parts, "indices", str(tmp_path / "elsewhere" / "y.npy"))
    with pytest.raises(PartitionError, match="is not a relative path inside the directory"):
        load_partition(parts, 0, 2)


def test_symlink_leading_out_is_refused(parts, tmp_path):
    outside = tmp_path / "outside"
    shutil.move(parts / "part0", outside)
    (parts / "part0").symlink_to(outside, target_is_directory=True)
    with pytest.raises(PartitionError, match="resolves outside") as exc:
        load_partition(parts, 0, 2, verify="full")
    assert "part0/" in str(exc.value) and "Fix: " in str(exc.value)
    load_partition(parts, 1, 2)  # the other part's files are inside: it still loads


def test_symlink_inside_the_directory_still_loads(parts):
    (parts / "part0" / "indices.npy").rename(parts / "part0" / "real.npy")
    (parts / "part0" / "indices.npy").symlink_to("real.npy")
    part = load_partition(parts, 0, 2, verify="full")
    assert part.indices.shape[0] == part.num_local_edges


def test_sample_on_a_tampered_directory_is_one_line(made, tmp_path, capsys):
    one = partition(rmat_graph(6, 4, seed=3), 1, "range", tmp_path / "one")
    _point(one, "indices", "../outside/y.npy")
    code, err = _sample(capsys, "--partitions", str(one))
    assert code == 2 and err.count("\n") == 1 and "'../outside/y.npy'" in err, err
    assert not dist.is_initialized()


# --------------------------------------------------------------------------- sample --out


@pytest.fixture
def tiny(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "tiny.npz"
    np.savez(path, src=rng.integers(0, 60, 300), dst=rng.integers(0, 60, 300))
    return path


def _sample(capsys, *argv: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exc:
        cli.main(["sample", *argv, "--fanouts", "3,2", "--threads", "1"])
    return exc.value.code or 0, capsys.readouterr().err


def test_sample_out_refuses_a_non_empty_dir_and_overwrites_its_own(tiny, tmp_path, capsys):
    out = tmp_path / "out"
    assert _sample(capsys, str(tiny), "--batch-size", "8", "--out", str(out)) == (0, "")
    first = sorted(p.name for p in out.iterdir())
    assert len(first) > 2
    before = (out / first[0]).read_bytes()
    code, err = _sample(capsys, str(tiny), "--batch-size", "16", "--out", str(out))
    assert code == 2 and err.count("\n") == 1, err
    assert f"--out {out} is not empty" in err and "Fix: " in err and "--overwrite" in err
    assert sorted(p.name for p in out.iterdir()) == first  # untouched
    assert (out / first[0]).read_bytes() == before
    # --overwrite: the earlier run's batches are replaced, none of its extra ones is left
    code, err = _sample(capsys, str(tiny), "--batch-size", "16", "--out", str(out),
                        "--overwrite", "--num-batches", "2")
    assert (code, err) == (0, "")
    assert sorted(p.name for p in out.iterdir()) == ["batch_000000.npz", "batch_000001.npz"]


@pytest.mark.parametrize("overwrite", [False, True])
def test_sample_out_never_touches_foreign_files(tiny, tmp_path, capsys, overwrite):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    (out / "batch_000000.npz").write_bytes(b"x")
    code, err = _sample(capsys, str(tiny), "--out", str(out),
                        *(["--overwrite"] if overwrite else []))
    assert code == 2 and err.count("\n") == 1, err
    assert ("also holds notes.txt" in err) == overwrite
    assert sorted(p.name for p in out.iterdir()) == ["batch_000000.npz", "notes.txt"]
    assert (out / "batch_000000.npz").read_bytes() == b"x"


def test_sample_out_edge_cases(tiny, tmp_path, capsys):
    f = tmp_path / "a_file"
    f.write_text("x")
    code, err = _sample(capsys, str(tiny), "--out", str(f))
    assert code == 2 and "exists and is not a directory" in err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _sample(capsys, str(tiny), "--out", str(empty), "--num-batches", "1") == (0, "")
    assert [p.name for p in empty.iterdir()] == ["batch_000000.npz"]


def test_sample_partitions_refuses_before_any_collective(made, tmp_path, capsys):
    out = tmp_path / "busy"
    out.mkdir()
    (out / "batch_000000.npz").write_bytes(b"x")
    code, err = _sample(capsys, "--partitions", str(made), "--out", str(out))
    assert code == 2 and "is not empty" in err, err
    assert not dist.is_initialized()  # refused before the process group (every rank alike)
