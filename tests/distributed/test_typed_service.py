"""SamplingService on typed parts, real gloo ranks: typed minibatches equal the single-process
HeteroSampler's for W = 1, 2, 3, random and range partitions, merged and alone; every sampled
edge of relation r is an edge of r; one typed kernel call per hop per round."""

from __future__ import annotations

import numpy as np
import pytest

from mnmg_sampler.graph.api import partition_graph
from mnmg_sampler.graph.typed import typed_graph
from mnmg_sampler.hetero_sampler import HeteroSampler, HeteroSampleRequest
from mnmg_sampler.ops.rng import request_key

from ..typed_graphs import typed_spec
from .harness import run_ranks

SEED = 9
NUM = {("author", "writes", "paper"): [3, 2], ("paper", "rev_writes", "author"): [2, 2],
       ("paper", "cites", "paper"): [4, -1], ("paper", "has", "field"): [1, 0],
       ("field", "of", "paper"): [2, 2]}


def _requests(n_batches: int) -> list[HeteroSampleRequest]:
    out = []
    for i in range(n_batches):
        t, lo = ("paper", 3 * i) if i % 3 else ("author", 2 * i)
        num = NUM if i % 2 else [2, 2]
        out.append(HeteroSampleRequest(t, np.arange(lo, lo + 4), num, request_key(SEED, 0, i),
                                       replace=(i == 4)))
    return out


def _plain(b) -> dict:
    d = {"n_id": {k: v.numpy() for k, v in b.n_id.items()},
         "edge_index": {k: v.numpy() for k, v in b.edge_index.items()},
         "e_id": {k: v.numpy() for k, v in b.e_id.items()},
         "num_sampled_nodes": b.num_sampled_nodes, "num_sampled_edges": b.num_sampled_edges,
         "x": {k: v.numpy() for k, v in b.x.items()}, "y": {k: v.numpy() for k, v in b.y.items()},
         "batch_size": b.batch_size, "input_type": b.input_type}
    return d


def _serve(rank, world, d, n_batches):
    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.graph.partition_io import load_partition

    reqs = _requests(n_batches)
    mine = list(range(rank, n_batches, world))
    out = {}
    for name, per_round in (("merged", None), ("alone", 1)):
        svc = SamplingService(load_partition(d, rank, world), seed=SEED,
                              max_requests_per_round=per_round)
        futs = [svc.submit(reqs[i]) for i in mine]
        out[name] = [_plain(svc.result(f)) for f in futs]
        svc.shutdown()
        st = svc.stats()
        out[name + "_stats"] = (st["rounds"], st["kernel_calls"], st["hops"])
    return mine, out


@pytest.mark.parametrize("world, method", [(1, "random"), (2, "range"), (3, "random")])
def test_typed_batches_equal_single_process(tmp_path, world, method):
    spec = typed_spec(3)
    g = typed_graph(spec)
    d = str(partition_graph(spec, num_parts=world, out=tmp_path / "p", method=method, seed=2))
    n_batches = 7
    ref = HeteroSampler(g, SEED).sample(_requests(n_batches))
    res = run_ranks(_serve, world, d, n_batches, timeout=240)
    seen = []
    for mine, out in res:
        for name in ("merged", "alone"):
            assert len(out[name]) == len(mine)
            for i, got in zip(mine, out[name], strict=True):
                want = _plain(ref[i])
                for key in ("n_id", "edge_index", "e_id", "x", "y"):
                    assert got[key].keys() == want[key].keys(), key
                    for k in want[key]:
                        np.testing.assert_array_equal(got[key][k], want[key][k], err_msg=key)
                for key in ("num_sampled_nodes", "num_sampled_edges", "batch_size",
                            "input_type"):
                    assert got[key] == want[key]
            rounds, calls, hops = out[name + "_stats"]
            assert calls == 2 * rounds == hops  # one typed kernel call per hop per round
            if name == "alone":
                assert rounds >= len(mine)
        seen += mine
    assert sorted(seen) == list(range(n_batches))
    # every sampled edge of relation r is an edge of r, with its e_id
    for b in ref:
        for et, ei in b.edge_index.items():
            src = b.n_id[et[0]].numpy()[ei[0].numpy()]
            dst = b.n_id[et[2]].numpy()[ei[1].numpy()]
            cols = spec["edge_index"][et][:, b.e_id[et].numpy()]
            np.testing.assert_array_equal(cols, np.stack([src, dst]))
