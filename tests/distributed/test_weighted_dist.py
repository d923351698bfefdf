"""Weighted sampling through partitions and the service: identical to one process, any W."""

from __future__ import annotations

import numpy as np
import pytest

from mnmg_sampler.errors import GraphFormatError
from mnmg_sampler.graph.partition import partition
from mnmg_sampler.graph.partition_io import load_partition
from mnmg_sampler.loader import global_batches
from mnmg_sampler.ops.rng import request_key
from mnmg_sampler.sampler import MultiHopSampler, SampleRequest, sample

from .common import as_arrays, assert_same, small_graph
from .harness import run_ranks

SEED, FAN, B = 9, [4, 3], 16


def _weights(g):
    w = np.random.default_rng(2).exponential(1.0, g.num_edges).astype(np.float32)
    w[::5] = 0.0  # zero weights: never drawn
    return w


def _run(rank, world, d, seeds):
    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.loader import DistNeighborLoader

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
