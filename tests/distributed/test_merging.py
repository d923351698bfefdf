"""Concurrent requests of several loaders are merged: one kernel call per hop serves them all.

Real gloo ranks. The requests are made to be pending together (inline mode: nothing runs until
a result is awaited; thread mode: the round lock is held while the loaders submit), so the
counts below are exact, not timing-dependent.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from mnmg_sampler.graph.partition import partition
from mnmg_sampler.loaders.neighbor import global_batches
from mnmg_sampler.ops.rng import request_key
from mnmg_sampler.sampling.sampler import MultiHopSampler, SampleRequest, local_hop_fn

from .common import as_arrays, assert_same, small_graph
from .harness import run_ranks

SEED = 7
LOADERS = [(np.arange(0, 48), [3, 2]), (np.arange(60, 108), [4]), (np.arange(120, 168),
                                                                    [2, 2, 2])]


def _inline(rank, world, d):
    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.graph.partition_io import load_partition
    from mnmg_sampler.loaders.neighbor import DistNeighborLoader

    svc = SamplingService(load_partition(d, rank, world), seed=SEED, mode="inline",
                          features=False)
    loaders = [DistNeighborLoader(svc, nodes, fan, 8, seed=k) for k, (nodes, fan) in
               enumerate(LOADERS)]
    # each loader's first batch on this rank (global batch `rank`), submitted together
    futs = [svc.submit(ld.request(*ld._my_batch(0, ld.epoch))) for ld in loaders]
    got = [as_arrays(svc.result(f)) for f in futs]
    svc.shutdown()
    st = svc.stats()
    return got, st


def test_inline_requests_of_three_loaders_share_one_kernel_call_per_hop(tmp_path):
    g = small_graph()
    world = 2
    d = str(partition(g, world, "random", tmp_path / "p", seed=1))
    ref = MultiHopSampler(local_hop_fn(g, SEED), g.num_nodes)
    for rank, (got, st) in enumerate(run_ranks(_inline, world, d, timeout=120)):
        # one round took the three requests of this rank (and the other rank's three);
        # the deepest request has 3 hops: 3 kernel calls in all, not 2 + 1 + 3
        assert st["rounds"] == 1 and st["requests"] == 3 and st["kernel_calls"] == 3
        for k, ((nodes, fan), b) in enumerate(zip(LOADERS, got, strict=True)):
            pos = global_batches(nodes.size, 8, world, shuffle=False, drop_last=False, seed=k,
                                 epoch=0)[rank]
            want = ref.sample([SampleRequest(nodes[pos], fan, request_key(k, 0, rank))])[0]
            assert_same(b, as_arrays(want))  # merging changes nothing in the results


def _threads(rank, world, d):
    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.graph.partition_io import load_partition
    from mnmg_sampler.loaders.neighbor import DistNeighborLoader

    svc = SamplingService(load_partition(d, rank, world), seed=SEED, features=False)
    loaders = [DistNeighborLoader(svc, nodes, [3, 2], 8, seed=k, prefetch=2)
               for k, (nodes, _) in enumerate(LOADERS)]
    out: dict[int, list] = {}

    def run(k):
        out[k] = [as_arrays(b) for b in loaders[k]]

    with svc._lock:  # no round starts until every loader's first request is queued
        ths = [threading.Thread(target=run, args=(k,)) for k in range(len(loaders))]
        for t in ths:
            t.start()
        deadline = time.monotonic() + 60
        while svc._q.qsize() < len(loaders) and time.monotonic() < deadline:
            time.sleep(0.01)
        queued = svc._q.qsize()
    for t in ths:
        t.join()
    svc.shutdown()  # joins the service thread: its last round's counters are final
    st = svc.stats()
    return out, st, queued, [len(ld) for ld in loaders]


@pytest.mark.parametrize("world", [2, 3])
def test_thread_mode_merges_concurrent_loaders(tmp_path, world):
    g = small_graph()
    d = str(partition(g, world, "random", tmp_path / "p", seed=world))
    ref = MultiHopSampler(local_hop_fn(g, SEED), g.num_nodes)
    results = run_ranks(_threads, world, d, timeout=180)
    total = sum(sum(lens) for _, _, _, lens in results)  # requests of every rank
    for rank, (out, st, queued, lens) in enumerate(results):
        assert queued == 3  # the first round found three requests waiting
        assert st["requests"] == sum(lens)
        assert st["kernel_calls"] == 2 * st["rounds"]  # 2 hops: one call each per round
        # rounds are collective: the first one took 3 requests on every rank; the others, at
        # worst (a loaded machine), one request of one rank each
        assert st["rounds"] <= total - 3 * world + 1 < total
        for k, (nodes, _) in enumerate(LOADERS):
            gb = global_batches(nodes.size, 8, world, shuffle=False, drop_last=False, seed=k,
                                epoch=0)
            mine = list(range(rank, len(gb), world))
            assert len(out[k]) == len(mine) == lens[k]
            for gidx, b in zip(mine, out[k], strict=True):
                want = ref.sample([SampleRequest(nodes[gb[gidx]], [3, 2],
                                                 request_key(k, 0, gidx))])[0]
                assert_same(b, as_arrays(want))


def _uneven(rank, world, d, shared):
    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.graph.partition_io import load_partition
    from mnmg_sampler.loaders.neighbor import DistNeighborLoader

    svc = SamplingService(load_partition(d, rank, world), seed=SEED, mode="inline",
                          features=False, shared_topology=shared)
    loaders = [DistNeighborLoader(svc, nodes, fan, 8, seed=k) for k, (nodes, fan) in
               enumerate(LOADERS)]
    # rank 0 queues its three loaders' first requests, rank 1 only the first loader's
    mine = loaders if rank == 0 else loaders[:1]
    futs = [svc.submit(ld.request(*ld._my_batch(0, ld.epoch))) for ld in mine]
    got = [as_arrays(svc.result(f)) for f in futs]
    svc.shutdown()
    return got, svc.stats()


@pytest.mark.parametrize("shared", [True, False])
def test_rounds_without_exchanges_are_balanced(tmp_path, shared):
    """With the shared topology a round exchanges nothing and lasts as long as its slowest
    rank: a rank samples as many requests as the rank with the fewest (at least one) and keeps
    the rest for its next rounds. Over the wire every pending request shares the round."""
    g = small_graph()
    world = 2
    d = str(partition(g, world, "random", tmp_path / "p", seed=1))
    ref = MultiHopSampler(local_hop_fn(g, SEED), g.num_nodes)
    results = run_ranks(_uneven, world, d, shared, timeout=120)
    for rank, (got, st) in enumerate(results):
        assert st["shared_topology"]["enabled"] is shared
        for k, b in enumerate(got):
            nodes, fan = LOADERS[k]
            pos = global_batches(nodes.size, 8, world, shuffle=False, drop_last=False, seed=k,
                                 epoch=0)[rank]
            want = ref.sample([SampleRequest(nodes[pos], fan, request_key(k, 0, rank))])[0]
            assert_same(b, as_arrays(want))  # the round that carried a batch changes nothing
    st0, st1 = results[0][1], results[1][1]
    assert st0["requests"] == 3 and st1["requests"] == 1
    if shared:  # rank 0's three requests in three rounds of one, beside rank 1's one
        assert st0["rounds"] == st1["rounds"] == 3
        assert st0["requests_per_round"] == 1.0
    else:  # the wire path merges: one round took all three
        assert st0["rounds"] == st1["rounds"] == 1


def _burst(rank, world, d):
    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.graph.partition_io import load_partition
    from mnmg_sampler.loaders.neighbor import DistNeighborLoader

    svc = SamplingService(load_partition(d, rank, world), seed=SEED, mode="thread",
                          features=False)
    ld = DistNeighborLoader(svc, np.arange(0, 160), [3, 2], 8, seed=0)
    reqs = [ld.request(*ld._my_batch(j, ld.epoch)) for j in range(6)]
    time.sleep(0.05)  # the service thread is in its idle rounds, polling the queue
    futs = svc.submit_all(reqs)
    got = [as_arrays(svc.result(f)) for f in futs]
    svc.shutdown()
    return got, svc.stats()


def test_a_burst_is_one_round(tmp_path):
    """``submit_all`` (a loader's refill) enters the queue as one: the service thread, polling
    while it is queued, takes all of it in one round or none (a round that took the first
    request of a burst put the ranks' rounds out of step)."""
    g = small_graph()
    d = str(partition(g, 1, "random", tmp_path / "p", seed=1))
    ref = MultiHopSampler(local_hop_fn(g, SEED), g.num_nodes)
    (got, st), = run_ranks(_burst, 1, d, timeout=120)
    assert st["rounds"] == 1 and st["requests"] == 6
    pos = global_batches(160, 8, 1, shuffle=False, drop_last=False, seed=0, epoch=0)
    for j, b in enumerate(got):
        want = ref.sample([SampleRequest(np.arange(0, 160)[pos[j]], [3, 2],
                                         request_key(0, 0, j))])[0]
        assert_same(b, as_arrays(want))


def _bursts_of_sources(rank, world, d):
    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.graph.partition_io import load_partition
    from mnmg_sampler.loaders.neighbor import DistNeighborLoader

    svc = SamplingService(load_partition(d, rank, world), seed=SEED, mode="thread",
                          features=False)
    ld = DistNeighborLoader(svc, np.arange(0, 160), [3, 2], 8, seed=0)
    reqs = [ld.request(*ld._my_batch(j, ld.epoch)) for j in range(8)]
    with svc._lock:  # no round starts until every burst is queued
        futs = [*svc.submit_all(reqs[:3], source="a"), *svc.submit_all(reqs[3:5], source="a"),
                *svc.submit_all(reqs[5:], source="b")]
    got = [as_arrays(svc.result(f)) for f in futs]
    svc.shutdown()
    return got, svc.stats()


def test_a_round_takes_one_burst_of_each_source(tmp_path):
    """A consumer that outruns the rounds queues a second refill before the next round: that
    round still takes one burst of the loader (the ranks' rounds stay the same size), the next
    one the second burst and whatever follows it."""
    g = small_graph()
    d = str(partition(g, 1, "random", tmp_path / "p", seed=1))
    ref = MultiHopSampler(local_hop_fn(g, SEED), g.num_nodes)
    (got, st), = run_ranks(_bursts_of_sources, 1, d, timeout=120)
    assert st["rounds"] == 2 and st["requests"] == 8  # [a1], then [a2, b]
    pos = global_batches(160, 8, 1, shuffle=False, drop_last=False, seed=0, epoch=0)
    for j, b in enumerate(got):
        want = ref.sample([SampleRequest(np.arange(0, 160)[pos[j]], [3, 2],
                                         request_key(0, 0, j))])[0]
        assert_same(b, as_arrays(want))
