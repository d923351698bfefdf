"""Multi-hop sampling in one process: PyG NeighborLoader invariants, determinism, merging."""

from __future__ import annotations

import numba
import numpy as np
import pytest
import torch

from mnmg_sampler.errors import MnmgError, SamplingInputError
from mnmg_sampler.graph.csr import CSRGraph
from mnmg_sampler.ops import rng
from mnmg_sampler.sampling.sampler import (
    MultiHopSampler,
    SampleRequest,
    check_fanouts,
    local_hop_fn,
    sample,
)


def _graph(n=300, m=4000, seed=0, **kw) -> CSRGraph:
    g = np.random.default_rng(seed)
    return CSRGraph.from_edges(g.integers(0, n, m), g.integers(0, n, m), n, **kw)


def _seeds(g: CSRGraph, k: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).permutation(g.num_nodes)[:k]


def _edge_list(g: CSRGraph) -> tuple[np.ndarray, np.ndarray]:
    """The processed input edge list ``(src, dst)`` indexed by edge id."""
    inv = np.argsort(g.edge_ids)
    return g.indices[inv], np.repeat(np.arange(g.num_nodes), g.degrees())[inv]


def check_invariants(g: CSRGraph, b, seeds, fanouts, replace=False) -> None:
    """Every PyG NeighborLoader invariant we promise, checked against the CSR."""
    n_id, ei, e_id = b.n_id.numpy(), b.edge_index.numpy(), b.e_id.numpy()
    seeds = np.asarray(seeds)
    assert b.n_id.dtype == b.edge_index.dtype == b.e_id.dtype == torch.int64
    assert b.batch_size == seeds.size
    np.testing.assert_array_equal(n_id[: b.batch_size], seeds)
    assert np.unique(n_id).size == n_id.size
    assert ei.shape == (2, e_id.size)
    if ei.size:
        assert ei.min() >= 0 and ei.max() < n_id.size
    assert sum(b.num_sampled_nodes) == n_id.size
    assert sum(b.num_sampled_edges) == e_id.size
    assert len(b.num_sampled_edges) == len(fanouts)
    # every sampled edge exists: n_id[row] -> n_id[col] is input edge e_id
    src, dst = _edge_list(g)
    np.testing.assert_array_equal(src[e_id], n_id[ei[0]])
    np.testing.assert_array_equal(dst[e_id], n_id[ei[1]])
    # hop h samples for exactly the nodes first reached in hop h-1, each once, in n_id order
    node_off = np.cumsum([0, *b.num_sampled_nodes])
    edge_off = np.cumsum([0, *b.num_sampled_edges])
    deg = g.degrees()
    for h, f in enumerate(fanouts):
        cols = ei[1, edge_off[h]:edge_off[h + 1]]
        front = np.arange(node_off[h], node_off[h + 1])
        cnt = np.bincount(cols - node_off[h], minlength=front.size) if cols.size else \
            np.zeros(front.size, np.int64)
        assert cnt.size == front.size
        if cols.size:
            assert (np.diff(cols) >= 0).all() and cols.min() >= node_off[h] and \
                cols.max() < node_off[h + 1]
        d = deg[n_id[front]]
        expect = d if f < 0 else (np.where(d > 0, f, 0) if replace else np.minimum(d, f))
        np.testing.assert_array_equal(cnt, expect)
        # newly reached nodes of hop h+1 are exactly the neighbors not seen before
        rows = ei[0, edge_off[h]:edge_off[h + 1]]
        new = np.arange(node_off[h + 1], node_off[h + 2])
        assert set(rows[rows >= node_off[h + 1]].tolist()) == set(new.tolist())
        if not replace:  # no neighbor position repeated for one node
            pairs = np.stack([cols, e_id[edge_off[h]:edge_off[h + 1]]])
            assert np.unique(pairs, axis=1).shape[1] == cols.size


