"""Host groups on real gloo ranks, hosts forced with ``MNMG_HOST_ID``: minibatches and features
equal the single process for any host layout and host cache size; a rank never sends a node or
a feature row to a rank of its own host; the host cache takes feature rows off the wire."""

from __future__ import annotations

import numpy as np
import pytest

from mnmg_sampler.graph.partition import partition
from mnmg_sampler.graph.partition_io import load_partition
from mnmg_sampler.ops.rng import request_key
from mnmg_sampler.sampler import MultiHopSampler, SampleRequest, local_hop_fn

from .common import FANOUTS, SEED, as_arrays, assert_same, small_graph
from .harness import run_ranks

CACHE = 40  # rows of other hosts each host keeps (of 240 nodes)


def _rounds(rank: int, n: int) -> list[list[SampleRequest]]:
    """Merged requests with seeds anywhere; one with replacement and all neighbors (-1)."""
    rng = np.random.default_rng([rank, 11])
    merged = [SampleRequest(rng.choice(n, 12, replace=False), FANOUTS,
                            request_key(SEED, 0, 10 * rank + j)) for j in range(3)]
    mixed = [SampleRequest(rng.choice(n, 6, replace=False), [3, -1, 2],
                           request_key(SEED, 2, rank), replace=True)]
    return [merged, mixed]


def _hosts(rank, world, d, layout):
    """The same rounds with a store without and with the host cache: batches, the feature
    bytes sent to other hosts, and the ids and rows sent to ranks of this rank's host."""
    import os

    from mnmg_sampler.distributed.features import DistFeatureStore
    from mnmg_sampler.distributed.sampler import DistSampler

    os.environ["MNMG_HOST_ID"] = f"host-{layout[rank]}"
    part = load_partition(d, rank, world)
    s = DistSampler(part, seed=SEED, shared_topology="auto")
    same = [p for p in range(world) if layout[p] == layout[rank] and p != rank]
    near_rows = []
    real = s.ex.payload

    def payload(t, send_counts, recv_counts, tag="data"):
        if tag in ("ids", "features"):
            near_rows.append(sum(int(send_counts[p]) for p in same))
        return real(t, send_counts, recv_counts, tag)

    s.ex.payload = payload
    res = {}
    for cache in (0, CACHE):
        store = DistFeatureStore(part, s.ex, cache_rows=cache, host=s.host)
        f0 = s.ex.cross_bytes.get("features", 0)
        got = []
        for reqs in _rounds(rank, int(part.num_nodes)):
            for r, b in zip(reqs, s.sample(reqs, store), strict=True):
                got.append(((r.seeds, list(r.fanouts), r.key, r.replace), as_arrays(b)))
        res[cache] = (got, s.ex.cross_bytes.get("features", 0) - f0, store.cache_size,
                      store.stats["mapped_rows"])
    host = None if s.host is None else s.host.stats()
    return res, near_rows, host, s.ex.far.tolist()


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


@pytest.mark.parametrize("layout", [
    (0, 1),  # 2 hosts x 1 rank: the wire path, a host cache per rank
    (0, 0, 1),  # hosts of 2 and 1 ranks
    pytest.param((0, 0, 1, 1), marks=pytest.mark.slow),  # 2 hosts x 2 ranks
])
def test_host_layouts_equal_one_process(tmp_path, layout):
    g = small_graph()
    W = len(layout)
    d = str(partition(g, W, "random", tmp_path / "p", seed=1))
    out = run_ranks(_hosts, W, d, layout, timeout=240)
    cross = {0: 0, CACHE: 0}
    for rank, (res, near_rows, host, far) in enumerate(out):
        assert far == [layout[p] != layout[rank] for p in range(W)]
        # a host group on every rank once some host has two ranks, else the wire path
        assert (host is not None) == (max(layout.count(h) for h in layout) > 1)
        if host is not None:
            assert host["host_ranks"] == [p for p in range(W) if layout[p] == layout[rank]]
        # nothing of this host's ranks ever goes to them: every hop and row exchange sends
        # only to other hosts' ranks
        assert near_rows and sum(near_rows) == 0
        for cache, (got, fbytes, size, mapped) in res.items():
            assert _check(g, got) > 0
            assert size == (CACHE if cache else 0)  # the host's slices together
            assert (mapped > 0) == (layout.count(layout[rank]) > 1)
            cross[cache] += fbytes
        for (_, a), (_, b) in zip(res[0][0], res[CACHE][0], strict=True):
            assert_same(a, b, keys=("n_id", "x", "y", "edge_index"))
    assert 0 < cross[CACHE] < cross[0]  # the host cache takes rows off the wire
