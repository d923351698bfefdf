"""Partitioner, atomic writer and load_partition: exact round trips and every failure mode."""

from __future__ import annotations

import json
import os
import shutil
import sys

import numpy as np
import pytest

from mnmg_sampler.errors import MissingDependencyError, PartitionError, WorldSizeError
from mnmg_sampler.graph import partition as partition_mod
from mnmg_sampler.graph.csr import CSRGraph
from mnmg_sampler.graph.partition import partition, partition_graph, write_partitions
from mnmg_sampler.graph.partition_io import MANIFEST, TMP_PREFIX, load_partition, read_manifest
from mnmg_sampler.ops import cpu

METHODS = ["range", "random", "metis"]


def random_graph(n: int = 120, m: int = 700, seed: int = 0) -> CSRGraph:
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)  # self loops, duplicates included
    g = CSRGraph.from_edges(src, dst, n, name="rand",
                            x=rng.standard_normal((n, 5)).astype(np.float32),
                            y=rng.integers(0, 4, n))
    g.masks = {"train": rng.random(n) < 0.6, "val": rng.random(n) < 0.2}
    return g


def sbm_graph(blocks: int = 4, size: int = 40, p_in: float = 0.3, p_out: float = 0.01,
              seed: int = 0) -> CSRGraph:
    """Stochastic block model: dense blocks, sparse between them; shuffled node ids."""
    rng = np.random.default_rng(seed)
    n = blocks * size
    block = rng.permutation(np.repeat(np.arange(blocks), size))
    a, b = np.triu_indices(n, 1)
    p = np.where(block[a] == block[b], p_in, p_out)
    keep = rng.random(a.shape[0]) < p
    return CSRGraph.from_edges(a[keep], b[keep], n, undirected=True, name="sbm")


@pytest.fixture
def graph() -> CSRGraph:
    return random_graph()


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("parts", [1, 2, 3, 4])
def test_plan_is_a_contiguous_relabelling(graph, method, parts):
    plan = partition_graph(graph, parts, method, seed=3)
    n = graph.num_nodes
    assert plan.boundaries.dtype == np.int64 and plan.boundaries.shape == (parts + 1,)
    assert plan.boundaries[0] == 0 and plan.boundaries[-1] == n
    assert np.array_equal(np.sort(plan.new_to_orig), np.arange(n))
    assert np.array_equal(plan.orig_to_new[plan.new_to_orig], np.arange(n))
    for r in range(parts):
        owned = plan.new_to_orig[plan.boundaries[r]:plan.boundaries[r + 1]]
        assert np.all(plan.assignment[owned] == r)
        assert np.all(np.diff(owned) > 0)  # original-id order within a part
    assert plan.part_nodes.sum() == n and plan.part_edges.sum() == graph.num_edges
    assert plan.imbalance >= 1.0 and plan.edge_imbalance >= 1.0
    cut = np.count_nonzero(
        plan.assignment[graph.indices] != plan.assignment[np.repeat(np.arange(n),
                                                                    graph.degrees())])
    assert plan.edge_cut == pytest.approx(cut / graph.num_edges)
    if parts == 1:
        assert plan.edge_cut == 0.0


@pytest.mark.parametrize("method", ["range", "random"])
def test_range_and_random_are_balanced(method):
    g = random_graph(n=103)
    for parts in (2, 3, 4, 7):
        sizes = np.diff(partition_graph(g, parts, method, seed=1).boundaries)
        assert sizes.max() - sizes.min() <= 1


def test_range_is_identity_and_random_is_seeded(graph):
    plan = partition_graph(graph, 3, "range")
    assert np.array_equal(plan.new_to_orig, np.arange(graph.num_nodes))
    a = partition_graph(graph, 3, "random", seed=5).assignment
    assert np.array_equal(a, partition_graph(graph, 3, "random", seed=5).assignment)
    assert not np.array_equal(a, partition_graph(graph, 3, "random", seed=6).assignment)


