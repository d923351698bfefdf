"""The placement beside the parts, on real gloo ranks forced onto 2 hosts with a row cache: the
first start decides it and writes it; a second start of the same layout maps the files (no
rows chosen, no row fetched at start); a truncated file, a changed budget or plan (which then
replace the files) and a directory that cannot be written fall back to deciding afresh. Every
start's batches and features equal the single process's, homogeneous and typed parts alike."""

from __future__ import annotations

import numpy as np
import pytest

from mnmg_sampler.graph.partition import partition
from mnmg_sampler.sampling.sampler import MultiHopSampler, SampleRequest, local_hop_fn

from .common import FANOUTS, SEED, as_arrays, assert_same, small_graph, topology_budget
from .harness import run_ranks

STARTS = ("first", "again", "truncated", "budget", "plan", "unwritable")
HOSTS = ("A", "A", "B")  # the typed test's hosts: of 2 ranks (2 cache slices) and of 1


def _start(svc_args, rank, world, d, name, run):
    """One service start of the sequence (``run(svc)`` samples): what it reports, its
    choose_rows calls and the feature bytes it sent before the first request."""
    import shutil
    from pathlib import Path

    import torch.distributed as dist

    from mnmg_sampler.distributed import features
    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.graph.partition_io import load_partition
    from mnmg_sampler.train.report import service_line

    if rank == 0 and name == "truncated":  # the largest rows file, cut short
        rows = max(Path(d).glob("placement/*/host-*/rows.*.npy"), key=lambda p: p.stat().st_size)
        with open(rows, "r+b") as f:
            f.truncate(rows.stat().st_size - 8)
    if rank == 0 and name == "unwritable":  # nothing can be written under placement/
        shutil.move(Path(d, "placement"), Path(d, "placement.old"))
        Path(d, "placement").write_text("")
    dist.barrier()
    real, chosen = features.choose_rows, []
    features.choose_rows = lambda *a: chosen.append(1) or real(*a)
    try:
        svc = SamplingService(load_partition(d, rank, world), seed=SEED, **svc_args)
    finally:
        features.choose_rows = real
    sent = sum(svc.sampler.ex.bytes.get("features", (0, 0)))
    try:
        got = run(svc)
        st = svc.stats()
    finally:
        svc.shutdown()
    return got, st["placement"], st["features"], len(chosen), sent, service_line(st)


def _homogeneous(rank, world, d):
    import os

    from mnmg_sampler.loaders.neighbor import DistNeighborLoader

    os.environ["MNMG_HOST_ID"] = f"host-{rank}"
    topo = topology_budget(d, rank, world, (0, 1))

    def run(svc):
        loader = DistNeighborLoader(svc, np.arange(svc.num_nodes), FANOUTS, 16, shuffle=True,
                                    seed=SEED)
        return [(b.key, as_arrays(b)) for b in loader]

    # "plan": the budget's start again, its rows chosen for rounds of 2 requests, not 4
    return {name: _start({"host_memory": topo + (25 if name in STARTS[:3] else 40) * 36,
                          "feature_cache_plan": (FANOUTS, 16, 2 if name == "plan" else 4)},
                         rank, world, d, name, run)
            for name in STARTS}


def _info(d, capsys) -> list[dict]:
    import json

    from mnmg_sampler.commands.cli import main

    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main(["info", d, "--json"])
    assert e.value.code == 0
    return json.loads(capsys.readouterr().out)["placements"]


