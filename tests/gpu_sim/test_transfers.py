"""Host <-> device copies of the CUDA hop path, counted under Numba's CUDA simulator.

Every copy of the data path goes through ``Exchanger.h2d`` / ``Exchanger.d2h``, which count even
when the simulator makes the device the CPU. Two real gloo ranks sample with
``DistSampler(kernel="cuda")``; each hop must cost exactly one copy each way (inputs packed in
one buffer, results in one), and the batches must equal the single process's. A change that adds
a copy per hop fails here.
"""

from __future__ import annotations

import numpy as np

from mnmg_sampler.graph.partition import partition
from mnmg_sampler.ops.rng import request_key
from mnmg_sampler.sampling.sampler import MultiHopSampler, SampleRequest, local_hop_fn
from tests.distributed.common import FANOUTS, SEED, as_arrays, assert_same, small_graph
from tests.distributed.harness import run_ranks

from .sim_run import ON_DEVICE

H2D_PER_HOP, D2H_PER_HOP = 1, 1


def _count(rank, world, d, seeds):
    import numba.cuda

    from mnmg_sampler.distributed.sampler import DistSampler
    from mnmg_sampler.graph.partition_io import load_partition

    # the simulator, not a device, is in use (unless run on the device on purpose)
    assert numba.cuda.simulator_init or ON_DEVICE  # noqa: B018
    s = DistSampler(load_partition(d, rank, world), seed=SEED, kernel="cuda")
    out = []
    for with_e in (True, False):
        t0 = dict(s.ex.transfers)
        k0 = s.kernel_calls
        (mb,) = s.sample([SampleRequest(seeds[rank], FANOUTS, request_key(SEED, 0, rank),
                                        edge_ids=with_e)])
        hops = s.kernel_calls - k0
        out.append((as_arrays(mb), hops, s.ex.transfers["h2d"] - t0["h2d"],
                    s.ex.transfers["d2h"] - t0["d2h"]))
    return out


def test_one_copy_each_way_per_hop_and_same_batches(tmp_path, monkeypatch):
    g = small_graph(n=80, m=400)
    d = str(partition(g, 2, "random", tmp_path / "p", seed=4))
    seeds = [np.arange(0, 10), np.arange(30, 42)]
    if ON_DEVICE:  # launch/gpu_check.sh on a GPU machine: both ranks' kernels on cuda:0
        monkeypatch.delenv("NUMBA_ENABLE_CUDASIM", raising=False)
    else:
        monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")  # spawned ranks import numba afresh
    res = run_ranks(_count, 2, d, seeds, timeout=240)
    ref = MultiHopSampler(local_hop_fn(g, SEED), g.num_nodes)
    for rank, runs in enumerate(res):
        want = as_arrays(ref.sample([SampleRequest(seeds[rank], FANOUTS,
                                                   request_key(SEED, 0, rank))])[0])
        for (got, hops, h2d, d2h), with_e in zip(runs, (True, False), strict=True):
            assert hops == len(FANOUTS)
            assert h2d == H2D_PER_HOP * hops, f"host->device copies per hop: {h2d / hops}"
            assert d2h == D2H_PER_HOP * hops, f"device->host copies per hop: {d2h / hops}"
            keys = ("n_id", "edge_index", "num_sampled_nodes", "num_sampled_edges")
            assert_same(got, want, keys=keys + (("e_id",) if with_e else ()))
            assert with_e or got["e_id"].size == 0
