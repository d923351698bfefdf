"""Weighted sampling through partitions and the service: identical to one process, any W."""

from __future__ import annotations

import numpy as np
import pytest

from mnmg_sampler.errors import GraphFormatError
from mnmg_sampler.graph.partition import partition
from mnmg_sampler.graph.partition_io import load_partition
from mnmg_sampler.loaders.neighbor import global_batches
from mnmg_sampler.ops.rng import request_key
from mnmg_sampler.sampling.sampler import MultiHopSampler, SampleRequest, sample

from .common import as_arrays, assert_same, small_graph
from .harness import run_ranks

SEED, FAN, B = 9, [4, 3], 16


def _weights(g):
    w = np.random.default_rng(2).exponential(1.0, g.num_edges).astype(np.float32)
    w[::5] = 0.0  # zero weights: never drawn
    return w


def _run(rank, world, d, seeds):
    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.loaders.neighbor import DistNeighborLoader

    svc = SamplingService(load_partition(d, rank, world), seed=SEED)
    loader = DistNeighborLoader(svc, seeds, FAN, B, seed=SEED)
    out = [as_arrays(b) for b in loader]
    svc.shutdown()
    return out


@pytest.mark.parametrize("world, method", [(2, "random"), (3, "range")])
def test_weighted_partitions_sample_like_one_process(tmp_path, world, method):
    from mnmg_sampler.ops.weighted import local_weighted_hop_fn

    g = small_graph()
    w = _weights(g)
    d = str(partition(g, world, method, tmp_path / "p", seed=1, weights=w))
    part = load_partition(d, 0, world)
    assert part.weights is not None and part.weights.dtype == np.float32
    assert part.manifest["has_weights"] and "part0/weights.npy" in part.manifest["files"]
    seeds = np.arange(0, 120)
    res = run_ranks(_run, world, d, seeds, timeout=240)
    ref = MultiHopSampler(local_weighted_hop_fn(g, w, SEED), g.num_nodes)
    gb = global_batches(seeds.size, B, world, shuffle=False, drop_last=False, seed=SEED, epoch=0)
    zero = set(g.edge_ids[w == 0].tolist())  # edge ids of the zero-weight entries
    n = 0
    for rank, out in enumerate(res):
        for gi, got in zip(range(rank, len(gb), world), out, strict=True):
            want = ref.sample([SampleRequest(seeds[gb[gi]], FAN, request_key(SEED, 0, gi))])[0]
            assert_same(got, as_arrays(want))
            one = sample(g, seeds[gb[gi]], FAN, seed=SEED, key=request_key(SEED, 0, gi),
                         weights=w)  # the single-process convenience path
            assert_same(got, as_arrays(one))
            assert not zero & set(got["e_id"].tolist())  # zero-weight edges are never drawn
            n += got["e_id"].size
    assert n > 0
    # weights change the draws: the uniform sampler gives other batches
    uni = sample(g, seeds[gb[0]], FAN, seed=SEED, key=request_key(SEED, 0, 0))
    assert not np.array_equal(uni.e_id.numpy(), res[0][0]["e_id"])


@pytest.mark.parametrize("bad", [-1.0, np.nan, np.inf])
def test_bad_weights_fail_at_partition_time(tmp_path, bad):
    from mnmg_sampler.errors import EdgeWeightError

    g = small_graph()
    w = _weights(g)
    w[7] = bad
    with pytest.raises(EdgeWeightError):
        partition(g, 2, "random", tmp_path / "p", weights=w)
    assert not (tmp_path / "p").exists()
    assert issubclass(EdgeWeightError, GraphFormatError)


def test_weights_file_corruption_is_caught(tmp_path):
    from mnmg_sampler.errors import PartitionError

    g = small_graph()
    d = partition(g, 2, "random", tmp_path / "p", weights=_weights(g))
    f = d / "part1" / "weights.npy"
    raw = bytearray(f.read_bytes())
    raw[-3] ^= 0xFF
    f.write_bytes(bytes(raw))
    load_partition(d, 0, 2)
    with pytest.raises(PartitionError, match="checksum"):
        load_partition(d, 1, 2)


def _cuda_sim(rank, world, d, seeds):
    import numba.cuda

    from mnmg_sampler.distributed.sampler import DistSampler

    assert numba.cuda.simulator_init  # noqa: B018  the simulator, not a device, is in use
    out = {}
    for kernel in ("cuda", "cpu"):
        s = DistSampler(load_partition(d, rank, world), seed=SEED, kernel=kernel)
        t0 = dict(s.ex.transfers)
        reqs = [SampleRequest(seeds[i], FAN, request_key(SEED, 0, i), edge_ids=True)
                for i in range(rank, len(seeds), world)]
        out[kernel] = ([as_arrays(b) for b in s.sample(reqs)], s.kernel_calls,
                       s.ex.transfers["h2d"] - t0["h2d"], s.ex.transfers["d2h"] - t0["d2h"])
    return out


def test_weighted_cuda_kernel_path_in_simulator_equals_cpu(tmp_path, monkeypatch):
    """DistSampler(kernel='cuda') on a weighted partition, 2 ranks under NUMBA_ENABLE_CUDASIM:
    the weighted CUDA kernels give the CPU kernel's batches bit for bit, one copy each way per
    hop (never run on a real GPU)."""
    from mnmg_sampler.ops.weighted import local_weighted_hop_fn

    g = small_graph(n=80, m=400)
    w = _weights(g)
    d = str(partition(g, 2, "random", tmp_path / "p", seed=4, weights=w))
    seeds = [np.arange(i, i + 8) for i in range(0, 64, 8)]  # global batch i on rank i % 2
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")  # spawned ranks import numba afresh
    world = 2
    res = run_ranks(_cuda_sim, world, d, seeds, timeout=300)
    ref = MultiHopSampler(local_weighted_hop_fn(g, w, SEED), g.num_nodes)
    uniform_differs = False
    for rank, out in enumerate(res):
        got, kcalls, h2d, d2h = out["cuda"]
        assert kcalls == len(FAN) and h2d == kcalls and d2h == kcalls
        assert out["cpu"][2:] == (0, 0)  # the CPU path copies nothing
        for i, mb, cpu_mb in zip(range(rank, len(seeds), world), got, out["cpu"][0],
                                 strict=True):
            want = as_arrays(ref.sample([SampleRequest(seeds[i], FAN,
                                                       request_key(SEED, 0, i))])[0])
            assert_same(mb, want)
            assert_same(mb, cpu_mb)
            uni = sample(g, seeds[i], FAN, seed=SEED, key=request_key(SEED, 0, i))
            uniform_differs |= not np.array_equal(uni.e_id.numpy(), mb["e_id"])
    assert uniform_differs  # the weights were used, not the uniform kernel
