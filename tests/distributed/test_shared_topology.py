"""Shared topology (``shared_topology``, always ``auto`` in jobs) on real gloo ranks: every
rank maps every part, samples every hop and reads every feature row itself; minibatches
(features included) equal the wire path and the single process bit for bit, a sampling round
is one collective (its agreement) and no id or feature row crosses the wire; refusals (mixed
settings, CUDA kernel, no directory) are typed errors on every rank.
Ranks on several hosts: see test_host_groups.py."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mnmg_sampler.errors import ConfigError
from mnmg_sampler.graph.partition import partition
from mnmg_sampler.graph.partition_io import load_partition
from mnmg_sampler.ops.rng import request_key
from mnmg_sampler.sampling.sampler import MultiHopSampler, SampleRequest, local_hop_fn

from .common import FANOUTS, SEED, as_arrays, assert_same, small_graph
from .harness import RankFailure, run_ranks


def _rounds(rank: int, world: int, n: int) -> list[list[tuple]]:
    """Rounds of ``(seeds, key, fanouts, replace)``: merged requests with seeds anywhere; one
    with replacement and all neighbors (-1) at one hop; an empty round on rank 0."""
    rng = np.random.default_rng([rank, world, 7])
    merged = [(rng.choice(n, 12, replace=False), request_key(SEED, 0, 10 * rank + j),
               FANOUTS, False) for j in range(3)]
    mixed = [(rng.choice(n, 6, replace=False), request_key(SEED, 2, rank), [3, -1, 2], True),
             (rng.choice(n, 6, replace=False), request_key(SEED, 3, rank), [2, 2], False)]
    return [merged, mixed, [] if rank == 0 else merged[:1]]


def _sample(rank, world, d, shared, translated):
    """Every round with and without edge ids: batches, collectives per sample() call, id bytes
    to others, the shared topology's stats."""
    from mnmg_sampler.distributed.sampler import DistSampler

    part = load_partition(d, rank, world)
    s = DistSampler(part, seed=SEED, shared_topology=shared)
    got, calls = [], []
    b0 = s.ex.bytes.get("ids", [0, 0])[1]
    for reqs in _rounds(rank, world, int(part.num_nodes)):
        # one lookup per round on every rank (collective), as a loader translates its seeds
        new = s.ids.to_new_many([q[0] for q in reqs]) if translated else [None] * len(reqs)
        for with_e in (True, False):
            rq = [SampleRequest(seeds, fan, key, rep, edge_ids=with_e, new_seeds=ns)
                  for (seeds, key, fan, rep), ns in zip(reqs, new, strict=True)]
            c0 = s.ex.calls
            out = s.sample(rq)
            calls.append(s.ex.calls - c0)
            got.append([((r.seeds, list(r.fanouts), r.key, r.replace), with_e, as_arrays(b))
                        for r, b in zip(rq, out, strict=True)])
    return got, calls, s.ex.bytes.get("ids", [0, 0])[1] - b0, s.shared_stats()


def _sample_off_on(rank, world, d, translated):
    """``_sample`` over the wire, then with the shared topology, on the same ranks."""
    return _sample(rank, world, d, False, translated), _sample(rank, world, d, True, translated)


def _check(g, got, hop_fn=None) -> int:
    ref = MultiHopSampler(hop_fn or local_hop_fn(g, SEED), g.num_nodes)
    n = 0
    for batches in got:
        for (seeds, fan, key, rep), with_e, mb in batches:
            want = as_arrays(ref.sample([SampleRequest(seeds, fan, key, rep)])[0])
            keys = None if with_e else ("n_id", "edge_index", "num_sampled_nodes",
                                        "num_sampled_edges", "batch_size")
            assert_same(mb, want, **({} if keys is None else {"keys": keys}))
            n += mb["edge_index"].shape[1]
    return n


@pytest.mark.parametrize("world, method, translated", [
    (2, "random", False), (2, "random", True), (3, "metis", False), (2, "range", False)])
