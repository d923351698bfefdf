"""Typed parts on emulated hosts, real gloo ranks: 3 ranks forced onto 2 hosts (ranks 0 and 1
share host A, rank 2 is host B). With a budget of 0 the host groups sample the host's nodes
in place and only host B's nodes cross; with a budget that holds the other host's topology
every hop is sampled in place and rows cross hosts (through the row cache); with a budget that
holds everything no hop and no row crosses. Every batch (ids, edges, x and y of every type,
merged requests, with and without node time bounds) equals the single-process HeteroSampler's."""

from __future__ import annotations

import dataclasses

import numpy as np

from mnmg_sampler.graph.api import partition_graph
from mnmg_sampler.graph.typed import typed_graph
from mnmg_sampler.ops.rng import request_key
from mnmg_sampler.sampling.sampler import HeteroSampler, HeteroSampleRequest

from ..typed_graphs import typed_spec
from .harness import run_ranks

SEED, W, N_REQ = 9, 3, 9
HOSTS = ("A", "A", "B")
NUM = {("author", "writes", "paper"): [3, 2], ("paper", "rev_writes", "author"): [2, 2],
       ("paper", "cites", "paper"): [4, -1], ("paper", "has", "field"): [1, 0],
       ("field", "of", "paper"): [2, 2]}


def _spec():
    spec = typed_spec(3)
    g = np.random.default_rng(4)
    spec["node_time"] = {t: g.integers(0, 12, n) for t, n in spec["num_nodes"].items()}
    return spec


def _requests() -> list[HeteroSampleRequest]:
    out = []
    for i in range(N_REQ):
        t, lo = ("paper", 3 * i) if i % 3 else ("author", 2 * i)
        timed = {"time_attr": "time", "input_time": np.full(4, 6 + i % 4)} if i % 4 == 1 else {}
        out.append(HeteroSampleRequest(t, np.arange(lo, lo + 4), NUM if i % 2 else [2, 2],
                                       request_key(SEED, 0, i), replace=(i == 4), **timed))
    return out


def _plain(b) -> dict:
    return {k: {e: v.numpy() for e, v in getattr(b, k).items()}
            for k in ("n_id", "edge_index", "e_id", "x", "y")}


def _serve(rank, world, d, budgets):
    import os

    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.graph.partition_io import load_partition

    os.environ["MNMG_HOST_ID"] = f"typed-{HOSTS[rank]}"
    reqs, out = _requests(), {}
    mine = list(range(rank, N_REQ, world))
    for name, budget in budgets.items():
        svc = SamplingService(load_partition(d, rank, world), seed=SEED,
                              host_memory=budget[rank])  # the shared topology: auto
        b0 = {k: v[1] for k, v in svc.sampler.ex.bytes.items()}
        futs = [svc.submit(reqs[i]) for i in mine]
        got = [_plain(svc.result(f)) for f in futs]
        st = svc.stats()
        svc.shutdown()
        sent = {k: v[1] - b0.get(k, 0) for k, v in svc.sampler.ex.bytes.items()}
        out[name] = (got, st["shared_topology"], st["placement"], st["features"], sent)
    return mine, out


def test_typed_parts_on_emulated_hosts_equal_one_process(tmp_path):
    from mnmg_sampler.distributed.fit import part_bytes
    from mnmg_sampler.graph.partition_io import load_partition

    spec = _spec()
    g = typed_graph(spec)
    d = str(partition_graph(spec, num_parts=W, out=tmp_path / "p", method="random", seed=2))
    sizes = [part_bytes(load_partition(d, r, W)) for r in range(W)]
    topo_a, topo_b = sizes[2][0], sizes[0][0] + sizes[1][0]  # the other host's topology
    width = 4 * 4 + 8  # the widest row: a paper's x (4 float32) and its int64 label
    budgets = {"groups": [0, 0, 0],
               # each host maps the other's topology; host B's budget leaves 5 rows' worth
               "hops": [topo_a, topo_a, topo_b + 5 * width],
               "all": [1 << 40] * W}
    res = run_ranks(_serve, W, d, budgets, timeout=300)
    reqs = _requests()
    ref, timed = HeteroSampler(g, SEED), HeteroSampler(g, SEED, time_attr="time")
    seen = []
    for rank, (mine, out) in enumerate(res):
        seen += mine
        for name in budgets:
            got, shared, placement, feats, sent = out[name]
            for i, b in zip(mine, got, strict=True):
                r = reqs[i]
                want = _plain(timed.sample([dataclasses.replace(r, time_attr=None)])[0]
                              if r.time_attr else ref.sample([r])[0])
                for key in want:
                    assert b[key].keys() == want[key].keys(), (name, key)
                    for k in want[key]:
                        np.testing.assert_array_equal(b[key][k], want[key][k],
                                                      err_msg=str((name, key, k)))
            assert [h["ranks"] for h in placement] == [[0, 1], [2]]
            assert shared["enabled"]
            if name == "groups":  # the host's parts only; host A samples its peer's nodes
                assert [h["topology"] for h in placement] == ["own", "own"]
                assert shared["host_ranks"] == ([0, 1] if rank < 2 else [2])
                assert shared["peer_nodes"] > 0 or rank == 2
                assert sent["ids"] > 0 and sent["features"] > 0
            elif name == "hops":  # every hop here, rows across hosts (5 cached on host B)
                assert [h["topology"] for h in placement] == ["all", "all"]
                assert [h["rows"] for h in placement] == ["none", "cache"]
                assert [h["cache_rows"] for h in placement] == [0, 5]
                assert sent.get("ids", 0) == 0 and sent["features"] > 0
                assert feats["cache_rows"] == (5 if rank == 2 else 0)
            else:  # everything in place: no id and no row crosses
                assert [h["rows"] for h in placement] == ["all", "all"]
                assert sent.get("ids", 0) == 0 and sent.get("features", 0) == 0
    assert sorted(seen) == list(range(N_REQ))
