"""Data path v2 on real gloo ranks: lean wire, edge ids on request, feature dedup and cache,
seed split by owner. Every output is checked against the single process bit for bit."""

from __future__ import annotations

import numpy as np

from mnmg_sampler.graph.partition import partition
from mnmg_sampler.ops.rng import request_key
from mnmg_sampler.sampling.sampler import MultiHopSampler, SampleRequest, local_hop_fn

from .common import FANOUTS, SEED, as_arrays, assert_same, small_graph
from .harness import run_ranks


def _merged_with_features(rank, world, d, reqs_by_rank, cache_rows):
    from mnmg_sampler.distributed.features import DistFeatureStore
    from mnmg_sampler.distributed.sampler import DistSampler
    from mnmg_sampler.graph.partition_io import load_partition

    s = DistSampler(load_partition(d, rank, world), seed=SEED, shared_topology=False)
    store = DistFeatureStore(s.part, s.ex, cache_rows=cache_rows)
    calls = []  # collectives of each feature fetch
    fetch = store.fetch

    def counted(n_ids):
        c0 = s.ex.calls
        try:
            return fetch(n_ids)
        finally:
            calls.append(s.ex.calls - c0)

    store.fetch = counted
    out = []
    for with_e in (True, False):
        b0 = list(s.ex.bytes.get("ids", [0, 0]))
        reqs = [SampleRequest(seeds, FANOUTS, key, edge_ids=with_e)
                for seeds, key in reqs_by_rank[rank]]
        got = [as_arrays(b) for b in s.sample(reqs, store)]
        ids = s.ex.bytes.get("ids", [0, 0])
        out.append((got, ids[0] - b0[0], ids[1] - b0[1]))
    return out, dict(store.stats), store.cache_size, s.ex.bytes["features"], store.row_bytes, \
        s.wire.itemsize, calls


def test_merged_requests_features_fetched_once_and_edge_ids_on_request(tmp_path):
    g = small_graph()
    d = str(partition(g, 2, "random", tmp_path / "p", seed=3))
    rng = np.random.default_rng(1)
    # overlapping requests on each rank: the same rows are needed several times per round
    reqs_by_rank = [[(rng.choice(g.num_nodes, 12, replace=False), request_key(SEED, 0, 10 * r + j))
                     for j in range(3)] for r in range(2)]
    ref = MultiHopSampler(local_hop_fn(g, SEED), g.num_nodes)
    for cache_rows in (0, 25):
        res = run_ranks(_merged_with_features, 2, d, reqs_by_rank, cache_rows, timeout=180)
        # feature traffic to other ranks: request ids and rows of what was fetched (rounds and
        # cache fill), plus one count word per block; each distinct row crosses once
        fetched = sum(r[1]["rows_fetched"] + r[2] for r in res)
        sent = sum(r[3][1] for r in res)
        row_bytes = res[0][4]
        assert fetched * row_bytes <= sent <= fetched * (row_bytes + 4) + 2 * 3 * 8
        for rank, (out, st, cache_size, fbytes, _row, word, calls) in enumerate(res):
            # a fetch is two collectives: the ids (their sizes inside), then the rows
            assert calls == [2, 2]
            assert word == 4  # int32 wire ids: the graph's node and edge counts fit
            (with_e, self_e, remote_e), (no_e, self_n, remote_n) = out
            # own nodes never enter the all-to-all, and no hop sends its sizes first (every
            # fanout is >= 0: requests and replies travel in blocks of bounds both sides know)
            assert self_e == self_n == 0
            assert 0 < remote_n < remote_e  # edge ids cost bytes only when asked for
            for (seeds, key), a, b in zip(reqs_by_rank[rank], with_e, no_e, strict=True):
                want = as_arrays(ref.sample([SampleRequest(seeds, FANOUTS, key)])[0])
                assert_same(a, want)
                assert_same(b, want, keys=("n_id", "edge_index", "num_sampled_nodes",
                                           "num_sampled_edges", "batch_size"))
                assert b["e_id"].size == 0
                for got in (a, b):
                    assert np.array_equal(got["x"], g.x[got["n_id"]])
                    assert np.array_equal(got["y"], g.y[got["n_id"]])
            # each distinct remote row of a round is fetched at most once, cached ones never
            assert st["duplicate_rows_fetched"] == 0
            assert st["distinct_remote_rows"] < st["remote_rows"]  # the overlap was real
            assert st["rows_fetched"] == (st["distinct_remote_rows"] - st["cache_hits"]
                                          - st["recent_hits"])
            # the second round asks for the first's rows again: every row the first fetched is
            # read again from the last round's, none crosses twice
            assert st["recent_hits"] == st["rows_fetched"] > 0
            assert cache_size == (25 if cache_rows else 0)
            assert (st["cache_hits"] > 0) == bool(cache_rows)
            # nothing to self: no fetch sends its sizes first (the id blocks carry their sizes,
            # bounded by the owner's part), and own rows never enter an exchange
            assert fbytes[0] == 0


