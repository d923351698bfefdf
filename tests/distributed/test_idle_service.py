"""An idle service thread backs off: its agreements while no rank has work are bounded by the
sleep schedule (``service.idle_sleep``), not one per 2 ms, and a request still wakes it. Real
gloo ranks; the count is bounded by sleeps that cannot end early, so it is not timing-dependent
(a slow machine only makes fewer rounds)."""

from __future__ import annotations

import numpy as np

from mnmg_sampler.graph.partition import partition
from mnmg_sampler.sampling.sampler import MultiHopSampler, SampleRequest, local_hop_fn

from .common import as_arrays, assert_same, small_graph
from .harness import run_ranks

SEED = 5
WINDOW_S = 3.0


def _idle(rank, world, d):
    import time

    import torch.distributed as dist

    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.graph.partition_io import load_partition

    svc = SamplingService(load_partition(d, rank, world), seed=SEED, features=False)
    req = SampleRequest(np.arange(rank, 20, 2), [3, 2], 11 + rank)
    svc.result(svc.submit(req))  # one round with work: compiled code loaded
    dist.barrier()
    i0, c0 = svc.stats()["idle_rounds"], time.process_time()
    time.sleep(WINDOW_S)
    idle, cpu = svc.stats()["idle_rounds"] - i0, time.process_time() - c0
    late = as_arrays(svc.result(svc.submit(req)))  # work after a pause is still served
    svc.shutdown()
    return idle, cpu, late


def test_idle_rounds_back_off_and_work_after_a_pause_is_served(tmp_path):
    from mnmg_sampler.distributed.service import IDLE_MAX_S, idle_sleep

    g = small_graph()
    d = str(partition(g, 2, "random", tmp_path / "p", seed=2))
    # the most idle rounds a window can hold: every one sleeps its turn of the schedule first
    # (from the start of a streak: the worst case), plus one already under way
    most, slept = 1, 0.0
    while slept + idle_sleep(0.002, most - 1) <= WINDOW_S:
        slept += idle_sleep(0.002, most - 1)
        most += 1
    assert most < WINDOW_S / IDLE_MAX_S + 12 < WINDOW_S / 0.002 / 10  # far below the old poll
    ref = MultiHopSampler(local_hop_fn(g, SEED), g.num_nodes)
    for rank, (idle, _cpu, late) in enumerate(run_ranks(_idle, 2, d, timeout=240)):
        assert 1 <= idle <= most
        req = SampleRequest(np.arange(rank, 20, 2), [3, 2], 11 + rank)
        assert_same(late, as_arrays(ref.sample([req])[0]))
