"""The collectives of one DistSampler round, counted on real gloo ranks: with every fanout >= 0
a hop is one exchange (an all-to-all each way, blocks within bounds both sides compute, sizes
inside), so a round is at most hops + 2 exchanges (the hops, the lookup of each request's last
new nodes, the agreement; hops + 1 with replicated id maps, the default for small graphs); a
fanout of -1 anywhere falls back to size exchanges. Batches equal
the single process bit for bit either way."""

from __future__ import annotations

import numpy as np

from mnmg_sampler.graph.partition import partition
from mnmg_sampler.ops.rng import request_key
from mnmg_sampler.sampling.sampler import MultiHopSampler, SampleRequest, local_hop_fn

from .common import FANOUTS, SEED, as_arrays, assert_same, small_graph
from .harness import run_ranks


def _round(rank, world, d, plans, id_maps="sharded"):
    from mnmg_sampler.distributed.id_maps import TAG
    from mnmg_sampler.distributed.sampler import DistSampler
    from mnmg_sampler.graph.partition_io import load_partition

    part = load_partition(d, rank, world)
    s = DistSampler(part, seed=SEED, shared_topology=False, id_maps=id_maps)
    out = []
    for plan in plans:
        reqs = [SampleRequest(np.asarray(seeds), fan, key, replace=rep, edge_ids=eids)
                for seeds, fan, key, rep, eids in plan[rank]]
        remote = not all(bool(s.owns(r.seeds).all()) for r in reqs)
        calls, lookup = s.ex.calls, list(s.ex.bytes.get(TAG, [0, 0]))
        got = [as_arrays(b) for b in s.sample(reqs)]
        after = s.ex.bytes.get(TAG, [0, 0])
        out.append((got, remote, s.ex.calls - calls, after[1] - lookup[1]))
    return out


def _both(rank, world, d, plans):
    """The plans on the sharded maps, then on the default (``auto``: replicated here)."""
    from mnmg_sampler.distributed.id_maps import AUTO_REPLICATED_MAX_NODES

    assert small_graph().num_nodes <= AUTO_REPLICATED_MAX_NODES
    return _round(rank, world, d, plans), _round(rank, world, d, plans, "auto")


def _reference(g, plan):
    ref = MultiHopSampler(local_hop_fn(g, SEED), g.num_nodes)
    out = []
    for seeds, fan, key, rep, eids in plan:
        want = as_arrays(ref.sample([SampleRequest(np.asarray(seeds), fan, key, replace=rep)])[0])
        if not eids:
            want["e_id"] = np.empty(0, np.int64)
        out.append(want)
    return out


def _plans(rng, fanouts_of):
    """A maker of requests: ``one(rank, j, pool, round)`` is request j of ``rank``, 10 seeds
    from ``pool``, with ``fanouts_of(rank, j) = (fanouts, replace)``; only j = 1 wants edge
    ids."""
    def one(rank, j, pool, r):
        fan, rep = fanouts_of(rank, j)
        return (pool[rng.choice(pool.size, 10, replace=False)].tolist(), fan,
                request_key(SEED, r, 10 * rank + j), rep, j == 1)
    return one


def test_one_round_makes_the_expected_collectives_and_looks_up_only_last_hops(tmp_path):
    g = small_graph()
    d = partition(g, 2, "random", tmp_path / "p", seed=3)
    from mnmg_sampler.graph.partition_io import load_partition

    parts = [load_partition(str(d), r, 2, verify=False) for r in range(2)]
    own = [np.asarray(p.orig_ids) for p in parts]
    o2n, bounds = np.asarray(parts[0].orig_to_new), np.asarray(parts[0].boundaries)
    rng = np.random.default_rng(7)
    # one request with replacement and a fanout above the graph's largest degree: its bound
    # is the fanout, the others' the degree
    big = int(np.diff(g.indptr).max()) + 5
    fans = {0: ([4, 3, 2], False), 1: (FANOUTS, False), 2: ([big, 2], True)}
    one = _plans(rng, lambda rank, j: fans[j])
    everywhere = np.arange(g.num_nodes)
    plans = [[[one(r, j, everywhere, 0) for j in range(3)] for r in range(2)],
             [[one(r, j, own[r], 1) for j in range(3)] for r in range(2)]]
    both = run_ranks(_both, 2, str(d), plans, timeout=240)
    res = [b[0] for b in both]
    for rnd in range(2):  # auto replicates this graph's maps: no lookup, hops round trips
        for rank in range(2):
            got, remote, calls, looked_up = both[rank][1][rnd]
            for a, want in zip(got, _reference(g, plans[rnd][rank]), strict=True):
                assert_same(a, want)
            assert calls == 1 + 2 * (3 if rnd == 0 else 2) and looked_up == 0
    most = least = 0
    for rnd in range(2):
        for rank in range(2):
            got, remote, calls, _ = res[rank][rnd]
            for a, want in zip(got, _reference(g, plans[rnd][rank]), strict=True):
                assert_same(a, want)
            assert remote == (rnd == 0)
            # 1 agreement (all-reduce); per hop one exchange: requests, replies (3 hops; round
            # 1, all seeds own: hop 1 is local); the lookup of the last hops' remote nodes
            # (ids with their counts, answers); round 0 adds the seed lookup (3: its seeds
            # come untranslated, which no hop bounds)
            hops = 3 if rnd == 0 else 2
            assert calls == 1 + 2 * hops + 2 + (3 if rnd == 0 else 0)
            if rnd == 1:  # hops + 2 exchanges: one all-to-all each way, and the agreement
                assert calls == 2 * (hops + 2) - 1
    for rank in range(2):
        # round 1's lookup carries only the last hop's nodes owned by the other rank, 4 B
        # each way, once per rank however many of its requests reached them, and one 4-B
        # count word: the other frontiers' original ids came back with the hop replies
        leaves = [b["n_id"][sum(b["num_sampled_nodes"][:len(fan)]):]
                  for b, (_, fan, *_r) in zip(res[rank][1][0], plans[1][rank], strict=True)]
        remote = [v[np.searchsorted(bounds[1:-1], o2n[v], side="right") != rank]
                  for v in leaves]
        most += 8 * sum(v.size for v in remote) + 4
        least += 8 * np.unique(np.concatenate(remote)).size + 4
    sent = sum(res[r][1][3] for r in range(2))
    assert least < most and sent == least


def test_a_fanout_of_minus_one_on_one_rank_falls_back_to_size_exchanges(tmp_path):
    g = small_graph()
    d = str(partition(g, 2, "random", tmp_path / "p", seed=5))
    rng = np.random.default_rng(9)
    # rank 0's second request takes every neighbor at hop 2: no reply size is known that hop
    # (nor, for one flag per round, at any hop); rank 1 knows only through the agreement
    one = _plans(rng, lambda rank, j: ([3, -1, 2] if (rank, j) == (0, 1) else FANOUTS,
                                          j == 2))
    everywhere = np.arange(g.num_nodes)
    plans = [[[one(r, j, everywhere, 0) for j in range(3)] for r in range(2)]]
    res = run_ranks(_round, 2, d, plans, timeout=240)
    for rank in range(2):
        got, remote, calls, _ = res[rank][0]
        for a, want in zip(got, _reference(g, plans[0][rank]), strict=True):
            assert_same(a, want)
        assert remote
        # as above, but every reply exchange sends its sizes first: 4 collectives per hop
        assert calls == 1 + 3 * 4 + 3 + 3