def test_placement_written_once_then_mapped(tmp_path, capsys):

    g = small_graph()
    d = str(partition(g, 2, "random", tmp_path / "p", seed=2))
    ref = MultiHopSampler(local_hop_fn(g, SEED), g.num_nodes)
    out = run_ranks(_homogeneous, 2, d, timeout=240)
    first = out[0]["first"][1]
    assert all(h["rows"] == "cache" and h["cache_rows"] > 0 for h in first)
    assert out[0]["budget"][1][0]["cache_rows"] > first[0]["cache_rows"]
    for res in out:
        want_from = {"first": "decided", "again": "file", "truncated": "decided",
                     "budget": "decided", "plan": "decided", "unwritable": "decided"}
        for name, (got, placement, feats, chosen, sent, line) in res.items():
            assert [h["from"] for h in placement] == [want_from[name]] * 2, name
            assert f"placement ({want_from[name]}) host 0" in line  # the job's summary
            assert feats["cache_hits"] > 0, name
            # reusing: no row chosen, none fetched before the first request
            assert (chosen, sent > 0) == ((0, False) if name == "again" else (1, True)), name
            assert [k for k, _ in got] == [k for k, _ in res["first"][0]]
            for (key, b), (_, b0) in zip(got, res["first"][0], strict=True):
                assert_same(b, b0, keys=("n_id", "edge_index", "x", "y"))
                seeds = b["n_id"][:b["batch_size"]]
                assert_same(b, as_arrays(ref.sample([SampleRequest(seeds, FANOUTS, key)])[0]))
                assert np.array_equal(b["x"], g.x[b["n_id"]])
                assert np.array_equal(b["y"], g.y[b["n_id"]])
    assert _info(d, capsys) == []  # placement is a file now: nothing listed, nothing raised
    (tmp_path / "p" / "placement").unlink()
    (tmp_path / "p" / "placement.old").rename(tmp_path / "p" / "placement")
    # one placement per host, the last budget's: it replaced the first one's files
    hosts = _info(d, capsys)
    assert [(h["host"], h["rows"], h["cache_rows"]) for h in hosts] == [
        (k, "cache", h["cache_rows"]) for k, h in enumerate(out[0]["budget"][1])]
    assert [len(list(p.iterdir())) for p in (tmp_path / "p").glob("placement/*/host-*")] == [3] * 2
    assert all(h["bytes"] > 0 for h in hosts)


def _typed(rank, world, d, budgets):
    import os

    from mnmg_sampler.ops.rng import request_key
    from mnmg_sampler.sampling.sampler import HeteroSampleRequest

    os.environ["MNMG_HOST_ID"] = f"typed-{HOSTS[rank]}"

    def run(svc):
        reqs = [HeteroSampleRequest("paper", np.arange(3 * i, 3 * i + 4), [3, 2],
                                    request_key(SEED, 0, 2 * i + rank)) for i in range(4)]
        return [{k: {e: v.numpy() for e, v in getattr(b, k).items()}
                 for k in ("n_id", "edge_index", "x", "y")}
                for b in (svc.result(f) for f in [svc.submit(r) for r in reqs])], reqs

    return {name: _start({"host_memory": budgets[rank]}, rank, world, d, name, run)
            for name in ("first", "again", "truncated")}


def test_typed_placement_mapped_again(tmp_path):
    from mnmg_sampler.distributed.fit import part_bytes
    from mnmg_sampler.graph.api import partition_graph
    from mnmg_sampler.graph.partition_io import load_partition
    from mnmg_sampler.graph.typed import typed_graph
    from mnmg_sampler.sampling.sampler import HeteroSampler

    from ..typed_graphs import typed_spec

    spec = typed_spec(3)
    d = str(partition_graph(spec, num_parts=3, out=tmp_path / "p", method="random", seed=2))
    topo = [part_bytes(load_partition(d, r, 3))[0] for r in range(3)]
    width = 4 * 4 + 8  # the widest row: a paper's x (4 float32) and its int64 label
    budgets = [topo[2] + 6 * width] * 2 + [topo[0] + topo[1] + 6 * width]
    out = run_ranks(_typed, 3, d, budgets, timeout=240)
    ref = HeteroSampler(typed_graph(spec), SEED)
    # one file per slice: host A's 2 ranks, host B's 1
    assert [len(list((tmp_path / "p").glob(f"placement/*/host-{k}/rows.paper.*.npy")))
            for k in (0, 1)] == [2, 1]
    for res in out:
        for name, ((got, reqs), placement, feats, chosen, sent, _) in res.items():
            assert [h["cache_rows"] for h in placement] == [6, 6]
            assert feats["cache_rows"] == 6 and feats["cache_hits"] > 0, name  # every slice
            assert [h["from"] for h in placement] == ["file" if name == "again"
                                                      else "decided"] * 2
            assert (chosen, sent > 0) == ((0, False) if name == "again" else (1, True)), name
            for r, b in zip(reqs, got, strict=True):
                want = ref.sample([r])[0]
                for key in b:
                    for k, v in getattr(want, key).items():
                        np.testing.assert_array_equal(b[key][k], v.numpy(), err_msg=str(key))
