"""Host groups on real gloo ranks, hosts forced with ``MNMG_HOST_ID``: minibatches and features
equal the single process for any host layout, host budget (nothing of other hosts, their
topology only, everything) and host cache size; a rank never sends a node or a feature row to a
rank of its own host; with the other hosts' topology no id crosses hosts, and with their rows
too no feature byte; the host cache (chosen by degree or by inclusion probability) takes feature
rows off the wire, and a cached row is never asked for; loaders through a service, thread and
inline, give the single process's batches at every budget, and count the steps' wait for rows."""

from __future__ import annotations

import numpy as np
import pytest

from mnmg_sampler.graph.partition import partition
from mnmg_sampler.graph.partition_io import load_partition
from mnmg_sampler.ops.rng import request_key
from mnmg_sampler.sampling.sampler import MultiHopSampler, SampleRequest, local_hop_fn

from .common import FANOUTS, SEED, as_arrays, assert_same, small_graph, topology_budget
from .harness import run_ranks

CACHE = 40  # rows of other hosts each host keeps (of 240 nodes)


def _rounds(rank: int, n: int) -> list[list[SampleRequest]]:
    """Merged requests with seeds anywhere; one with replacement and all neighbors (-1); a
    round without requests on rank 1."""
    rng = np.random.default_rng([rank, 11])
    merged = [SampleRequest(rng.choice(n, 12, replace=False), FANOUTS,
                            request_key(SEED, 0, 10 * rank + j)) for j in range(3)]
    mixed = [SampleRequest(rng.choice(n, 6, replace=False), [3, -1, 2],
                           request_key(SEED, 2, rank), replace=True)]
    # a round in which the last rank has no request at all (a service's rank with none pending)
    alone = [] if rank == 1 else [SampleRequest(rng.choice(n, 8, replace=False), FANOUTS,
                                                request_key(SEED, 3, rank))]
    return [merged, mixed, alone]


def _hosts(rank, world, d, layout, budget):
    """The same rounds with a store without and with the host cache (a budget of nothing or
    of the topology), or with the store the placement sizes (``all``, the default budget):
    batches, the feature and id bytes sent to other hosts, and the ids and rows sent to ranks
    of this rank's host."""
    import os

    from mnmg_sampler.distributed.features import DistFeatureStore
    from mnmg_sampler.distributed.row_cache import CachePlan
    from mnmg_sampler.distributed.sampler import DistSampler

    os.environ["MNMG_HOST_ID"] = f"host-{layout[rank]}"
    part = load_partition(d, rank, world)
    memory = {"zero": 0, "topology": topology_budget(d, rank, world, layout), "all": None}
    s = DistSampler(part, seed=SEED, shared_topology="auto", host_memory=memory[budget])
    same = [p for p in range(world) if layout[p] == layout[rank] and p != rank]
    near_rows = []
    real = s.ex.payload

    def payload(t, send_counts, recv_counts, tag="data"):
        if tag in ("ids", "features"):
            near_rows.append(sum(int(send_counts[p]) for p in same))
        return real(t, send_counts, recv_counts, tag)

    s.ex.payload = payload
    res = {}
    stores = ((0, None), (CACHE, None), (CACHE, CachePlan(FANOUTS, 12))) if budget != "all" \
        else ((0, None),)
    i0 = sum(v for k, v in s.ex.cross_bytes.items() if k != "features")
    for cache, plan in stores:
        store = DistFeatureStore(part, s.ex, cache_rows=cache, host=s.host, cache_plan=plan,
                                 shared=s.shared, fit=s.placement)
        asked = []  # every id whose row this rank asks another rank for, after the fill
        real_rows = store._from_owners

        def rows(ids, real_rows=real_rows, asked=asked):
            asked.append(np.concatenate([np.empty(0, np.int64), *ids.values()]))
            return real_rows(ids)

        store._from_owners = rows
        f0 = s.ex.cross_bytes.get("features", 0)
        got = []
        for reqs in _rounds(rank, int(part.num_nodes)):
            for r, b in zip(reqs, s.sample(reqs, store), strict=True):
                got.append(((r.seeds, list(r.fanouts), r.key, r.replace), as_arrays(b)))
        cached = np.concatenate([np.asarray(i) for c in store._cache.values()
                                 for i, _ in c]) if cache \
            else np.empty(0, np.int64)
        res[store.cache_choice] = (got, s.ex.cross_bytes.get("features", 0) - f0,
                                   store.cache_size, store.stats["mapped_rows"], cached,
                                   np.concatenate([np.empty(0, np.int64), *asked]),
                                   store.stats["cache_hits"])
    host = None if s.host is None else s.host.stats()
    ids = sum(v for k, v in s.ex.cross_bytes.items() if k != "features") - i0
    return res, near_rows, host, s.ex.far.tolist(), ids, s.placement.report()


