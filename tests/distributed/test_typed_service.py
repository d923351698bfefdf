"""SamplingService and DistNeighborLoader on typed parts, real gloo ranks: typed minibatches
equal the single-process HeteroSampler's for W = 1, 2, 3, random, range and METIS partitions,
over the wire and the shared topology, thread and inline service, merged and alone (so they
equal each other); every sampled edge of relation r is an edge of r, per-relation fanouts are
respected and seeds come first (tests/typed_graphs.py); one typed kernel call per hop per
round; the loader yields HeteroMiniBatch with x/y per type and every seed once per epoch
(all-reduced); kernel='cuda' under the CUDA simulator equals the CPU kernel. One spawn per
world size keeps the CI time small."""

from __future__ import annotations

import numpy as np
import pytest

from mnmg_sampler.errors import SamplingInputError
from mnmg_sampler.graph.api import partition_graph
from mnmg_sampler.graph.typed import typed_graph
from mnmg_sampler.loaders.neighbor import global_batches
from mnmg_sampler.ops.rng import request_key
from mnmg_sampler.sampling.sampler import HeteroSampler, HeteroSampleRequest

from ..typed_graphs import check_batch_invariants, typed_spec
from .harness import run_ranks

SEED = 9
LOADER_SEED, EPOCH, B = 3, 2, 4
NUM = {("author", "writes", "paper"): [3, 2], ("paper", "rev_writes", "author"): [2, 2],
       ("paper", "cites", "paper"): [4, -1], ("paper", "has", "field"): [1, 0],
       ("field", "of", "paper"): [2, 2]}


DISJOINT = 5  # this request grows disjoint trees (merged with the others: one call per hop)


def _requests(n_batches: int) -> list[HeteroSampleRequest]:
    out = []
    for i in range(n_batches):
        t, lo = ("paper", 3 * i) if i % 3 else ("author", 2 * i)
        num = NUM if i % 2 else [2, 2]
        out.append(HeteroSampleRequest(t, np.arange(lo, lo + 4), num, request_key(SEED, 0, i),
                                       replace=(i == 4), disjoint=(i == DISJOINT) or None))
    return out


def _reference(g, reqs: list[HeteroSampleRequest]) -> list:
    """HeteroSampler's batch of each request alone (disjoint ones from a disjoint sampler)."""
    import dataclasses

    plain, trees = HeteroSampler(g, SEED), HeteroSampler(g, SEED, disjoint=True)
    return [(trees if r.disjoint else plain).sample([dataclasses.replace(r, disjoint=None)])[0]
            for r in reqs]


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
    from mnmg_sampler.loaders.neighbor import DistNeighborLoader

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


# (name, shared_topology, service mode) x (merged, alone): every one equals HeteroSampler
CONFIGS = [("wire", False, "thread"), ("shared", True, "thread"), ("inline", "auto", "inline")]
RUNS = [(c, name, per_round) for c in CONFIGS for name, per_round in (("merged", None),
                                                                        ("alone", 1))]


def _serve(rank, world, d, n_batches, mask):
    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.errors import ConfigError, SamplingInputError
    from mnmg_sampler.graph.partition_io import load_partition
    from mnmg_sampler.sampling.sampler import SampleRequest

    reqs = _requests(n_batches)
    mine = list(range(rank, n_batches, world))
    out = {}
    part = load_partition(d, rank, world)
    try:
        SamplingService(part, seed=SEED, shared_topology=True, kernel="cuda")
        raise AssertionError("the shared topology with kernel='cuda' was accepted")
    except ConfigError:
        pass
    for (cname, shared, mode), name, per_round in RUNS:
        svc = SamplingService(load_partition(d, rank, world), seed=SEED, mode=mode,
                              max_requests_per_round=per_round, shared_topology=shared)
        bad = svc.submit(SampleRequest(np.arange(3), [2], 0))  # homogeneous: refused alone
        futs = [svc.submit(reqs[i]) for i in mine]
        try:
            svc.result(bad, timeout=60)
            raise AssertionError("a homogeneous request was served by a typed part")
        except SamplingInputError:
            pass
        out[cname, name] = [_plain(svc.result(f)) for f in futs]
        svc.shutdown()
        st = svc.stats()
        out[cname, name, "stats"] = (st["rounds"], st["kernel_calls"], st["hops"],
                                     st["shared_topology"])
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
    # one rank never uses the wire but takes the sampler's all-local branch (a typed request's
    # [S, R] fanouts broke it once); the kernel on parts of any partitioning is covered by
    # tests/unit/test_typed_partition.py
    (1, "random", False),
    (2, "range", True), pytest.param(3, "random", False, marks=pytest.mark.slow),
    (2, "metis", False),
    pytest.param(3, "metis", False, marks=pytest.mark.slow)])
