"""The host channel (``distributed/host_channel.py``) on real gloo ranks: element-wise maxima
over Unix sockets, a peer whose connection closes (directly, or behind a forked child that
still holds its descriptors) gives a PeerError on every other rank at once, a rank 0 that cannot
listen leaves every rank on gloo, and the shared topology's rounds call no gloo collective."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

from mnmg_sampler.errors import PeerError
from mnmg_sampler.graph.partition import partition
from mnmg_sampler.graph.partition_io import load_partition
from mnmg_sampler.ops.rng import request_key
from mnmg_sampler.sampling.sampler import SampleRequest

from .common import FANOUTS, SEED, small_graph
from .harness import run_ranks


def _channel(rank, world):
    from mnmg_sampler.distributed.collective import Exchanger
    from mnmg_sampler.distributed.host_channel import open_host_channel

    ch = open_host_channel(Exchanger())
    assert ch is not None
    return ch


def _maxima(rank, world, rounds):
    ch = _channel(rank, world)
    rng = np.random.default_rng([rank, 3])
    got, mine = [], []
    for k in range(rounds):
        vals = [int(v) for v in rng.integers(-1000, 1000, size=1 + k % 4)]
        mine.append(vals)
        got.append(ch.agree_max(vals))
    ch.close()
    return mine, got, ch.calls


def test_agree_max_is_the_elementwise_maximum_on_every_rank():
    world, rounds = 3, 40
    out = run_ranks(_maxima, world, rounds, timeout=120)
    for k in range(rounds):
        want = np.max([out[r][0][k] for r in range(world)], axis=0).tolist()
        assert all(out[r][1][k] == want for r in range(world)), k
    assert [o[2] for o in out] == [rounds] * world


def _closing_peer(rank, world, fork_child):
    """Rank 1 closes its channel after one agreement (with a forked child alive, when asked);
    the other ranks' next agreement must fail with a PeerError, not wait for a timeout."""
    ch = _channel(rank, world)
    assert ch.agree_max([rank]) == [world - 1]
    if rank == 1:
        child = os.fork() if fork_child else None
        if child == 0:  # the child holds copies of the descriptors unless they were closed
            time.sleep(90)  # ends by itself if the test fails before it kills it
            os._exit(0)
        ch.close()
        return None, child
    try:
        ch.agree_max([rank])
    except PeerError as e:
        return str(e), None
    return None, None


@pytest.mark.parametrize("fork_child", [False, True])
def test_a_closed_peer_is_a_peer_error_on_every_other_rank(fork_child):
    # the group's timeout is 30 minutes: only the closed connection can end the wait in time
    out = run_ranks(_closing_peer, 3, fork_child, timeout=60)
    try:
        assert out[1][0] is None
        for r in (0, 2):
            assert out[r][0] is not None and "host agreement did not complete" in out[r][0]
    finally:
        if out[1][1]:
            os.kill(out[1][1], signal.SIGKILL)


def _no_listener(rank, world):
    import sys

    from mnmg_sampler.distributed.collective import Exchanger
    from mnmg_sampler.distributed.host_channel import open_host_channel

    real = sys.platform
    if rank == 0:
        sys.platform = "darwin"  # rank 0 offers no socket: every rank stays on gloo
    try:
        ex = Exchanger()
        ch = open_host_channel(ex)
    finally:
        sys.platform = real  # the rank is reused by the next call
    return ch is None, ex.agree_max([rank])


def test_no_listener_leaves_every_rank_on_gloo():
    assert run_ranks(_no_listener, 2, timeout=60) == [(True, [1]), (True, [1])]


def _rounds_without_gloo(rank, world, d):
    import torch.distributed as dist

    from mnmg_sampler.distributed.sampler import DistSampler

    s = DistSampler(load_partition(d, rank, world), seed=SEED, shared_topology=True)
    calls = []
    real = dist.all_reduce

    def counting(*a, **k):
        calls.append(1)
        return real(*a, **k)

    dist.all_reduce = counting
    try:
        n = int(s.part.num_nodes)
        rng = np.random.default_rng([rank, 5])
        edges = 0
        for r in range(4):
            req = SampleRequest(rng.choice(n, 10, replace=False), FANOUTS,
                                request_key(SEED, 0, 10 * r + rank))
            edges += int(s.sample([req])[0].edge_index.shape[1])
    finally:
        dist.all_reduce = real
    return len(calls), s.ex.calls, edges, s.shared_stats()["agreement"]


def test_shared_topology_rounds_call_no_gloo_collective(tmp_path):
    d = str(partition(small_graph(), 2, "random", tmp_path / "p", seed=1))
    for gloo_calls, calls, edges, agreement in run_ranks(_rounds_without_gloo, 2, d,
                                                         timeout=150):
        assert agreement == "host sockets" and gloo_calls == 0 and edges > 0
        assert calls >= 4  # construction's agreements and one per round, all counted
