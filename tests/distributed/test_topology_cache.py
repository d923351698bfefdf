"""Topology cache (``sampler.topology_cache``) on real gloo ranks: cached remote rows are the
owners' rows, chosen by score within the budget; minibatches with the cache on equal those with
it off and the single process bit for bit; cached nodes never travel; bad values fail typed."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mnmg_sampler.config import config_from_dict
from mnmg_sampler.errors import ConfigError
from mnmg_sampler.graph.partition import partition
from mnmg_sampler.graph.partition_io import load_partition
from mnmg_sampler.ops.rng import request_key
from mnmg_sampler.sampler import MultiHopSampler, SampleRequest, local_hop_fn

from .common import FANOUTS, SEED, as_arrays, assert_same, small_graph
from .harness import RankFailure, run_ranks

FRACTION = 0.5


def _requests(rank: int, world: int, n: int, own: np.ndarray) -> list[list[tuple]]:
    """Rounds of ``(seeds, key, fanouts, replace)``: merged requests with seeds anywhere; seeds
    this rank owns; with replacement and all neighbors (-1) at one hop."""
    rng = np.random.default_rng([rank, world])
    anywhere = [(rng.choice(n, 12, replace=False), request_key(SEED, 0, 10 * rank + j),
                 FANOUTS, False) for j in range(3)]
    owned = [(own[rng.choice(own.size, min(12, own.size), replace=False)],
              request_key(SEED, 1, rank), FANOUTS, False)]
    mixed = [(rng.choice(n, 6, replace=False), request_key(SEED, 2, rank), [3, -1, 2], True),
             (rng.choice(n, 6, replace=False), request_key(SEED, 3, rank), [2, 2], False)]
    return [anywhere, owned, mixed]


def _sample(rank, world, d, fractions):
    """Per fraction: one sampler, every round with and without edge ids; id bytes to others,
    and the cache's stats and arrays."""
    from mnmg_sampler.distributed.sampler import DistSampler

    part = load_partition(d, rank, world)
    rounds = _requests(rank, world, int(part.num_nodes), np.asarray(part.orig_ids))
    out = []
    for frac in fractions:
        s = DistSampler(part, seed=SEED, topology_cache=frac[rank], shared_topology=False)
        got = []
        for reqs in rounds:
            for with_e in (True, False):
                rq = [SampleRequest(seeds, fan, key, rep, edge_ids=with_e)
                      for seeds, key, fan, rep in reqs]
                got.append([((r.seeds, list(r.fanouts), r.key, r.replace), with_e, as_arrays(b))
                            for r, b in zip(rq, s.sample(rq), strict=True)])
        t = s.topo
        arrays = None if t is None else (t.ids, t.indptr, t.indices, t.edge_ids, t.orig_ids,
                                          t.weights)
        table = 0 if t is None else t._slots.nbytes  # its hash table
        out.append((got, s.ex.bytes.get("ids", [0, 0])[1],
                    dict(s.topology_stats(), table_bytes=table), arrays))
    return out


def _check_batches(g, got, hop_fn=None) -> int:
    ref = MultiHopSampler(hop_fn or local_hop_fn(g, SEED), g.num_nodes)
    n = 0
    for batches in got:
        for (seeds, fan, key, rep), with_e, mb in batches:
            want = as_arrays(ref.sample([SampleRequest(seeds, fan, key, rep)])[0])
            if with_e:
                assert_same(mb, want)
            else:
                assert_same(mb, want, keys=("n_id", "edge_index", "num_sampled_nodes",
                                            "num_sampled_edges", "batch_size"))
                assert mb["e_id"].size == 0
            n += mb["edge_index"].shape[1]
    return n


def _check_cache(g, d, rank, world, stats, arrays, weights=None) -> None:
    """The cached rows are the owners' rows (canonical order) of remote nodes, chosen greedily
    by (edges from this part) / degree within the budget."""
    part = load_partition(d, rank, world)
    n2o = np.asarray(part.new_to_orig)  # a tool's view of the global map (the test's only)
    ids, indptr, indices, eids, orig, w = arrays
    lo, hi = part.start, part.end
    assert ids.size == stats["nodes"] > 0 and indices.size == stats["edges"]
    assert np.all(np.diff(ids) > 0) and not np.any((ids >= lo) & (ids < hi))
    assert stats["edges"] <= stats["budget_edges"] == int(FRACTION * part.num_local_edges)
    assert np.array_equal(orig, n2o[ids])
    for i, o in enumerate(orig):
        a, b = g.indptr[o], g.indptr[o + 1]
        assert np.array_equal(n2o[indices[indptr[i]:indptr[i + 1]]], g.indices[a:b])
        assert np.array_equal(eids[indptr[i]:indptr[i + 1]], g.edge_ids[a:b])
        if weights is not None:
            assert np.array_equal(w[indptr[i]:indptr[i + 1]], weights[a:b])
    assert (w is None) == (weights is None)
    # the choice, recomputed from the whole graph
    local = np.asarray(part.indices)
    remote = local[(local < lo) | (local >= hi)]
    cand, halo = np.unique(remote, return_counts=True)
    deg = np.diff(g.indptr)[n2o[cand]]
    order = sorted(range(cand.size), key=lambda i: (-halo[i] / max(deg[i], 1), cand[i]))
    used, want = 0, []
    for i in order:
        if used + deg[i] <= stats["budget_edges"]:
            used += deg[i]
            want.append(cand[i])
    assert np.array_equal(ids, np.sort(want))