@pytest.mark.parametrize("method", METHODS)
def test_write_load_round_trip_is_exact(graph, method, tmp_path):
    parts = 3
    plan = partition_graph(graph, parts, method, seed=2)
    out = write_partitions(graph, plan, tmp_path / "parts")
    seen = np.zeros(graph.num_nodes, bool)
    for r in range(parts):
        p = load_partition(out, r, world_size=parts)
        assert (p.rank, p.num_parts, p.num_nodes, p.num_edges) == (
            r, parts, graph.num_nodes, graph.num_edges)
        assert np.array_equal(p.boundaries, plan.boundaries)
        for arr in (p.indptr, p.indices, p.edge_ids, p.orig_ids, p.new_to_orig, p.orig_to_new):
            assert arr.dtype == np.int64 and isinstance(arr, np.memmap)
        assert np.array_equal(p.new_to_orig, plan.new_to_orig)
        assert np.array_equal(p.orig_to_new, plan.orig_to_new)
        assert np.array_equal(p.orig_ids, plan.new_to_orig[p.start:p.end])
        for i, o in enumerate(p.orig_ids):
            s, e = p.indptr[i], p.indptr[i + 1]
            gs, ge = graph.indptr[o], graph.indptr[o + 1]
            # same neighbors in the same (canonical) order, same original edge ids
            assert np.array_equal(p.new_to_orig[p.indices[s:e]], graph.indices[gs:ge])
            assert np.array_equal(p.edge_ids[s:e], graph.edge_ids[gs:ge])
        seen[p.orig_ids] = True
        assert np.array_equal(p.x, graph.x[p.orig_ids]) and p.x.dtype == graph.x.dtype
        assert np.array_equal(p.y, graph.y[p.orig_ids])
        assert set(p.masks) == {"train", "val"}
        for k, v in p.masks.items():
            assert v.dtype == bool and np.array_equal(v, graph.masks[k][p.orig_ids])
    assert seen.all()


def test_graph_without_node_data(tmp_path):
    g = CSRGraph.from_edges(np.array([0, 1, 2]), np.array([1, 2, 0]), 4)
    p = load_partition(partition(g, 2, "random", tmp_path / "d"), 1)
    assert p.x is None and p.y is None and p.masks == {}


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("fanout,replace", [(3, False), (2, True), (-1, False)])
def test_sampling_through_partitions_is_bit_identical(method, fanout, replace, tmp_path):
    g = random_graph(n=150, m=1500, seed=7)
    parts, seed, hop, key = 3, 1234, 1, 99
    out = partition(g, parts, method, tmp_path / "p", seed=4)
    all_nodes = np.arange(g.num_nodes)
    ref_counts, ref_nbr, ref_eid = cpu.sample_neighbors(
        g.indptr, g.indices, g.edge_ids, all_nodes, all_nodes,
        np.full(g.num_nodes, key), seed, hop, fanout, replace)
    ref_off = np.concatenate([[0], np.cumsum(ref_counts)])
    for r in range(parts):
        p = load_partition(out, r)
        rows = np.arange(p.num_local_nodes)
        counts, nbr, eid = cpu.sample_neighbors(
            p.indptr, p.indices, p.edge_ids, rows, p.orig_ids,
            np.full(rows.shape[0], key), seed, hop, fanout, replace)
        off = np.concatenate([[0], np.cumsum(counts)])
        for i, o in enumerate(p.orig_ids):
            assert counts[i] == ref_counts[o]
            got = p.new_to_orig[nbr[off[i]:off[i + 1]]]
            assert np.array_equal(got, ref_nbr[ref_off[o]:ref_off[o + 1]])
            assert np.array_equal(eid[off[i]:off[i + 1]], ref_eid[ref_off[o]:ref_off[o + 1]])