def _owner_split(rank, world, d, nodes):
    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.graph.partition_io import load_partition
    from mnmg_sampler.loaders.neighbor import DistNeighborLoader

    svc = SamplingService(load_partition(d, rank, world), seed=SEED, features=False,
                          shared_topology=False)
    loader = DistNeighborLoader(svc, nodes, FANOUTS, 10, shuffle=True, seed=4, split="owner")
    loader.set_epoch(2)
    got = [as_arrays(b) | {"input_id": b.input_id.numpy(), "key": b.key} for b in loader]
    svc.shutdown()
    own = svc.sampler.owner_of(nodes[np.concatenate([b["input_id"] for b in got])])
    return got, len(loader), own


def test_owner_split_gives_each_rank_its_own_seeds_once(tmp_path):
    g = small_graph()
    d = str(partition(g, 2, "metis", tmp_path / "p", seed=1))
    nodes = np.arange(0, 200)
    res = run_ranks(_owner_split, 2, d, nodes, timeout=180)
    ref = MultiHopSampler(local_hop_fn(g, SEED), g.num_nodes)
    seen = []
    assert res[0][1] == res[1][1] == len(res[0][0])  # same batch count on every rank
    for rank, (got, _n, own) in enumerate(res):
        assert (own == rank).all()  # every seed of rank r is owned by r
        for b, mb in enumerate(got):
            gidx = b * 2 + rank
            assert mb["key"] == request_key(4, 2, gidx)
            want = ref.sample([SampleRequest(nodes[mb["input_id"]], FANOUTS, mb["key"])])[0]
            assert_same(mb, as_arrays(want))
            seen.append(mb["input_id"])
    allpos = np.concatenate(seen)
    assert np.array_equal(np.sort(allpos), np.arange(nodes.size))  # each seed exactly once


def _owner_split_uneven(rank, world, d, rank0_nodes):
    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.graph.partition_io import load_partition
    from mnmg_sampler.loaders.neighbor import DistNeighborLoader

    svc = SamplingService(load_partition(d, rank, world), seed=SEED, features=False,
                          shared_topology=False)
    out = {}
    for name, nodes in (("empty", np.empty(0, np.int64)), ("rank0_only", rank0_nodes)):
        loader = DistNeighborLoader(svc, nodes, FANOUTS, 4, split="owner")
        out[name] = (len(loader), [b.input_id.numpy() for b in loader])
    svc.shutdown()
    return out


def test_owner_split_empty_input_and_a_rank_without_seeds(tmp_path):
    d = str(partition(small_graph(), 2, "range", tmp_path / "p"))
    rank0_nodes = np.arange(0, 10)  # a range partitioning: rank 0 owns the low ids
    res = run_ranks(_owner_split_uneven, 2, d, rank0_nodes, timeout=180)
    for out in res:
        assert out["empty"] == (0, [])  # as with the global split: no batch on any rank
    (n0, got0), (n1, got1) = res[0]["rank0_only"], res[1]["rank0_only"]
    assert n0 == n1 == 3 == len(got0) == len(got1)  # ceil(10 / 4) on every rank
    assert np.array_equal(np.concatenate(got0), np.arange(10))
    assert all(b.size == 0 for b in got1)  # rank 1 owns none of the seeds: empty batches


def _range_without_maps(rank, world, d, seeds):
    import dataclasses

    from mnmg_sampler.distributed.sampler import DistSampler
    from mnmg_sampler.graph.partition_io import load_partition

    # a range partitioning keeps ids: the sampler must not need (or touch) either id map
    part = dataclasses.replace(load_partition(d, rank, world), new_to_orig=None,
                               orig_to_new=None)
    s = DistSampler(part, seed=SEED, shared_topology=False)
    (mb,) = s.sample([SampleRequest(seeds[rank], FANOUTS, request_key(SEED, 0, rank))])
    return as_arrays(mb), s.identity_ids


def test_range_partitioning_needs_no_id_map(tmp_path):
    g = small_graph()
    d = str(partition(g, 2, "range", tmp_path / "p"))
    seeds = [np.arange(100, 116), np.arange(3, 20)]
    ref = MultiHopSampler(local_hop_fn(g, SEED), g.num_nodes)
    for rank, (got, identity) in enumerate(run_ranks(_range_without_maps, 2, d, seeds,
                                                     timeout=120)):
        assert identity
        want = ref.sample([SampleRequest(seeds[rank], FANOUTS, request_key(SEED, 0, rank))])[0]
        assert_same(got, as_arrays(want))