def test_shared_equals_wire_and_one_process(tmp_path, world, method, translated):
    g = small_graph()
    d = str(partition(g, world, method, tmp_path / "p", seed=1))
    off, on = zip(*run_ranks(_sample_off_on, world, d, translated, timeout=240), strict=True)
    peer = 0
    for (got_off, calls_off, _bytes_off, st_off), (got_on, calls_on, bytes_on, st_on) in zip(
            off, on, strict=True):
        assert not st_off["enabled"] and st_on["enabled"] and st_on["parts"] == world
        assert _check(g, got_on) == _check(g, got_off) > 0
        for a, b in zip(got_off, got_on, strict=True):  # on == off, field by field
            for (_, _, x), (_, _, y) in zip(a, b, strict=True):
                assert_same(x, y)
        # one collective per round (the agreement), nothing on the wire
        assert calls_on == [1] * len(calls_on) and bytes_on == 0
        assert sum(calls_off) > len(calls_off)
        peer += st_on["peer_nodes"]
        assert (st_on["peer_edges"] > 0) == (st_on["peer_nodes"] > 0)
    assert peer > 0 and sum(r[2] for r in off) > 0


GLOO_CALLS = ("all_reduce", "all_to_all_single", "all_gather", "broadcast", "barrier", "isend",
              "irecv")


def _mapped(a) -> bool:
    """True when ``a`` is a view of a memory-mapped file (page cache), not a copy."""
    import mmap

    while a is not None:
        if isinstance(a, mmap.mmap):
            return True
        a = getattr(a, "base", None)
    return False


def _features(rank, world, d):
    """The same round with features read in place (the shared topology's store) and fetched
    over the wire: batches, gloo calls per round, feature bytes on the wire, store stats."""
    import torch.distributed as dist

    from mnmg_sampler.distributed.features import DistFeatureStore
    from mnmg_sampler.distributed.sampler import DistSampler

    part = load_partition(d, rank, world)
    s = DistSampler(part, seed=SEED, shared_topology=True)
    # the cache has nothing to hold when every part is mapped (and no fill collective)
    stores = {"mapped": DistFeatureStore(part, s.ex, cache_rows=20, shared=s.shared),
              "wire": DistFeatureStore(part, s.ex)}
    rng = np.random.default_rng(rank)
    reqs = [SampleRequest(rng.choice(int(part.num_nodes), 10, replace=False), FANOUTS,
                          request_key(SEED, 5, 2 * rank + j)) for j in range(2)]
    calls: dict[str, int] = {}
    real = {n: getattr(dist, n) for n in GLOO_CALLS}

    def count(name):
        def call(*a, **k):
            calls[name] = calls.get(name, 0) + 1
            return real[name](*a, **k)
        return call

    res = {}
    for how, store in stores.items():
        calls.clear()
        b0 = s.ex.bytes.get("features", [0, 0])[1]
        for n in GLOO_CALLS:
            setattr(dist, n, count(n))
        try:
            out = s.sample(reqs, store)
        finally:
            for n in GLOO_CALLS:
                setattr(dist, n, real[n])
        res[how] = ([(r.seeds, r.key, as_arrays(b)) for r, b in zip(reqs, out, strict=True)],
                    dict(calls), s.ex.bytes.get("features", [0, 0])[1] - b0, dict(store.stats),
                    store.cache_size)
    in_place = all(_mapped(a) for v in (*s.shared.type_x.values(), *s.shared.type_y.values())
                   for a in v[0]) and \
        stores["mapped"].table is None
    return res, in_place


def test_features_read_in_place_with_the_shared_topology(tmp_path):
    g = small_graph()
    d = str(partition(g, 2, "random", tmp_path / "p", seed=1))
    ref = MultiHopSampler(local_hop_fn(g, SEED), g.num_nodes)
    for res, in_place in run_ranks(_features, 2, d, timeout=150):
        assert in_place  # every part's rows are the mapped files' pages, not copies
        (mapped, calls, fbytes, st, cache), (wire, wcalls, wbytes, wst, _) = \
            res["mapped"], res["wire"]
        # features read in place: no collective at all in the round (its agreement goes over
        # the host's sockets), no feature byte on the wire, no cache
        assert calls == {} and fbytes == 0 and cache == 0
        assert st["mapped_rows"] == st["remote_rows"] > 0 and st["rows_fetched"] == 0
        # over the wire: the rows come in exchanges
        assert wcalls and wbytes > 0 and wst["rows_fetched"] > 0
        for (seeds, key, mb), (_, _, wb) in zip(mapped, wire, strict=True):
            want = as_arrays(ref.sample([SampleRequest(seeds, FANOUTS, key)])[0])
            assert_same(mb, want)
            assert_same(mb, wb, keys=("n_id", "x", "y"))
            assert np.array_equal(mb["x"], g.x[mb["n_id"]])
            assert np.array_equal(mb["y"], g.y[mb["n_id"]])