def test_metis_cuts_fewer_edges_than_random_on_sbm():
    g = sbm_graph()
    metis = partition_graph(g, 4, "metis", seed=0)
    rand = partition_graph(g, 4, "random", seed=0)
    assert rand.edge_cut > 0.6  # 3/4 of edges expected across random parts
    assert metis.edge_cut < 0.5 * rand.edge_cut
    assert metis.imbalance < 1.1


def test_missing_pymetis_raises_missing_dependency(graph, monkeypatch):
    monkeypatch.setitem(sys.modules, "pymetis", None)  # import pymetis -> ImportError
    with pytest.raises(MissingDependencyError, match=r"mnmg-sampler\[metis\]"):
        partition_graph(graph, 2, "metis")
    partition_graph(graph, 2, "random")  # the others need nothing extra


@pytest.mark.parametrize("parts,method", [(0, "range"), (-1, "random"), (121, "range"),
                                          (2, "kmeans"), (2.5, "range")])
def test_bad_arguments(graph, parts, method):
    with pytest.raises(PartitionError):
        partition_graph(graph, parts, method)


def _loadable(directory) -> list[str]:
    """Names of directories under ``directory`` that load as partitions."""
    ok = []
    for d in directory.iterdir():
        try:
            load_partition(d, 0)
            ok.append(d.name)
        except PartitionError:
            pass
    return ok