@pytest.mark.parametrize("world, method", [
    (2, "random"), (2, "metis"), (2, "range"), (3, "random"), (3, "metis")])
def test_cache_on_off_and_one_process_are_identical(tmp_path, world, method):
    g = small_graph()
    d = str(partition(g, world, method, tmp_path / "p", seed=1))
    res = run_ranks(_sample, world, d, [[0.0] * world, [FRACTION] * world], timeout=300)
    remote = {0: 0, 1: 0}
    for rank, ((off, b_off, st_off, arr_off), (on, b_on, st_on, arr_on)) in enumerate(res):
        assert arr_off is None and st_off["nodes"] == st_off["hits"] == 0
        assert _check_batches(g, off) == _check_batches(g, on) > 0
        for a, b in zip(off, on, strict=True):  # cache on == cache off, field by field
            for (_, _, x), (_, _, y) in zip(a, b, strict=True):
                assert_same(x, y)
        _check_cache(g, d, rank, world, st_on, arr_on)
        assert st_on["hits"] > 0 and st_on["hit_edges"] > 0
        assert st_on["bytes"] == sum(a.nbytes for a in arr_on if a is not None) + \
            st_on["table_bytes"]
        remote[0] += b_off
        remote[1] += b_on
    assert 0 < remote[1] < remote[0]  # cached nodes and their neighbors never travel


def test_ranks_may_use_different_fractions(tmp_path):
    g = small_graph()
    d = str(partition(g, 3, "metis", tmp_path / "p", seed=1))
    res = run_ranks(_sample, 3, d, [[FRACTION, 0.0, 2.0]], timeout=300)
    for rank, ((got, _b, st, arrays),) in enumerate(res):
        _check_batches(g, got)
        assert (st["nodes"] > 0) == (rank != 1) and (arrays[0].size > 0) == (rank != 1)
    # with a budget above the halo's edges, every remote neighbor of the part is cached
    assert res[2][0][2]["nodes"] == res[2][0][2]["candidates"]


def test_weighted_partition_caches_weights(tmp_path):
    from mnmg_sampler.ops.weighted import local_weighted_hop_fn

    g = small_graph()
    w = np.random.default_rng(2).exponential(1.0, g.num_edges).astype(np.float32)
    w[::5] = 0.0
    d = str(partition(g, 2, "metis", tmp_path / "p", seed=1, weights=w))
    res = run_ranks(_sample, 2, d, [[FRACTION, FRACTION]], timeout=300)
    for rank, ((got, _b, st, arrays),) in enumerate(res):
        assert _check_batches(g, got, local_weighted_hop_fn(g, w, SEED)) > 0
        _check_cache(g, d, rank, 2, st, arrays, weights=w)
        assert st["hits"] > 0


def _service(rank, world, d, seeds):
    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.loader import DistNeighborLoader

    svc = SamplingService(load_partition(d, rank, world), seed=SEED, features=False,
                          topology_cache=FRACTION, shared_topology=False)
    try:
        loader = DistNeighborLoader(svc, seeds, FANOUTS, 8, seed=SEED, split="owner")
        out = [as_arrays(b) | {"input_id": b.input_id.numpy(), "key": b.key} for b in loader]
        return out, svc.stats()["topology_cache"]
    finally:
        svc.shutdown()


def test_service_with_owner_split(tmp_path):
    g = small_graph()
    d = str(partition(g, 2, "metis", tmp_path / "p", seed=1))
    seeds = np.arange(0, g.num_nodes, 2)
    res = run_ranks(_service, 2, d, seeds, timeout=300)
    ref = MultiHopSampler(local_hop_fn(g, SEED), g.num_nodes)
    n = 0
    for out, st in res:
        assert st["nodes"] > 0 and st["bytes"] > 0 and st["hits"] > 0
        for mb in out:
            want = ref.sample([SampleRequest(seeds[mb["input_id"]], FANOUTS, mb["key"])])[0]
            assert_same(mb, as_arrays(want))
            n += 1
    assert n > 0


def _bad(rank, world, d, value, kernel, service):
    from mnmg_sampler.distributed.sampler import DistSampler
    from mnmg_sampler.distributed.service import SamplingService

    part = load_partition(d, rank, world)
    try:
        if service:
            SamplingService(part, seed=SEED, features=False, topology_cache=value,
                            shared_topology=False)
        else:
            DistSampler(part, seed=SEED, kernel=kernel, topology_cache=value, shared_topology=False)
    except ConfigError as e:
        return str(e)
    return None


