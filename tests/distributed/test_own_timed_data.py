"""A user's own timed data, saved as PyG users save it (issue 32): a ``HeteroData`` with
``data[edge_type].time`` and a homogeneous ``Data`` with an edge ``time`` (int64 Unix seconds)
are written with ``torch.save``, partitioned with ``partition_graph(path, ...)`` (time kept by
default) and sampled with ``time_attr="time"`` over 2 real gloo ranks: no sampled edge is later
than its seed's time, every seed comes once per epoch, and every batch equals the one-process
sampler's on the graph read from the same file."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mnmg_sampler.graph.api import partition_graph, typed_graph_of
from mnmg_sampler.loaders.neighbor import global_batches
from mnmg_sampler.ops.rng import request_key
from mnmg_sampler.sampling.sampler import HeteroSampler, HeteroSampleRequest
from tests.timed_data import hetero_data, homo_data, ratings

from .harness import run_ranks

pytest.importorskip("torch_geometric")

SEED, LSEED, EPOCH, B, NUM = 3, 5, 1, 16, [4, 3]
# (graph, input node type, the relation whose time bounds the seed's first hop)
CASES = {"hetero": ("movie", ("user", "rates", "movie")),
         "homo": ("node", ("node", "to", "node"))}


def _input_time(r: dict, n: int) -> np.ndarray:
    """A Unix-second time per seed node, inside the ratings' span (so some edges are later)."""
    g = np.random.default_rng(1)
    return g.integers(int(r["time"].min()), int(r["time"].max()), n).astype(np.int64)


def _plain(b) -> dict:
    d = {k: {n: v.numpy() for n, v in getattr(b, k).items()}
         for k in ("n_id", "edge_index", "e_id", "batch")}
    d["seed_time"] = b.seed_time.numpy()
    return d


def _ranks(rank, world, dirs, times):
    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.graph.partition_io import load_partition
    from mnmg_sampler.loaders.neighbor import DistNeighborLoader

    out = {}
    for name, d in dirs.items():
        part = load_partition(d, rank, world)
        svc = SamplingService(part, seed=SEED)
        itype = CASES[name][0]
        loader = DistNeighborLoader(svc, None if itype == "node" else (itype, None), NUM,
                                    batch_size=B, shuffle=True, seed=LSEED, time_attr="time",
                                    input_time=torch.from_numpy(times[name]))
        loader.set_epoch(EPOCH)
        out[name] = [_plain(b) for b in loader]
        svc.shutdown()
    return out


def test_saved_timed_data_partitions_with_time_and_samples_over_ranks(tmp_path):
    r = ratings(users=60, movies=240, n=2500, seed=4)
    files = {"hetero": tmp_path / "ratings.pt", "homo": tmp_path / "ratings_homo.pt"}
    torch.save(hetero_data(r), files["hetero"])
    torch.save(homo_data(r), files["homo"])
    saved = {k: torch.load(p, weights_only=False) for k, p in files.items()}
    edge_time = {"hetero": {et: saved["hetero"][et].time.numpy()
                            for et in saved["hetero"].edge_types},
                 "homo": {CASES["homo"][1]: saved["homo"].time.numpy()}}
    assert all(t.min() > 1.5e9 and t.dtype == np.int64 for v in edge_time.values()
               for t in v.values())
    dirs = {k: str(partition_graph(p, num_parts=2, out=tmp_path / f"p_{k}", method="random"))
            for k, p in files.items()}
    graphs = {k: typed_graph_of(p) for k, p in files.items()}
    times = {k: _input_time(r, graphs[k].num_nodes_of(CASES[k][0])) for k in files}
    res = run_ranks(_ranks, 2, dirs, times, timeout=300)
    for name, (itype, first) in CASES.items():
        g = graphs[name]
        assert g.edge_time is not None and g.time_attr == "time"
        n = g.num_nodes_of(itype)
        gb = global_batches(n, B, 2, shuffle=True, drop_last=False, seed=LSEED, epoch=EPOCH)
        ref = HeteroSampler(g, SEED, time_attr="time")
        seen = np.zeros(n, np.int64)
        later = 0  # edges the time bound excluded: the bound was exercised
        for rank, out in enumerate(res):
            got_all = out[name]
            assert len(got_all) == len(range(rank, len(gb), 2))
            for gidx, got in zip(range(rank, len(gb), 2), got_all, strict=True):
                seeds = gb[gidx]
                want = _plain(ref.sample([HeteroSampleRequest(
                    itype, seeds, NUM, request_key(LSEED, EPOCH, gidx),
                    input_time=times[name][seeds])])[0])
                for key in ("n_id", "edge_index", "e_id", "batch"):
                    assert got[key].keys() == want[key].keys(), (name, key)
                    for k in want[key]:
                        np.testing.assert_array_equal(got[key][k], want[key][k], err_msg=key)
                st = got["seed_time"]
                np.testing.assert_array_equal(st, times[name][seeds])
                seen[got["n_id"][itype][:seeds.size]] += 1
                n_edges = 0
                for et, ei in got["edge_index"].items():
                    tree = got["batch"][et[2]][ei[1]]
                    # no sampled edge is later than its seed: the user's own times, by edge id
                    assert np.all(edge_time[name][et][got["e_id"][et]] <= st[tree]), et
                    n_edges += ei.shape[1]
                assert n_edges > 0
                dst = (np.asarray(saved[name][first].edge_index[1]) if name == "hetero"
                       else np.asarray(saved[name].edge_index[1]))
                for s, v in enumerate(seeds):
                    later += int((edge_time[name][first][dst == v] > st[s]).sum())
        np.testing.assert_array_equal(seen, np.ones(n, np.int64))  # every seed once
        assert later > 0, name


def test_cli_partition_keeps_the_time_of_a_saved_file(tmp_path):
    """``mnmg-sampler partition FILE.pt`` keeps a ``time`` as ``partition_graph`` does (it once
    read the HeteroData without it); under torchrun, where the every-rank readers read no time,
    rank 0 partitions the timed file while the others wait: the same files either way."""
    from mnmg_sampler.commands.cli import main
    from mnmg_sampler.graph.partition_io import load_partition

    from .cli_ranks import cli_ranks
    from .test_ingest import _same_dirs

    r = ratings(users=40, movies=120, n=900, seed=6)
    for name, data in (("hetero", hetero_data(r)), ("homo", homo_data(r))):
        f = tmp_path / f"{name}.pt"
        torch.save(data, f)
        args = [str(f), "--method", "random", "--seed", "1"]
        with pytest.raises(SystemExit) as e:
            main(["partition", *args, "--parts", "2", "--out", str(tmp_path / f"s_{name}")])
        assert e.value.code == 0
        for run in cli_ranks(["partition", *args, "--out", str(tmp_path / f"d_{name}")]):
            assert run.returncode == 0, run.stderr[-3000:]
        _same_dirs(tmp_path / f"s_{name}", tmp_path / f"d_{name}")
        want = typed_graph_of(str(f))  # the file read with its time, in one process
        got = [load_partition(tmp_path / f"s_{name}", k, 2) for k in range(2)]
        assert all(p.typed.edge_time is not None for p in got), name
        assert sum(p.typed.edge_time.size for p in got) == want.edge_time.size
        # the parts hold the user's own times: every edge's time is one of the file's
        assert np.isin(np.concatenate([p.typed.edge_time for p in got]), want.edge_time).all()
