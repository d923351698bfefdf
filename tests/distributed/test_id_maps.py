"""No num_nodes-sized array on any rank (issue 12): ids are translated through each rank's own ids
and its shard of the original -> new map (:mod:`mnmg_sampler.distributed.id_maps`), and outputs
still equal the single process bit for bit."""

from __future__ import annotations

import os

import numpy as np
import pytest

from mnmg_sampler.graph.csr import CSRGraph
from mnmg_sampler.graph.partition import partition
from mnmg_sampler.ops.rng import request_key
from mnmg_sampler.sampling.sampler import MultiHopSampler, SampleRequest, local_hop_fn

from .common import FANOUTS, SEED, as_arrays, assert_same, small_graph
from .harness import run_ranks

BIG_N = 1 << 22  # an int64 array of BIG_N entries is 32 MiB
LIMIT = 0.75  # of that: what a rank may add to its memory while it samples


def _status(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def _requests(rank: int, n: int, own: np.ndarray, round_: int) -> list[SampleRequest]:
    """Round 0: seeds anywhere (most on other ranks); round 1: only this rank's own nodes."""
    rng = np.random.default_rng([rank, round_, n])
    seeds = rng.choice(n, 48, replace=False) if round_ == 0 else \
        own[rng.choice(own.size, 24, replace=False)]
    return [SampleRequest(seeds, FANOUTS, request_key(SEED, round_, rank))]


def _sample_all(part, n: int, pairs: np.ndarray) -> tuple[list, np.ndarray]:
    from mnmg_sampler.distributed.membership import EdgeMembership
    from mnmg_sampler.distributed.sampler import DistSampler

    s = DistSampler(part, seed=SEED, shared_topology=False)
    m = EdgeMembership(part)
    own = np.asarray(part.orig_ids)
    got = []
    for round_ in (0, 1):
        reqs = _requests(part.rank, n, own, round_)
        got += [(r.seeds, r.key, as_arrays(b)) for r, b in zip(reqs, s.sample(reqs), strict=True)]
    return got, m.known(pairs[0], pairs[1])


def _under_limits(rank, world, small, big, pairs):
    """Warm up on a small partitioning (compiled kernels, buffers), then cap this process's
    address space and data segment so that one int64 array of num_nodes entries, allocated or
    memory-mapped, cannot fit, and sample the big one."""
    import ctypes
    import json
    import resource

    from mnmg_sampler.graph.partition_io import load_partition

    # big blocks always come from mmap and go back on free (no dynamic malloc threshold)
    ctypes.CDLL(None).mallopt(-3, 1 << 17)  # M_MMAP_THRESHOLD
    _sample_all(load_partition(small, rank, world), 240, np.zeros((2, 0), np.int64))
    m = json.loads(open(os.path.join(big, "manifest.json")).read())
    part_bytes = sum(m["files"][rel]["bytes"] for rel in m["parts"][rank]["files"].values())
    budget = int(LIMIT * 8 * BIG_N)
    resource.setrlimit(resource.RLIMIT_DATA, (_status("VmData") + budget, resource.RLIM_INFINITY))
    resource.setrlimit(resource.RLIMIT_AS, (_status("VmSize") + part_bytes + budget,
                                            resource.RLIM_INFINITY))
    got, known = _sample_all(load_partition(big, rank, world), BIG_N, pairs)
    # the limits bite: with the same headroom over what the rank holds now (freed blocks may
    # have lowered it since the limits were set), neither a num_nodes array nor a global id
    # map file fits
    resource.setrlimit(resource.RLIMIT_DATA, (_status("VmData") + budget, resource.RLIM_INFINITY))
    resource.setrlimit(resource.RLIMIT_AS, (_status("VmSize") + budget, resource.RLIM_INFINITY))
    bites = []
    for make in (lambda: np.ones(BIG_N, np.int64),
                 lambda: np.load(os.path.join(big, "orig_to_new.npy"), mmap_mode="r")):
        try:
            make()
            bites.append(False)
        except (MemoryError, OSError, ValueError):
            bites.append(True)
    return got, known, bites


def _sparse_graph() -> CSRGraph:
    rng = np.random.default_rng(5)
    src, dst = rng.integers(0, BIG_N, BIG_N), rng.integers(0, BIG_N, BIG_N)
    return CSRGraph.from_edges(src, dst, BIG_N, name="sparse")


def _has_edge(g: CSRGraph, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    return np.array([bool((g.indices[g.indptr[d]:g.indptr[d + 1]] == s).any())
                     for s, d in zip(src, dst, strict=True)])


def _check(g: CSRGraph, got: list) -> None:
    ref = MultiHopSampler(local_hop_fn(g, SEED), g.num_nodes)
    for seeds, key, mb in got:
        assert_same(mb, as_arrays(ref.sample([SampleRequest(seeds, FANOUTS, key)])[0]))


def test_no_num_nodes_array_on_any_rank(tmp_path):
    g = _sparse_graph()
    big = str(partition(g, 4, "random", tmp_path / "big", seed=1))
    small = str(partition(small_graph(), 4, "random", tmp_path / "small", seed=1))
    rng = np.random.default_rng(9)
    e = rng.choice(g.num_edges, 40, replace=False)
    dst = np.searchsorted(g.indptr, e, side="right") - 1
    pairs = np.stack([np.concatenate([g.indices[e], rng.integers(0, BIG_N, 40)]),
                      np.concatenate([dst, rng.integers(0, BIG_N, 40)])])
    want = _has_edge(g, pairs[0], pairs[1])
    assert want[:40].all() and not want.all()
    # the ranks keep glibc's malloc as set below (no sampler tuning: freed heap would be reused)
    res = run_ranks(_under_limits, 4, small, big, pairs, timeout=900,
                    env={"MNMG_SAMPLER_MALLOC": "default"})
    for got, known, bites in res:
        assert bites == [True, True]
        assert np.array_equal(known, want)
        _check(g, got)


def _without_maps(rank, world, d, n):
    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.graph.partition_io import load_partition
    from mnmg_sampler.loaders.neighbor import DistNeighborLoader

    part = load_partition(d, rank, world)
    got, _ = _sample_all(part, n, np.zeros((2, 0), np.int64))
    svc = SamplingService(part, seed=SEED, features=True, shared_topology=False)
    try:
        own = np.asarray(part.orig_ids)
        batches = []
        for round_ in (0, 1):  # features on: original ids come back with the rows
            reqs = _requests(rank, n, own, round_)
            batches += [(r.seeds, r.key, as_arrays(svc.result(svc.submit(r)))) for r in reqs]
        loader = DistNeighborLoader(svc, np.arange(0, n, 3), FANOUTS, 8, split="owner")
        owner = [as_arrays(b) | {"input_id": b.input_id.numpy(), "key": b.key}
                 for b in loader]
    finally:
        svc.shutdown()
    return got + batches, owner, len(loader)


def test_sampling_never_reads_the_global_id_maps(tmp_path):
    g = small_graph()
    for method in ("random", "metis"):
        d = partition(g, 2, method, tmp_path / method, seed=2)
        for rel in ("new_to_orig.npy", "orig_to_new.npy"):
            os.remove(d / rel)
        res = run_ranks(_without_maps, 2, str(d), g.num_nodes, timeout=300)
        nodes = np.arange(0, g.num_nodes, 3)
        seen = []
        from mnmg_sampler.graph.partition_io import load_partition
        assert res[0][2] == res[1][2]
        for rank, (got, owner, _n) in enumerate(res):
            _check(g, got)
            for _s, _k, mb in got[2:]:
                assert np.array_equal(mb["x"], g.x[mb["n_id"]])
                assert np.array_equal(mb["y"], g.y[mb["n_id"]])
            ref = MultiHopSampler(local_hop_fn(g, SEED), g.num_nodes)
            for mb in owner:
                seeds = nodes[mb["input_id"]]
                want = ref.sample([SampleRequest(seeds, FANOUTS, mb["key"])])[0]
                assert_same(mb, as_arrays(want))
                assert np.array_equal(mb["x"], g.x[mb["n_id"]])
                assert np.isin(seeds, load_partition(d, rank, verify=False).orig_ids).all()
                seen.append(seeds)
            assert len(owner) == res[0][2]
        assert np.array_equal(np.sort(np.concatenate(seen)), nodes)  # each seed once


def _modes(rank, world, d, n, modes, no_maps):
    from mnmg_sampler.distributed.sampler import DistSampler
    from mnmg_sampler.errors import ConfigError
    from mnmg_sampler.graph.partition_io import load_partition

    part = load_partition(no_maps if modes[rank] == "auto-no-maps" else d, rank, world)
    try:
        s = DistSampler(part, seed=SEED, id_maps=modes[rank].removesuffix("-no-maps"),
                        shared_topology=False)
    except ConfigError as e:
        return ("ConfigError", str(e))
    got = []
    for round_ in (0, 1):
        reqs = _requests(rank, n, np.asarray(part.orig_ids), round_)
        got += [(r.seeds, r.key, as_arrays(b)) for r, b in zip(reqs, s.sample(reqs), strict=True)]
    return got, s.ex.calls, s.ids.mode


# auto-no-maps: auto on a copy of the directory without the global map files (a host that
# holds only its parts' folders)
MODES = (["sharded"] * 2, ["replicated"] * 2, ["auto"] * 2, ["auto", "auto-no-maps"],
         ["sharded", "replicated"])


def _each_mode(rank, world, d, n, no_maps):
    """``_modes`` for each of ``MODES`` on the same ranks (one spawn for all; the refused mixed
    modes last)."""
    return [_modes(rank, world, d, n, m, no_maps) for m in MODES]


@pytest.fixture(scope="module")
def mode_runs(tmp_path_factory):
    """``(graph, results by rank for each of MODES)``."""
    import shutil

    g = small_graph()
    d = str(partition(g, 2, "random", tmp_path_factory.mktemp("modes") / "p", seed=3))
    no_maps = shutil.copytree(d, tmp_path_factory.mktemp("modes") / "no_maps")
    for name in ("new_to_orig.npy", "orig_to_new.npy"):
        (no_maps / name).unlink()
    return g, list(zip(*run_ranks(_each_mode, 2, d, g.num_nodes, str(no_maps), timeout=300),
                       strict=True))


def test_auto_replicates_small_graphs_only_when_every_rank_can(mode_runs):
    from mnmg_sampler.distributed.id_maps import AUTO_REPLICATED_MAX_NODES

    g, (sharded, replicated, auto, auto_no_maps, _) = mode_runs
    assert g.num_nodes <= AUTO_REPLICATED_MAX_NODES < BIG_N  # the big graphs above: sharded
    for runs, like in ((auto, replicated), (auto_no_maps, sharded)):
        for (got, calls, mode), (want, want_calls, want_mode) in zip(runs, like, strict=True):
            assert mode == want_mode and calls == want_calls
            for (_, _, a), (_, _, b) in zip(got, want, strict=True):
                assert_same(a, b)


def test_replicated_maps_give_the_same_batches_without_lookups(mode_runs):
    g, (sharded, replicated, *_) = mode_runs
    for (got_s, calls_s, _), (got_r, calls_r, _) in zip(sharded, replicated, strict=True):
        _check(g, got_r)  # equal to the single process, hence to the sharded run
        for (_, _, a), (_, _, b) in zip(got_s, got_r, strict=True):
            assert_same(a, b)
        # building the shard: one exchange (2 collectives); round 0 (remote seeds): the seed
        # lookup (3 collectives) and the n_id lookup, round 1 (own seeds): the n_id lookup, 2
        # collectives each (received into the bound the last hop's headers give); none replicated
        assert calls_s - calls_r == 2 + 3 + 2 * 2


def test_ranks_with_different_id_map_modes_fail_every_rank(mode_runs):
    _, (*_, res) = mode_runs
    for kind, msg in res:
        assert kind == "ConfigError" and "different id map modes" in msg