BAD = [(-0.1, "cpu", False), (math.nan, "cpu", False), (math.inf, "cpu", True),
       ("0.2", "cpu", False), (True, "cpu", True), (0.2, "cuda", False)]


def _bad_each(rank, world, d):
    """``_bad`` for every case in turn on the same ranks (one spawn for all): every rank
    refuses each at the same point, so the group stays usable for the next."""
    return [_bad(rank, world, d, *case) for case in BAD]


def test_bad_values_fail_typed_on_every_rank(tmp_path):
    d = str(partition(small_graph(), 2, "random", tmp_path / "p", seed=1))
    try:
        res = run_ranks(_bad_each, 2, d, timeout=240)
    except RankFailure as e:  # only a typed error may come back, never a hang
        raise AssertionError(str(e)) from e
    for i, case in enumerate(BAD):
        assert all(r[i] is not None and "topology_cache" in r[i] for r in res), case


def test_config_key_is_checked():
    assert config_from_dict({"sampler": {"topology_cache": 0.25}}).sampler.topology_cache == 0.25
    assert config_from_dict({}).sampler.topology_cache == 0
    for bad in (-1, "x", math.nan):
        with pytest.raises(ConfigError, match="sampler.topology_cache"):
            config_from_dict({"sampler": {"topology_cache": bad}})


HUGE_N = 1 << 22  # an int64 array of HUGE_N entries is 32 MiB


def _traced(rank, world, d):
    """Peak traced allocations (numpy's included) while the cache is built and used."""
    import tracemalloc

    from mnmg_sampler.distributed.sampler import DistSampler

    part = load_partition(d, rank, world)
    # id maps first: their shard is sized by num_nodes / W
    s = DistSampler(part, seed=SEED, shared_topology=False)
    own = np.asarray(part.orig_ids)
    rng = np.random.default_rng(rank)
    reqs = [SampleRequest(own[rng.choice(own.size, 64, replace=False)], FANOUTS, rank)]
    s.sample(reqs)  # warm-up: compiled code
    tracemalloc.start()
    from mnmg_sampler.distributed.topology_cache import TopologyCache

    s.topo = TopologyCache(part, s.ex, 1.0)  # collective: both ranks
    build = tracemalloc.get_traced_memory()[1]
    tracemalloc.reset_peak()
    got = [as_arrays(b) for b in s.sample(reqs)]
    use = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return build, use, s.topology_stats(), [(r.seeds, r.key) for r in reqs], got


def test_no_num_nodes_sized_array_in_build_or_use(tmp_path):
    from mnmg_sampler.graph.csr import CSRGraph

    rng = np.random.default_rng(4)
    m = 1 << 17  # few edges, many nodes: any num_nodes-sized array dwarfs the part's arrays
    src = rng.integers(0, HUGE_N, m)
    g = CSRGraph.from_edges(np.concatenate([src, src]), np.concatenate(
        [rng.integers(0, HUGE_N, m), np.roll(src, 1)]), HUGE_N, name="sparse")
    d = str(partition(g, 2, "random", tmp_path / "p", seed=1))
    res = run_ranks(_traced, 2, d, timeout=600)
    ref = MultiHopSampler(local_hop_fn(g, SEED), g.num_nodes)
    for build, use, st, reqs, got in res:
        assert st["nodes"] > 0 and st["hits"] > 0
        assert build < 2 * HUGE_N and use < 2 * HUGE_N  # 8 * HUGE_N for one int64 array
        for (seeds, key), mb in zip(reqs, got, strict=True):
            assert_same(mb, as_arrays(ref.sample([SampleRequest(seeds, FANOUTS, key)])[0]))


def test_bench_dist_reports_the_cache_beside_no_cache(tmp_path):
    from .test_bench_modes import bench

    res = bench("dist", tmp_path, "--batch-size", "16", "--batches", "3", "--world-sizes", "2",
                "--partition-method", "metis", "--split", "owner", "--topology-cache", "0.5",
                timeout=180)
    two = res["dist"]["2"]
    nc = two["without_topology_cache"]
    assert 0 < two["id_bytes_per_edge_remote"] < nc["id_bytes_per_edge_remote"]
    assert all(t["nodes"] > 0 and t["bytes"] > 0 for t in two["topology_cache"])
    # the timed repeats' hits (the warm-up round's are in the caches' own counters too)
    assert 0 < two["topology_cache_hits"] <= sum(t["hits"] for t in two["topology_cache"])
    assert sum(h["id_bytes_per_edge_remote"] for h in two["hops"]) == pytest.approx(
        two["id_bytes_per_edge_remote"])
    assert all(v > 0 for v in two["id_bytes_per_edge_remote_parts"].values())
    assert len(nc["edges_per_s_per_rank"]) == 2 and nc["cpu_s_per_m_edges"] > 0