def test_typed_service_and_loader_equal_single_process(tmp_path, world, method, loader):
    if method == "metis":
        pytest.importorskip("pymetis", reason="METIS partitions need pymetis (not installed)")
    spec = typed_spec(3)
    g = typed_graph(spec)
    d = str(partition_graph(spec, num_parts=world, out=tmp_path / "p", method=method, seed=2))
    n_batches = 7
    ref = _reference(g, _requests(n_batches))
    mask = spec["masks"]["paper"]["train"] if loader else None
    res = run_ranks(_serve, world, d, n_batches, mask, timeout=300)
    if loader:
        _check_loader([r[2] for r in res], spec, world)
    seen = []
    reqs = _requests(n_batches)
    for mine, out, _ in res:
        for (cname, shared, _mode), name, _ in RUNS:
            assert len(out[cname, name]) == len(mine)
            for i, got in zip(mine, out[cname, name], strict=True):
                check_batch_invariants(got, spec, reqs[i].seeds, reqs[i].num_neighbors,
                                       reqs[i].replace)
                want = _plain(ref[i])
                for key in ("n_id", "edge_index", "e_id", "x", "y"):
                    assert got[key].keys() == want[key].keys(), key
                    for k in want[key]:
                        np.testing.assert_array_equal(got[key][k], want[key][k], err_msg=key)
                for key in ("num_sampled_nodes", "num_sampled_edges", "batch_size",
                            "input_type"):
                    assert got[key] == want[key]
            rounds, calls, hops, sh = out[cname, name, "stats"]
            assert calls == 2 * rounds == hops  # one typed kernel call per hop per round
            # every rank on this host: the shared topology is on exactly when asked (auto too)
            assert sh["enabled"] == (world > 1 and shared is not False), (cname, sh)
            if sh["enabled"]:
                assert sh["peer_nodes"] > 0 and sh["agreement"] == "host sockets"
            if name == "alone":
                assert rounds >= len(mine)
        seen += mine
    assert sorted(seen) == list(range(n_batches))


def _cuda_sim(rank, world, d, n_batches):
    import numba.cuda

    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.graph.partition_io import load_partition

    assert numba.cuda.simulator_init  # noqa: B018  the simulator, not a device, is in use
    reqs = _requests(n_batches)
    mine = list(range(rank, n_batches, world))
    out = {}
    for kernel in ("cuda", "cpu"):
        svc = SamplingService(load_partition(d, rank, world), seed=SEED, kernel=kernel,
                              shared_topology="auto")  # auto: off with the CUDA kernel
        t0 = dict(svc.sampler.ex.transfers)
        futs = [svc.submit(reqs[i]) for i in mine]
        got = [_plain(svc.result(f)) for f in futs]
        svc.shutdown()
        st = svc.stats()
        out[kernel] = (got, st["kernel_calls"], st["shared_topology"]["enabled"],
                       svc.sampler.ex.transfers["h2d"] - t0["h2d"],
                       svc.sampler.ex.transfers["d2h"] - t0["d2h"])
    return mine, out


def test_typed_cuda_kernel_over_ranks_in_simulator_equals_cpu(tmp_path, monkeypatch):
    """kernel='cuda' on typed parts, 2 ranks under NUMBA_ENABLE_CUDASIM (never run on a real
    GPU): the typed CUDA twin gives the CPU kernel's batches bit for bit, one counted copy each
    way per kernel call, and the shared topology stays off."""
    spec = typed_spec(3)
    d = str(partition_graph(spec, num_parts=2, out=tmp_path / "p", method="random", seed=2))
    n_batches = 4
    ref = _reference(typed_graph(spec), _requests(n_batches))
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")  # spawned ranks import numba afresh
    res = run_ranks(_cuda_sim, 2, d, n_batches, timeout=300)
    seen = []
    for mine, out in res:
        got, calls, shared, h2d, d2h = out["cuda"]
        assert calls > 0 and h2d == d2h == calls and not shared
        assert out["cpu"][3:] == (0, 0)  # the CPU path copies nothing
        for i, b, cpu_b in zip(mine, got, out["cpu"][0], strict=True):
            want = _plain(ref[i])
            for key in ("n_id", "edge_index", "e_id", "x", "y"):
                for k in want[key]:
                    np.testing.assert_array_equal(b[key][k], want[key][k], err_msg=key)
                    np.testing.assert_array_equal(b[key][k], cpu_b[key][k], err_msg=key)
        seen += mine
    assert sorted(seen) == list(range(n_batches))