def test_weighted_partition(tmp_path):
    from mnmg_sampler.ops.weighted import local_weighted_hop_fn

    g = small_graph()
    w = np.random.default_rng(2).exponential(1.0, g.num_edges).astype(np.float32)
    w[::5] = 0.0
    d = str(partition(g, 2, "random", tmp_path / "p", seed=1, weights=w))
    for got, calls, _b, st in run_ranks(_sample, 2, d, True, False, timeout=150):
        assert _check(g, got, local_weighted_hop_fn(g, w, SEED)) > 0
        assert calls == [1] * len(calls) and st["peer_nodes"] > 0


def _service(rank, world, d, seeds):
    import torch.distributed as dist

    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.loaders.neighbor import DistNeighborLoader

    svc = SamplingService(load_partition(d, rank, world), seed=SEED, features=False,
                          shared_topology=True)
    real, calls = dist.all_to_all_single, []
    dist.all_to_all_single = lambda *a, **k: calls.append(1) or real(*a, **k)
    try:
        # the loader translates its seeds from the mapped parts: no lookup exchange
        loader = DistNeighborLoader(svc, seeds, FANOUTS, 8, seed=SEED)
        dist.all_to_all_single = real
        assert calls == []
        out = [as_arrays(b) | {"input_id": b.input_id.numpy(), "key": b.key} for b in loader]
        return out, svc.stats()["shared_topology"], svc.stats()["bytes_by_kind"]
    finally:
        svc.shutdown()


def test_service_and_loader(tmp_path):
    g = small_graph()
    d = str(partition(g, 2, "random", tmp_path / "p", seed=1))
    seeds = np.arange(0, g.num_nodes, 2)
    ref = MultiHopSampler(local_hop_fn(g, SEED), g.num_nodes)
    seen = []
    for out, st, by_kind in run_ranks(_service, 2, d, seeds, timeout=150):
        assert st["enabled"] and st["peer_nodes"] > 0
        assert by_kind.get("ids", {"others": 0})["others"] == 0
        for mb in out:
            want = ref.sample([SampleRequest(seeds[mb["input_id"]], FANOUTS, mb["key"])])[0]
            assert_same(mb, as_arrays(want))
            seen.append(mb["input_id"])
    assert np.array_equal(np.sort(np.concatenate(seen)), np.arange(seeds.size))


def _bad(rank, world, d, case):
    from mnmg_sampler.distributed.sampler import DistSampler

    part = load_partition(d, rank, world)
    kw = {"shared_topology": True}
    if case == "mixed":
        kw["shared_topology"] = rank == 0
    elif case == "mixed auto":
        kw["shared_topology"] = True if rank == 0 else "auto"
    elif case == "cuda":  # refused before any collective, as the same config on every rank
        kw["kernel"] = "cuda"
    elif case == "not bool" and rank == 1:
        kw["shared_topology"] = "yes"
    elif case == "no directory" and rank == 0:
        part = dataclasses.replace(part, path=None)
    try:
        DistSampler(part, seed=SEED, **kw)
    except ConfigError as e:
        return str(e)
    return None


def _each(rank, world, fn, d, cases) -> list:
    """``fn(rank, world, d, case)`` for every case in turn on the same ranks (one spawn for
    all), the module functions a case replaces put back after it. A refusal leaves the group
    usable: every rank raises it, after the same collectives."""
    from mnmg_sampler.distributed import shared_topology

    saved = shared_topology.host_id, shared_topology.load_partition
    out = []
    for case in cases:
        try:
            out.append(fn(rank, world, d, case))
        finally:
            shared_topology.host_id, shared_topology.load_partition = saved
    return out