def _check(g, got) -> int:
    ref = MultiHopSampler(local_hop_fn(g, SEED), g.num_nodes)
    n = 0
    for (seeds, fan, key, rep), mb in got:
        want = as_arrays(ref.sample([SampleRequest(seeds, fan, key, rep)])[0])
        assert_same(mb, want)
        assert np.array_equal(mb["x"], g.x[mb["n_id"]])
        assert np.array_equal(mb["y"], g.y[mb["n_id"]])
        n += mb["edge_index"].shape[1]
    return n


@pytest.mark.parametrize("budget", ["zero", "topology", "all"])
@pytest.mark.parametrize("layout", [
    (0, 1),  # 2 hosts x 1 rank: the wire path, a host cache per rank
    (0, 0, 1),  # hosts of 2 and 1 ranks
    pytest.param((0, 0, 1, 1), marks=pytest.mark.slow),  # 2 hosts x 2 ranks
])
def test_host_layouts_equal_one_process(tmp_path, layout, budget):
    g = small_graph()
    W = len(layout)
    d = str(partition(g, W, "random", tmp_path / "p", seed=1))
    bounds = load_partition(d, 0, W).boundaries
    out = run_ranks(_hosts, W, d, layout, budget, timeout=240)
    cross = {"none": 0, "degree": 0, "inclusion": 0}
    for rank, (res, near_rows, host, far, ids, placement) in enumerate(out):
        assert far == [layout[p] != layout[rank] for p in range(W)]
        assert placement == out[0][5]  # one placement, agreed by every rank
        mine = placement[layout[rank]]
        assert mine["ranks"] == [p for p in range(W) if layout[p] == layout[rank]]
        assert mine["topology"] == ("own" if budget == "zero" else "all")
        assert mine["rows"] == ("all" if budget == "all" else "none")
        # a host group on every rank once some host has two ranks or maps other hosts' parts
        assert (host is not None) == (budget != "zero" or max(map(layout.count, layout)) > 1)
        if host is not None:
            assert host["host_ranks"] == mine["ranks"]
            assert host["parts"] == (W if budget != "zero" else len(mine["ranks"]))
        # every hop is sampled on the host when it maps every part's topology
        assert (ids == 0) == (budget != "zero")
        # nothing of this host's ranks ever goes to them: every hop and row exchange sends
        # only to other hosts' ranks
        assert sum(near_rows) == 0 and (budget == "all" or near_rows)
        if budget == "all":  # every row mapped: no table, no cache, nothing asked of anyone
            ((got, fbytes, size, mapped, cached, asked, hits),) = res.values()
            assert _check(g, got) > 0 and fbytes == 0 and size == 0 and asked.size == 0
            assert mapped > 0
            continue
        assert sorted(res) == sorted(cross)  # no cache, by degree, by inclusion probability
        same_host = mine["ranks"]
        for how, (got, fbytes, size, mapped, cached, asked, hits) in res.items():
            assert _check(g, got) > 0
            assert size == (0 if how == "none" else CACHE)  # the host's slices together
            assert (mapped > 0) == (layout.count(layout[rank]) > 1)
            # cached rows are never asked for, nor rows of this host's parts
            assert asked.size > 0 and not np.isin(asked, cached).any()
            owners = np.searchsorted(np.asarray(bounds[1:-1]), asked, side="right")
            assert not np.isin(owners, same_host).any()
            assert (hits > 0) == (how != "none")
            cross[how] += fbytes
        for how in ("degree", "inclusion"):
            for (_, a), (_, b) in zip(res["none"][0], res[how][0], strict=True):
                assert_same(a, b, keys=("n_id", "x", "y", "edge_index"))
    if budget == "all":
        return
    # the host cache takes rows off the wire, whichever way it was chosen
    assert 0 < cross["degree"] < cross["none"] and 0 < cross["inclusion"] < cross["none"]