def test_crash_mid_write_leaves_nothing(graph, tmp_path, monkeypatch):
    real = partition_mod.part_arrays

    def crash(g, plan, rank, **kw):
        if rank == 1:
            raise KeyboardInterrupt  # e.g. Ctrl-C while part 1 is built
        return real(g, plan, rank, **kw)

    monkeypatch.setattr(partition_mod, "part_arrays", crash)
    with pytest.raises(KeyboardInterrupt):
        partition(graph, 3, "random", tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_killed_writer_leftover_does_not_load(graph, tmp_path, monkeypatch):
    # A writer killed between the manifest and the rename cannot clean up: its hidden temporary
    # directory is complete but must still refuse to load.
    real_replace = os.replace

    def killed(src, dst):
        if os.path.basename(src).startswith(TMP_PREFIX):
            raise SystemExit("killed")  # the final rename of the directory
        return real_replace(src, dst)

    monkeypatch.setattr(partition_mod.os, "replace", killed)
    monkeypatch.setattr(partition_mod.shutil, "rmtree", lambda *a, **k: None)
    with pytest.raises(SystemExit):
        partition(graph, 2, "range", tmp_path / "out")
    monkeypatch.undo()
    left = list(tmp_path.iterdir())
    assert len(left) == 1 and left[0].name.startswith(TMP_PREFIX)
    assert (left[0] / MANIFEST).is_file()
    assert not (tmp_path / "out").exists()
    with pytest.raises(PartitionError, match="unfinished"):
        load_partition(left[0], 0)
    assert _loadable(tmp_path) == []


def test_existing_output_needs_overwrite(graph, tmp_path):
    out = partition(graph, 2, "range", tmp_path / "out")
    before = read_manifest(out)["num_parts"]
    with pytest.raises(PartitionError, match="already exists"):
        partition(graph, 3, "range", out)
    assert read_manifest(out)["num_parts"] == before
    partition(graph, 3, "random", out, overwrite=True)
    assert read_manifest(out)["num_parts"] == 3
    assert load_partition(out, 2).num_parts == 3
    assert sorted(d.name for d in tmp_path.iterdir()) == ["out"]  # no leftovers


def test_failed_overwrite_keeps_previous_output(graph, tmp_path, monkeypatch):
    out = partition(graph, 2, "range", tmp_path / "out")
    monkeypatch.setattr(partition_mod, "part_arrays",
                        lambda *a, **k: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError, match="disk full"):
        partition(graph, 3, "range", out, overwrite=True)
    assert load_partition(out, 1).num_parts == 2
    assert sorted(d.name for d in tmp_path.iterdir()) == ["out"]


@pytest.fixture
def written(graph, tmp_path):
    return partition(graph, 2, "random", tmp_path / "parts", seed=1)


def test_corrupt_file_is_named(written):
    path = written / "part0" / "indices.npy"
    raw = bytearray(path.read_bytes())
    raw[-3] ^= 0xFF  # same size, different bytes
    path.write_bytes(bytes(raw))
    with pytest.raises(PartitionError, match=r"part0[/\\]indices\.npy has checksum") as e:
        load_partition(written, 0)
    assert "partition" in str(e.value) and "Fix:" in str(e.value)
    load_partition(written, 1)  # the other rank does not read it
    load_partition(written, 0, verify=False)  # size still matches: trusted without checksum


def test_truncated_file_is_named(written):
    path = written / "part1" / "edge_ids.npy"
    path.write_bytes(path.read_bytes()[:-8])
    with pytest.raises(PartitionError, match=r"part1[/\\]edge_ids\.npy has \d+ bytes"):
        load_partition(written, 1, verify=False)


def test_missing_file_is_named(written):
    os.remove(written / "part0" / "orig_ids.npy")
    with pytest.raises(PartitionError, match=r"orig_ids\.npy is missing"):
        load_partition(written, 0)


def test_global_id_maps_are_opened_only_when_asked(written):
    os.remove(written / "new_to_orig.npy")
    part = load_partition(written, 0)  # sampling never reads the global maps
    assert part.orig_to_new.shape == (part.num_nodes,)  # a tool's first access maps it
    with pytest.raises(PartitionError, match=r"new_to_orig\.npy is missing"):
        _ = part.new_to_orig


def test_missing_directory_and_manifest(written, tmp_path):
    with pytest.raises(PartitionError, match="does not exist") as e:
        load_partition(tmp_path / "nope", 0)
    assert "mnmg-sampler partition" in str(e.value)
    os.remove(written / MANIFEST)
    with pytest.raises(PartitionError, match=r"manifest\.json is missing"):
        load_partition(written, 0)


def test_unsupported_format_version(written):
    m = json.loads((written / MANIFEST).read_text())
    m["format_version"] = 99
    (written / MANIFEST).write_text(json.dumps(m))
    with pytest.raises(PartitionError, match="format version 99"):
        load_partition(written, 0)


def test_world_size_mismatch(written):
    with pytest.raises(WorldSizeError) as e:
        load_partition(written, 0, world_size=4)
    msg = str(e.value)
    assert "2 parts" in msg and "4 ranks" in msg and "--parts 4" in msg
    assert "--nproc-per-node" in msg
    assert isinstance(e.value, PartitionError)
    with pytest.raises(PartitionError, match="rank 2 is out of range"):
        load_partition(written, 2)


def test_manifest_records_checksums_and_shapes(written):
    m = read_manifest(written)
    assert m["num_parts"] == 2 and len(m["boundaries"]) == 3
    for rel, entry in m["files"].items():
        f = written / rel
        assert f.stat().st_size == entry["bytes"]
        assert entry["checksum"].startswith("crc32:")
        assert list(np.load(f, mmap_mode="r").shape) == entry["shape"]


def test_cli_partition(tmp_path, capsys):
    from mnmg_sampler.commands.cli import main

    src = tmp_path / "g.txt"
    src.write_text("# toy\n0 1\n1 2\n2 3\n3 0\n0 2\n4 5\n5 6\n")
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        main(["partition", str(src), "--parts", "2", "--method", "random", "--out", str(out)])
    assert e.value.code == 0
    text = capsys.readouterr().out
    assert "edge cut" in text and "imbalance" in text and str(out) in text
    assert load_partition(out, 1, world_size=2).num_nodes == 7
    with pytest.raises(SystemExit) as e:  # exists -> one-line error, exit 2
        main(["partition", str(src), "--parts", "2", "--method", "range", "--out", str(out)])
    assert e.value.code == 2
    assert "already exists" in capsys.readouterr().err
    shutil.rmtree(out)
