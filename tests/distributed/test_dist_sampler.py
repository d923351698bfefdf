"""Distributed sampling over real gloo ranks equals the single-process sampler, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from mnmg_sampler.graph.partition import partition
from mnmg_sampler.ops.rng import request_key
from mnmg_sampler.sampling.sampler import SampleRequest

from .common import FANOUTS, SEED, as_arrays, assert_same, batches_of, reference, small_graph
from .harness import RankFailure, run_ranks

BATCH = 16


def _sample_ranks(rank, world, dirs, seeds, batch):
    from mnmg_sampler.distributed.sampler import DistSampler
    from mnmg_sampler.graph.partition_io import load_partition

    out = {}
    for method, d in dirs.items():
        s = DistSampler(load_partition(d, rank, world), seed=SEED)
        mine = [(i, b) for i, b in enumerate(batches_of(seeds, batch)) if i % world == rank]
        res = {}
        # uneven rounds: this rank's batches one per round; ranks with fewer join empty rounds
        rounds = -(-len(batches_of(seeds, batch)) // world)
        for r in range(rounds):
            reqs = [SampleRequest(b, FANOUTS, request_key(SEED, 0, i)) for i, b in mine[r:r + 1]]
            for (i, _), mb in zip(mine[r:r + 1], s.sample(reqs), strict=True):
                res[i] = as_arrays(mb)
        out[method] = (res, s.kernel_calls)
    return out


# W=4 oversubscribes the 2 cores of CI; W=1, 2, 3 cover the same path
@pytest.mark.parametrize("world", [1, 2, 3, pytest.param(4, marks=pytest.mark.slow)])
def test_bit_identical_any_world_size_and_partitioning(tmp_path, world):
    g = small_graph()
    seeds = np.random.default_rng(0).permutation(g.num_nodes)[:150]
    ref = reference(g, seeds, BATCH)
    dirs = {m: str(partition(g, world, m, tmp_path / m, seed=1))
            for m in ("random", "range", "metis")}
    results = run_ranks(_sample_ranks, world, dirs, seeds, BATCH, timeout=180)
    for method in dirs:
        seen = {}
        for res, kcalls in (r[method] for r in results):
            seen.update(res)
            rounds = -(-len(ref) // world)
            assert kcalls == rounds * len(FANOUTS)  # one kernel call per hop per round
        assert sorted(seen) == list(range(len(ref)))
        for i, b in enumerate(ref):
            assert_same(seen[i], b)


def _uneven(rank, world, d):
    from mnmg_sampler.distributed.sampler import DistSampler
    from mnmg_sampler.graph.partition_io import load_partition

    s = DistSampler(load_partition(d, rank, world), seed=SEED)
    out = []
    for rnd in range(4):
        # rank 0 asks for several requests each round; the others ask for none
        reqs = ([SampleRequest(np.arange(rnd * 7 + j, rnd * 7 + j + 3), FANOUTS,
                               request_key(SEED, rnd, j)) for j in range(3)]
                if rank == 0 else [])
        out.append([as_arrays(b) for b in s.sample(reqs)])
    return out


def test_uneven_work_no_hang(tmp_path):
    from mnmg_sampler.sampling.sampler import MultiHopSampler, local_hop_fn

    g = small_graph()
    d = str(partition(g, 3, "random", tmp_path / "p", seed=2))
    res = run_ranks(_uneven, 3, d, timeout=120)
    assert all(len(r) == 4 and all(x == [] for x in r) for r in res[1:])
    ref = MultiHopSampler(local_hop_fn(g, SEED), g.num_nodes)
    for rnd in range(4):
        for j in range(3):
            mb = ref.sample([SampleRequest(np.arange(rnd * 7 + j, rnd * 7 + j + 3), FANOUTS,
                                           request_key(SEED, rnd, j))])[0]
            assert_same(res[0][rnd][j], as_arrays(mb))


def _bad_seed(rank, world, d):
    from mnmg_sampler.distributed.sampler import DistSampler
    from mnmg_sampler.graph.partition_io import load_partition

    s = DistSampler(load_partition(d, rank, world), seed=SEED)
    seeds = np.array([1, 10_000]) if rank == 1 else np.array([2, 3])
    s.sample([SampleRequest(seeds, FANOUTS, 5)])


def test_out_of_range_seed_raises_on_every_rank(tmp_path):
    from mnmg_sampler.errors import SamplingInputError

    d = str(partition(small_graph(), 2, "range", tmp_path / "p"))
    with pytest.raises(RankFailure) as ei:
        run_ranks(_bad_seed, 2, d, timeout=120)
    errs = ei.value.errors
    assert sorted(errs) == [0, 1]
    for exc, tb in errs.values():
        assert isinstance(exc, SamplingInputError), tb
        assert "10000" in str(exc)
    assert "rank 1" in str(errs[0][0])


def _sample_cuda_sim(rank, world, d, seeds, batch):
    import numba.cuda

    from mnmg_sampler.distributed.sampler import DistSampler
    from mnmg_sampler.graph.partition_io import load_partition

    assert numba.cuda.simulator_init  # noqa: B018  the simulator, not a device, is in use
    s = DistSampler(load_partition(d, rank, world), seed=SEED, kernel="cuda")
    out = {}
    mine = [(i, b) for i, b in enumerate(batches_of(seeds, batch)) if i % world == rank]
    reqs = [SampleRequest(b, FANOUTS, request_key(SEED, 0, i)) for i, b in mine]
    for (i, _), mb in zip(mine, s.sample(reqs), strict=True):
        out[i] = as_arrays(mb)
    return out


def test_cuda_kernel_path_in_simulator_equals_cpu(tmp_path, monkeypatch):
    """DistSampler(kernel='cuda') on 2 ranks under NUMBA_ENABLE_CUDASIM: same as the CPU path."""
    g = small_graph(n=80, m=400)
    seeds = np.arange(0, 40)
    ref = reference(g, seeds, 10)
    d = str(partition(g, 2, "random", tmp_path / "p", seed=4))
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")  # spawned ranks import numba afresh
    seen = {}
    for r in run_ranks(_sample_cuda_sim, 2, d, seeds, 10, timeout=240):
        seen.update(r)
    assert sorted(seen) == list(range(len(ref)))
    for i, b in enumerate(ref):
        assert_same(seen[i], b)