REFUSALS = [("mixed", "differs between ranks"), ("mixed auto", "differs between ranks"),
            ("cuda", "kernel='cuda'"),
            ("not bool", "true, false or 'auto'"), ("no directory", "directory")]


def test_refusals_fail_typed_on_every_rank(tmp_path):
    d = str(partition(small_graph(), 2, "random", tmp_path / "p", seed=1))
    try:
        res = run_ranks(_each, 2, _bad, d, [c for c, _ in REFUSALS], timeout=240)
    except RankFailure as e:  # only a typed error may come back, never a hang
        raise AssertionError(str(e)) from e
    for i, (case, words) in enumerate(REFUSALS):
        got = [r[i] for r in res]
        assert all(m is not None and words in m for m in got), (case, got)


def _auto(rank, world, d, case):
    """``shared_topology='auto'``: on where it can be, off on every rank (no error) where one
    rank cannot, the ranks run on several hosts, or a part (or its feature rows) does not open;
    features follow: read in place where it is on, over the wire where it is off."""
    from mnmg_sampler.distributed import shared_topology
    from mnmg_sampler.distributed.features import DistFeatureStore
    from mnmg_sampler.distributed.sampler import DistSampler

    part = load_partition(d, rank, world)
    kw = {}
    if case == "no directory" and rank == 0:
        part = dataclasses.replace(part, path=None)
    elif case == "hosts":
        shared_topology.host_id = lambda: 1000 + rank
    elif case == "hosts, part missing":  # rank 1's node holds only its own part
        shared_topology.host_id = lambda: 1000 + rank
        if rank == 1:
            shared_topology.load_partition = lambda *a, **k: (_ for _ in ()).throw(
                OSError("no such part"))
    elif case == "part missing" and rank == 1:
        shared_topology.load_partition = lambda *a, **k: (_ for _ in ()).throw(
            OSError("no such part"))
    elif case == "rows missing" and rank == 1:  # another part's feature rows do not map
        real = shared_topology.load_partition
        shared_topology.load_partition = lambda *a, **k: dataclasses.replace(real(*a, **k),
                                                                             x=None)
    s = DistSampler(part, seed=SEED, shared_topology="auto", **kw)
    store = DistFeatureStore(part, s.ex, shared=s.shared)
    n = int(part.num_nodes)
    req = SampleRequest(np.random.default_rng([rank, 1]).choice(n, 8, replace=False), FANOUTS,
                        request_key(SEED, 0, rank))
    (b,) = s.sample([req], store)
    return s.shared_stats()["enabled"], s.shared_stats()["agreement"], \
        ((req.seeds, FANOUTS, req.key, False), False, as_arrays(b)), \
        s.ex.bytes.get("features", [0, 0])[1], [h.topology for h in s.placement.hosts]


# several hosts: each maps every part when its budget (the default) holds them, and agrees
# over gloo
AUTO = [("one host", True), ("no directory", False), ("hosts", True),
        ("hosts, part missing", True), ("part missing", False), ("rows missing", False)]
# which hosts hold every part's topology (the others sample their frontier over the wire)
TOPOLOGY = {"one host": [True], "hosts": [True, True], "hosts, part missing": [True, False]}


def test_auto_is_on_exactly_where_it_can_be(tmp_path):
    g = small_graph()
    d = str(partition(g, 2, "random", tmp_path / "p", seed=1))
    by_rank = run_ranks(_each, 2, _auto, d, [c for c, _ in AUTO], timeout=300)
    for i, (case, on) in enumerate(AUTO):
        res = [r[i] for r in by_rank]
        assert [r[0] for r in res] == [on, on], case
        agreement = "host sockets" if case == "one host" else "gloo"
        assert [r[1] for r in res] == [agreement] * 2, case
        assert [r[4] for r in res] == [TOPOLOGY.get(case, [False] * len(r[4])) for r in res]
        assert _check(g, [[r[2]] for r in res]) > 0  # the same minibatches either way
        for _, _, (_, _, mb), fbytes, _ in res:  # and the same rows, off the wire exactly
            assert np.array_equal(mb["x"], g.x[mb["n_id"]])  # when every host holds them
            assert np.array_equal(mb["y"], g.y[mb["n_id"]])
            assert (fbytes == 0) == (on and case != "hosts, part missing"), case