@pytest.mark.parametrize("fanouts", [[5], [15, 10, 5], [3, -1], [-1, 2, 2]])
@pytest.mark.parametrize("replace", [False, True])
def test_invariants(fanouts, replace):
    g = _graph(seed=1)
    seeds = _seeds(g, 40)
    b = sample(g, seeds, fanouts, seed=3, key=rng.request_key(3, 0, 0), replace=replace)
    check_invariants(g, b, seeds, fanouts, replace)
    np.testing.assert_array_equal(b.input_id.numpy(), np.arange(40))
    assert b.key == rng.request_key(3, 0, 0)


def test_invariants_undirected_with_isolated_nodes():
    g = CSRGraph.from_edges(np.array([0, 1, 2, 5]), np.array([1, 2, 3, 6]), 10, undirected=True)
    seeds = np.array([9, 1, 4, 0])  # 9 and 4 are isolated
    b = sample(g, seeds, [2, 2], key=1)
    check_invariants(g, b, seeds, [2, 2])
    assert b.num_sampled_edges[0] == 2 + 1  # node 1 has 2 neighbors, node 0 has 1


def test_all_isolated_seeds():
    g = CSRGraph.from_edges(np.array([0]), np.array([1]), 5)
    b = sample(g, np.array([2, 3]), [4, 4])
    np.testing.assert_array_equal(b.n_id.numpy(), [2, 3])
    assert b.edge_index.shape == (2, 0)
    assert b.num_sampled_nodes == [2, 0, 0] and b.num_sampled_edges == [0, 0]


def test_full_neighborhood_matches_bfs():
    g = _graph(n=60, m=200, seed=2)
    seeds = np.array([0, 5, 7])
    b = sample(g, seeds, [-1, -1])
    reach = set(seeds.tolist())
    frontier = set(reach)
    for _ in range(2):
        nxt = set()
        for v in frontier:
            nxt |= set(g.indices[g.indptr[v]:g.indptr[v + 1]].tolist())
        frontier = nxt - reach
        reach |= nxt
    assert set(b.n_id.tolist()) == reach


def test_same_key_identical_different_keys_differ():
    g = _graph(seed=4)
    seeds = _seeds(g, 50)
    a = sample(g, seeds, [10, 5], key=rng.request_key(0, 0, 0))
    b = sample(g, seeds, [10, 5], key=rng.request_key(0, 0, 0))
    assert a.equal(b)
    c = sample(g, seeds, [10, 5], key=rng.request_key(0, 0, 1))
    assert not a.equal(c)
    np.testing.assert_array_equal(a.n_id[:50], c.n_id[:50])
    d = sample(g, seeds, [10, 5], seed=1, key=rng.request_key(0, 0, 0))
    assert not a.equal(d)


def test_merged_requests_equal_separate_bit_for_bit():
    g = _graph(n=500, m=8000, seed=5)
    perm = np.random.default_rng(9).permutation(500)
    reqs = [
        SampleRequest(perm[:64], [10, 5], rng.request_key(7, 0, 0)),
        SampleRequest(perm[64:100], [10, 5], rng.request_key(7, 0, 1)),
        SampleRequest(perm[32:96], [3], rng.request_key(7, 1, 0)),  # overlaps, other hop count
        SampleRequest(perm[200:210], [-1, 4, 2], rng.request_key(7, 0, 2), replace=True),
        SampleRequest(perm[:64], [10, 5], rng.request_key(7, 0, 0)),  # exact duplicate
        SampleRequest(np.empty(0, np.int64), [5, 5], 12),
    ]
    merged_sampler = MultiHopSampler(local_hop_fn(g, 7), g.num_nodes)
    merged = merged_sampler.sample(reqs)
    assert merged_sampler.hop_calls == 3  # one kernel call per hop for all requests
    for r, m in zip(reqs, merged, strict=True):
        alone = MultiHopSampler(local_hop_fn(g, 7), g.num_nodes).sample([r])[0]
        assert m.equal(alone)
        check_invariants(g, m, r.seeds, r.fanouts, r.replace)
    assert merged[0].equal(merged[4])
    # order of requests in the merge does not matter either
    rev = MultiHopSampler(local_hop_fn(g, 7), g.num_nodes).sample(reqs[::-1])[::-1]
    assert all(a.equal(b) for a, b in zip(merged, rev, strict=True))


