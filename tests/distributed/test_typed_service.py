"""SamplingService and DistNeighborLoader on typed parts, real gloo ranks: typed minibatches
equal the single-process HeteroSampler's for W = 1, 2, 3, random and range partitions, merged
and alone; every sampled edge of relation r is an edge of r; one typed kernel call per hop per
round; the loader yields HeteroMiniBatch with x/y per type and every seed once per epoch
(all-reduced). One spawn per world size keeps the CI time small."""

from __future__ import annotations

import numpy as np
import pytest

from mnmg_sampler.errors import SamplingInputError
from mnmg_sampler.graph.api import partition_graph
from mnmg_sampler.graph.typed import typed_graph
from mnmg_sampler.hetero_sampler import HeteroSampler, HeteroSampleRequest
from mnmg_sampler.loader import global_batches
from mnmg_sampler.ops.rng import request_key

from ..typed_graphs import typed_spec
from .harness import run_ranks

SEED = 9
LOADER_SEED, EPOCH, B = 3, 2, 4
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


def _load(rank, world, d, mask):
    """DistNeighborLoader on the typed part: its batches, length, per-seed counts summed over
    ranks, the size of an epoch of every author, and the typed errors of three bad inputs."""
    import torch
    import torch.distributed as dist

    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.graph.partition_io import load_partition
    from mnmg_sampler.loader import DistNeighborLoader

    svc = SamplingService(load_partition(d, rank, world), seed=SEED)
    errors = []
    for bad in (np.arange(3), ("venue", None), ("paper", np.array([0, 99]))):
        try:
            DistNeighborLoader(svc, bad, [2], batch_size=B)
        except SamplingInputError as e:
            errors.append(str(e).split(".")[0])
    loader = DistNeighborLoader(svc, ("paper", torch.from_numpy(mask)), NUM, batch_size=B,
                                shuffle=True, seed=LOADER_SEED)
    loader.set_epoch(EPOCH)
    out = []
    seen = torch.zeros(mask.size, dtype=torch.int64)
    for b in loader:
        out.append(_plain(b) | {"input_id": b.input_id.numpy()})
        seen[b.n_id["paper"][:b.batch_size]] += 1
        b.to_pyg()  # lays out as PyG's hetero loader (checked in the unit tests)
    dist.all_reduce(seen)
    every = DistNeighborLoader(svc, ("author", None), [2, 1], batch_size=8)
    n_every = sum(b.batch_size for b in every)
    svc.shutdown()
    return out, len(loader), seen.numpy(), n_every, errors


def _serve(rank, world, d, n_batches, mask):
    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.errors import ConfigError, SamplingInputError
    from mnmg_sampler.graph.partition_io import load_partition
    from mnmg_sampler.sampler import SampleRequest

    reqs = _requests(n_batches)
    mine = list(range(rank, n_batches, world))
    out = {}
    part = load_partition(d, rank, world)
    try:
        SamplingService(part, seed=SEED, topology_cache=0.1)
        raise AssertionError("a topology cache on a typed part was accepted")
    except ConfigError:
        pass
    for name, per_round in (("merged", None), ("alone", 1)):
        svc = SamplingService(load_partition(d, rank, world), seed=SEED,
                              max_requests_per_round=per_round)
        bad = svc.submit(SampleRequest(np.arange(3), [2], 0))  # homogeneous: refused alone
        futs = [svc.submit(reqs[i]) for i in mine]
        try:
            bad.result(timeout=60)
            raise AssertionError("a homogeneous request was served by a typed part")
        except SamplingInputError:
            pass
        out[name] = [_plain(svc.result(f)) for f in futs]
        svc.shutdown()
        st = svc.stats()
        out[name + "_stats"] = (st["rounds"], st["kernel_calls"], st["hops"])
    loaded = _load(rank, world, d, mask) if mask is not None else None
    return mine, out, loaded


def _check_loader(res, spec, world):
    g = typed_graph(spec)
    mask = spec["masks"]["paper"]["train"]
    seeds = np.flatnonzero(mask)
    gb = global_batches(seeds.size, B, world, shuffle=True, drop_last=False, seed=LOADER_SEED,
                        epoch=EPOCH)
    ref = HeteroSampler(g, SEED)
    for rank, (out, n, seen, _, errors) in enumerate(res):
        assert len(errors) == 3  # each bad input is a typed error on every rank
        assert n == len(out) == len(range(rank, len(gb), world))
        for gidx, got in zip(range(rank, len(gb), world), out, strict=True):
            want = _plain(ref.sample([HeteroSampleRequest(
                "paper", seeds[gb[gidx]], NUM, request_key(LOADER_SEED, EPOCH, gidx))])[0])
            np.testing.assert_array_equal(got["input_id"], gb[gidx])
            for key in ("n_id", "edge_index", "e_id", "x", "y"):
                assert got[key].keys() == want[key].keys()
                for k in want[key]:
                    np.testing.assert_array_equal(got[key][k], want[key][k])
            assert set(got["x"]) == {"author", "paper"} and set(got["y"]) == {"paper"}
        np.testing.assert_array_equal(seen, mask.astype(np.int64))  # every seed once, all ranks
    assert sum(r[3] for r in res) == g.num_nodes_of("author")  # ("author", None): every one


@pytest.mark.parametrize("world, method, loader", [
    # one rank never uses the wire; the kernel on parts of any partitioning is covered by
    # tests/unit/test_typed_partition.py
    pytest.param(1, "random", False, marks=pytest.mark.slow),
    (2, "range", True), (3, "random", False)])
def test_typed_service_and_loader_equal_single_process(tmp_path, world, method, loader):
    spec = typed_spec(3)
    g = typed_graph(spec)
    d = str(partition_graph(spec, num_parts=world, out=tmp_path / "p", method=method, seed=2))
    n_batches = 7
    ref = HeteroSampler(g, SEED).sample(_requests(n_batches))
    mask = spec["masks"]["paper"]["train"] if loader else None
    res = run_ranks(_serve, world, d, n_batches, mask, timeout=300)
    if loader:
        _check_loader([r[2] for r in res], spec, world)
    seen = []
    for mine, out, _ in res:
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
