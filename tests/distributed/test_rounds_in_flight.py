"""Two rounds in flight (``SamplingService(rounds_in_flight=2)``), on the wire path and with host
groups: each on its own process group and thread, batches and features equal the single process
whichever round carried them. Real
gloo ranks; the second round's use is forced, not timed: while the first round's lock is held,
only the second round's thread can take requests."""

from __future__ import annotations

import numpy as np
import pytest

from mnmg_sampler.graph.partition import partition
from mnmg_sampler.ops.rng import request_key
from mnmg_sampler.sampling.sampler import MultiHopSampler, SampleRequest, local_hop_fn

from .common import as_arrays, assert_same, small_graph
from .harness import run_ranks

SEED = 9
FAN = [4, 3, 2]


def _requests(rank: int, n: int) -> list[SampleRequest]:
    rng = np.random.default_rng(100 + rank)
    return [SampleRequest(rng.choice(240, 10, replace=False), FAN,
                          request_key(SEED, 0, 10 * rank + j)) for j in range(n)]


def _in_flight(rank, world, d, layout=None, budget=0):
    import os
    import time

    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.graph.partition_io import load_partition

    if layout is not None:  # emulated hosts: host groups (mapped host parts) beside the wire
        os.environ["MNMG_HOST_ID"] = f"host-{layout[rank]}"
    if budget == "topology":  # the other hosts' topology and none of their rows
        from .common import topology_budget

        budget = topology_budget(d, rank, world, layout)
    svc = SamplingService(load_partition(d, rank, world), seed=SEED, rounds_in_flight=2,
                          shared_topology="auto" if layout is not None else False,
                          host_memory=budget)
    hosts = [s.sampler.host is not None for s in svc._slots]
    first, second = svc._slots
    reqs = _requests(rank, 6)
    with first.lock:  # the first round's thread waits: the second takes these
        futs = [svc.submit(r) for r in reqs[:3]]
        while not all(f.done() for f in futs):
            time.sleep(0.01)
    futs += [svc.submit(r) for r in reqs[3:]]  # either round may carry these
    got = [as_arrays(svc.result(f)) for f in futs]
    calls = second.sampler.kernel_calls
    st = svc.stats()
    svc.shutdown()
    return got, calls, st["rounds_in_flight"], st["requests"], hosts


@pytest.mark.parametrize("layout, budget", [(None, 0), ((0, 0, 1), 0), ((0, 1), "topology"),
                                            ((0, 1), None)],
                         ids=["wire", "host-groups", "topology-fits", "all-fits"])
def test_two_rounds_in_flight_equal_the_single_process(tmp_path, layout, budget):
    """Host budgets: nothing of other hosts, their topology (hops on the host, rows over the
    wire), everything (the default: hosts independent)."""
    g = small_graph()
    W = 2 if layout is None else len(layout)
    d = str(partition(g, W, "random", tmp_path / "p", seed=4))
    ref = MultiHopSampler(local_hop_fn(g, SEED), g.num_nodes)
    out = run_ranks(_in_flight, W, d, layout, budget, timeout=300)
    for rank, (got, calls, k, n, hosts) in enumerate(out):
        assert k == 2 and n == 6
        # with a host of two ranks, every round in flight samples through its host group
        assert hosts == [layout is not None] * 2
        assert calls >= len(FAN)  # the second round's thread sampled (the forced requests)
        for r, a in zip(_requests(rank, 6), got, strict=True):
            assert_same(a, as_arrays(ref.sample([r])[0]))
            assert np.array_equal(a["x"], g.x[a["n_id"]])
            assert np.array_equal(a["y"], g.y[a["n_id"]])


def _refused(rank, world, d):
    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.errors import ServiceError
    from mnmg_sampler.graph.partition_io import load_partition

    part = load_partition(d, rank, world)
    out = []
    for kw in ({"mode": "inline"}, {"shared_topology": True}, {"rounds_in_flight": 0}):
        try:
            SamplingService(part, seed=SEED, **{"rounds_in_flight": 2, **kw}).shutdown()
            out.append("")
        except ServiceError as e:
            out.append(str(e))
    return out


def test_rounds_in_flight_where_they_cannot_run_are_refused_on_every_rank(tmp_path):
    d = str(partition(small_graph(), 2, "random", tmp_path / "p", seed=4))
    for errs in run_ranks(_refused, 2, d, timeout=300):
        assert "needs thread mode" in errs[0] and "needs thread mode" in errs[1]
        assert "integer >= 1" in errs[2]


def _auto(rank, world, d):
    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.graph.partition_io import load_partition

    part = load_partition(d, rank, world)
    out = {}
    for name, kw in (("merge 1", {"max_requests_per_round": 1}), ("merging", {}),
                     ("inline", {"max_requests_per_round": 1, "mode": "inline"}),
                     ("mixed", {"max_requests_per_round": 1 if rank == 0 else None})):
        svc = SamplingService(part, seed=SEED, shared_topology=False, **kw)
        out[name] = svc.rounds_in_flight
        if name == "merge 1":  # two rounds in flight serve the single process's batches
            out["got"] = [as_arrays(svc.result(f))
                          for f in [svc.submit(r) for r in _requests(rank, 4)]]
        svc.shutdown()
    return out


def test_auto_keeps_two_rounds_in_flight_for_rounds_of_one_request(tmp_path):
    """``auto``: two rounds where a round carries one request (the wire path, thread mode),
    one where rounds merge or cannot overlap, the fewest when ranks differ."""
    g = small_graph()
    d = str(partition(g, 2, "random", tmp_path / "p", seed=4))
    ref = MultiHopSampler(local_hop_fn(g, SEED), g.num_nodes)
    for rank, out in enumerate(run_ranks(_auto, 2, d, timeout=300)):
        assert (out["merge 1"], out["merging"], out["inline"], out["mixed"]) == (2, 1, 1, 1)
        for r, a in zip(_requests(rank, 4), out["got"], strict=True):
            assert_same(a, as_arrays(ref.sample([r])[0]))
            assert np.array_equal(a["x"], g.x[a["n_id"]])