def test_thread_count_invariance():
    g = _graph(n=3000, m=60_000, seed=6)
    seeds = _seeds(g, 512)
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = sample(g, seeds, [15, 10, 5], key=42)
        numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
        two = sample(g, seeds, [15, 10, 5], key=42)
    finally:
        numba.set_num_threads(before)
    assert one.equal(two)


def test_seed_tensor_input_and_input_id():
    g = _graph(seed=7)
    seeds = torch.tensor([3, 1, 4, 15, 9])
    r = SampleRequest(seeds, [2], 0, input_id=np.array([10, 11, 12, 13, 14]))
    b = MultiHopSampler(local_hop_fn(g, 0), g.num_nodes).sample([r])[0]
    np.testing.assert_array_equal(b.n_id[:5].numpy(), seeds.numpy())
    np.testing.assert_array_equal(b.input_id.numpy(), [10, 11, 12, 13, 14])


# --- typed errors for bad input -------------------------------------------------------------


@pytest.mark.parametrize("seeds", [[0, 300], [-1, 2], [299, 1000], [-5]])
def test_out_of_range_and_negative_seeds(seeds):
    g = _graph(n=300)
    with pytest.raises(SamplingInputError, match="out of range") as ei:
        sample(g, np.array(seeds), [5])
    assert isinstance(ei.value, MnmgError) and isinstance(ei.value, ValueError)
    assert "Fix:" in str(ei.value)


def test_bad_seed_in_one_merged_request_fails_before_sampling():
    g = _graph(n=300)
    s = MultiHopSampler(local_hop_fn(g, 0), g.num_nodes)
    with pytest.raises(SamplingInputError):
        s.sample([SampleRequest([1, 2], [3], 0), SampleRequest([400], [3], 1)])
    assert s.hop_calls == 0


@pytest.mark.parametrize("fanouts", [[], [-2], [1.5], ["a"], None, [3, -7]])
def test_bad_fanouts(fanouts):
    with pytest.raises(SamplingInputError, match="fanouts"):
        check_fanouts(fanouts)
    g = _graph(n=300)
    with pytest.raises(SamplingInputError):
        sample(g, np.array([1, 2]), fanouts)


@pytest.mark.parametrize("replace", [False, True])
def test_fanout_zero_samples_nothing_at_that_hop(replace):
    # PyG's NeighborLoader: num_neighbors 0 at a hop samples no edge there (and so nothing
    # after it); hops before it are unchanged.
    g = _graph(n=300)
    seeds = _seeds(g, 16)
    full = sample(g, seeds, [5, 3], key=7, replace=replace)
    zero = sample(g, seeds, [5, 0], key=7, replace=replace)
    assert zero.num_sampled_edges == [full.num_sampled_edges[0], 0]
    assert zero.num_sampled_nodes == full.num_sampled_nodes[:2] + [0]
    assert torch.equal(zero.n_id, full.n_id[: sum(full.num_sampled_nodes[:2])])
    assert torch.equal(zero.edge_index, full.edge_index[:, : full.num_sampled_edges[0]])
    first = sample(g, seeds, [0, 4], key=7, replace=replace)
    assert first.num_sampled_edges == [0, 0] and first.n_id.numel() == seeds.size


def test_duplicate_seeds_and_negative_key():
    g = _graph(n=300)
    with pytest.raises(SamplingInputError, match="duplicate"):
        sample(g, np.array([1, 2, 1]), [3])
    with pytest.raises(SamplingInputError, match="negative"):
        sample(g, np.array([1, 2]), [3], key=-1)


def test_fanouts_are_normalised():
    assert check_fanouts((15, 10.0, -1)) == [15, 10, -1]
    assert check_fanouts(np.array([3, 2])) == [3, 2]