def _cache_over_budget(rank, world, d):
    """Rank 1 has almost no memory: its check fails before the fill allocates anything."""
    import os

    from mnmg_sampler.distributed.features import DistFeatureStore
    from mnmg_sampler.distributed.sampler import DistSampler
    from mnmg_sampler.system import host_limits

    os.environ["MNMG_HOST_ID"] = f"host-{rank}"
    part = load_partition(d, rank, world)
    s = DistSampler(part, seed=SEED, shared_topology="auto", host_memory=0)
    real = host_limits.available_bytes
    if rank == 1:
        host_limits.available_bytes = lambda: 1000
    try:
        DistFeatureStore(part, s.ex, cache_rows=CACHE, host=s.host)
    finally:
        host_limits.available_bytes = real


def test_cache_over_memory_budget_raises_on_every_rank(tmp_path):
    from mnmg_sampler.errors import MemoryBudgetError

    from .harness import RankFailure

    d = str(partition(small_graph(), 2, "random", tmp_path / "p", seed=1))
    with pytest.raises(RankFailure) as e:
        run_ranks(_cache_over_budget, 2, d, timeout=120)
    assert set(e.value.errors) == {0, 1}
    for err, _ in e.value.errors.values():
        assert isinstance(err, MemoryBudgetError) and "features.host_memory_mb" in str(err)


def _loaders(rank, world, d):
    """A loader through a service on 2 hosts, in thread and inline mode, at budgets of
    nothing, the topology and everything: its batches, and the placement each service took."""
    import os

    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.loaders.neighbor import DistNeighborLoader

    os.environ["MNMG_HOST_ID"] = f"host-{rank}"
    part = load_partition(d, rank, world)
    budgets = {"zero": 0, "topology": topology_budget(d, rank, world, (0, 1)), "all": None}
    out = {}
    for mode in ("thread", "inline"):
        for name, memory in budgets.items():
            svc = SamplingService(part, seed=SEED, mode=mode, host_memory=memory,
                                  feature_cache_plan=(FANOUTS, 16))
            loader = DistNeighborLoader(svc, np.arange(int(part.num_nodes)), FANOUTS, 16,
                                        shuffle=True, seed=SEED, prefetch=3)
            got = [(b.key, as_arrays(b)) for b in loader]
            st = svc.stats()
            svc.shutdown()
            waits = (st["waits"], st["t_wait"], st["t_wait_rows"])
            out[mode, name] = (got, [(h["topology"], h["rows"]) for h in st["placement"]], waits)
    return out


def test_loaders_equal_one_process_at_every_budget_in_both_service_modes(tmp_path):
    g = small_graph()
    d = str(partition(g, 2, "random", tmp_path / "p", seed=2))
    ref = MultiHopSampler(local_hop_fn(g, SEED), g.num_nodes)
    want = {"zero": ("own", "none"), "topology": ("all", "none"), "all": ("all", "all")}
    for out in run_ranks(_loaders, 2, d, timeout=300):
        assert len(out) == 6
        for (mode, name), (got, hosts, (waits, t_wait, t_rows)) in out.items():
            assert hosts == [want[name]] * 2, (mode, name)
            assert got
            # one wait per batch handed out; the wait for rows is a part of it, and inline
            # every round (so every fetch of rows) runs inside a wait
            assert waits == len(got) and 0 <= t_rows <= t_wait, (mode, name)
            assert t_rows > 0 or mode == "thread", (mode, name)
            for key, b in got:
                seeds = b["n_id"][:b["batch_size"]]
                assert_same(b, as_arrays(ref.sample([SampleRequest(seeds, FANOUTS, key)])[0]))
                assert np.array_equal(b["x"], g.x[b["n_id"]])
                assert np.array_equal(b["y"], g.y[b["n_id"]])
