"""Hashed 64-bit node ids (issue 23): a graph of 10,000 nodes whose ids are random 63-bit
integers is renumbered, partitioned by one process and by the distributed ingest (the same
files), and sampled on W = 1, 2 ranks under an address-space limit; ``n_id`` and the seeds are
the input's ids, and the batches are bit-identical for any world size and to one process. An
.npz with sparse ids and node data, renumbered on request, gives the same files too."""

from __future__ import annotations

import filecmp
import json
import os

import numpy as np
import pytest

from mnmg_sampler.graph.api import partition_graph
from mnmg_sampler.graph.datasets import load_graph
from mnmg_sampler.sampling.sampler import sample

from .common import as_arrays, assert_same
from .harness import run_ranks
from .test_id_maps import _status

NODES, EDGES, FAN, SEED = 10_000, 40_000, [4, 3], 13
BUDGET = 96 << 20  # what a rank may add to its address space while it samples


@pytest.fixture(scope="module")
def hashed(tmp_path_factory):
    d = tmp_path_factory.mktemp("hashed")
    rng = np.random.default_rng(23)
    ids = np.unique(rng.integers(2**40, 2**63 - 1, NODES + 100, dtype=np.int64))[:NODES]
    rng.shuffle(ids)
    src = ids[rng.integers(0, NODES, EDGES)]
    dst = ids[rng.integers(0, NODES, EDGES)]
    src[:NODES], dst[NODES:2 * NODES] = ids, ids  # every id occurs
    path = d / "hashed.txt"  # split by byte ranges across ranks
    path.write_text("# user item\n" + "".join(f"{a} {b}\n" for a, b in
                                              zip(src.tolist(), dst.tolist(), strict=True)))
    return path, np.sort(ids)


def _same_files(a, b) -> None:
    """The same manifest and the same bytes in every file it lists (loading a part adds a
    verification stamp, which is not compared)."""
    ma, mb = json.loads((a / "manifest.json").read_text()), json.loads((b / "manifest.json")
                                                                       .read_text())
    assert ma == mb
    for rel in ma["files"]:
        assert filecmp.cmp(a / rel, b / rel, shallow=False), rel


def _sparse_npz(d):
    """An .npz with sparse ids and node data (x, y: a row per id up to the largest)."""
    rng = np.random.default_rng(4)
    ids = np.unique(rng.integers(0, 5000, 300))
    src, dst = ids[rng.integers(0, ids.size, 900)], ids[rng.integers(0, ids.size, 900)]
    src[0] = 4999
    x = rng.standard_normal((5000, 3)).astype(np.float32)
    y = rng.integers(0, 4, 5000)
    np.savez(d / "g.npz", src=src, dst=dst, x=x, y=y)
    return d / "g.npz", np.unique(np.concatenate([src, dst])), x, y


def _ingest_and_sample(rank, world, spec, out, seeds, npz=None):
    import resource

    from mnmg_sampler.distributed.ingest import partition_distributed
    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.graph.partition_io import load_partition
    from mnmg_sampler.loaders.neighbor import DistNeighborLoader

    partition_distributed(spec, out, "random", 5, chunk=4096)
    if npz is not None:  # renumber=true on an input rank 0 reads whole, with node data
        partition_distributed(npz[0], npz[1], "hash", 2, renumber=True, chunk=50)

    def run():
        svc = SamplingService(load_partition(out, rank, world), seed=SEED, mode="inline")
        loader = DistNeighborLoader(svc, seeds, FAN, 25, shuffle=True, seed=3)
        loader.set_epoch(1)
        got = {b.key: as_arrays(b) for b in loader}
        svc.shutdown()
        return got

    run()  # warm up: compiled kernels, buffers, threads
    resource.setrlimit(resource.RLIMIT_AS, (_status("VmSize") + BUDGET, resource.RLIM_INFINITY))
    got = run()  # an array sized by the largest id (2**63) or any large multiple cannot fit
    bites = True
    try:
        np.ones(BUDGET // 8 + 1, np.int64)
        bites = False
    except MemoryError:
        pass
    return got, bites


def test_hashed_ids_partition_and_sample_the_same_for_any_world_size(hashed, tmp_path):
    path, ids = hashed
    g = load_graph(path)
    assert g.num_nodes == NODES and np.array_equal(g.node_ids, ids)  # renumbered, kept
    seeds = ids[::40]  # the input's ids: 250 seeds, 10 batches of 25
    npz_path, used, x, y = _sparse_npz(tmp_path)
    per_world = {}
    for world in (1, 2):
        ref = partition_graph(path, num_parts=world, out=tmp_path / f"ref{world}",
                              method="random", seed=5)
        out = tmp_path / f"dist{world}"
        npz = (str(npz_path), str(tmp_path / "npz-dist")) if world == 2 else None
        # fresh ranks: the cap is set over what the rank holds, a reused rank's history
        res = run_ranks(_ingest_and_sample, world, str(path), str(out), seeds, npz, timeout=300,
                        fresh=True)
        _same_files(ref, out)  # the distributed ingest writes the single-process files
        assert np.array_equal(np.load(out / "node_ids.npy"), ids)
        batches = {}
        for got, bites in res:
            assert bites
            batches.update(got)
        per_world[world] = batches
    assert per_world[1].keys() == per_world[2].keys()
    seen = []
    for key, b in per_world[1].items():
        assert_same(b, per_world[2][key])
        assert np.isin(b["n_id"], ids).all()  # n_id holds the input's 63-bit ids
        one = sample(g, b["n_id"][:b["batch_size"]], FAN, seed=SEED, key=key)
        assert_same(b, as_arrays(one))
        seen.append(b["n_id"][:b["batch_size"]])
    assert np.array_equal(np.sort(np.concatenate(seen)), np.sort(seeds))
    assert os.path.exists(tmp_path / "ref2" / "node_ids.npy")
    ref = partition_graph(npz_path, num_parts=2, out=tmp_path / "npz-ref", method="hash", seed=2,
                          renumber=True)
    _same_files(ref, tmp_path / "npz-dist")
    assert np.array_equal(np.load(ref / "node_ids.npy"), used)
    for r in range(2):  # each part's rows are the input rows of its nodes' input ids
        orig = np.load(ref / f"part{r}" / "orig_ids.npy")
        assert np.array_equal(np.load(ref / f"part{r}" / "x.npy"), x[used[orig]])
        assert np.array_equal(np.load(ref / f"part{r}" / "y.npy"), y[used[orig]])


@pytest.mark.slow
def test_cli_under_torchrun_renumbers_as_one_process(hashed, tmp_path):
    from mnmg_sampler.commands.cli import main

    from .torchrun import torchrun

    path, _ = hashed
    args = [str(path), "--method", "hash", "--seed", "1"]
    proc = torchrun(["partition", *args, "--out", str(tmp_path / "d")], 2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "renumbered; n_id shows the input's ids" in proc.stdout
    with pytest.raises(SystemExit) as e:
        main(["partition", *args, "--parts", "2", "--out", str(tmp_path / "s")])
    assert e.value.code == 0
    _same_files(tmp_path / "s", tmp_path / "d")
    proc = torchrun(["partition", *args, "--renumber", "false", "--out", str(tmp_path / "x")],
                    2)
    assert proc.returncode != 0 and "partition: error: " in proc.stderr
    assert "Nothing was allocated" in proc.stderr  # the typed line (torchrun adds its summary)
