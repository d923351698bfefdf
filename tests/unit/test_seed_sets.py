"""Seed sets (``mnmg_sampler.loaders.seeds``): a random split of all nodes held as a few integers,
read
position by position, and what a loader accepts as ``input_nodes``."""

from __future__ import annotations

import numpy as np
import pytest

from mnmg_sampler.errors import SamplingInputError
from mnmg_sampler.loaders.seeds import AllNodes, NodeIds, NodeSplit, as_seed_set, random_node_split


@pytest.mark.parametrize("n", [0, 1, 7, 100, 1001])
def test_random_split_is_disjoint_covers_and_reads_back(n):
    splits = random_node_split(n, [0.6, 0.2, 0.2], seed=3)
    ids = {k: s.ids(np.arange(len(s))) for k, s in splits.items()}
    assert [len(s) for s in splits.values()] == [round(0.6 * n), round(0.8 * n) - round(0.6 * n),
                                                 n - round(0.8 * n)]
    every = np.concatenate(list(ids.values()))
    assert np.array_equal(np.sort(every), np.arange(n))  # disjoint, and together every node
    for k, s in splits.items():
        assert np.array_equal(s.positions_of(ids[k]), np.arange(len(s)))
        assert s.contains(np.arange(n)).sum() == len(s)
        assert (s.positions_of(np.array([-1, n])) == -1).all()  # not nodes: not members
    if n > 10:  # another seed, another split
        other = random_node_split(n, [0.6, 0.2, 0.2], seed=4)["train"]
        assert not np.array_equal(np.sort(other.ids(np.arange(len(other)))),
                                  np.sort(ids["train"]))


def test_fingerprints_tell_seed_sets_apart():
    fps = [AllNodes(10).fingerprint(), AllNodes(11).fingerprint(),
           NodeSplit(10, 1, 0, 5).fingerprint(), NodeSplit(10, 2, 0, 5).fingerprint(),
           NodeSplit(10, 1, 0, 6).fingerprint(), NodeIds(np.arange(10), 10).fingerprint()]
    assert len({tuple(f) for f in fps}) == len(fps)


def test_as_seed_set():
    assert isinstance(as_seed_set(None, 5), AllNodes) and len(as_seed_set(None, 5)) == 5
    ids = as_seed_set(np.array([4, 1]), 5)
    assert isinstance(ids, NodeIds) and ids.ids(np.array([1, 0])).tolist() == [1, 4]
    assert ids.positions_of(np.array([1, 2, 4])).tolist() == [1, -1, 0]
    mask = as_seed_set(np.array([False, True, True, False, False]), 5)
    assert mask.ids(np.arange(2)).tolist() == [1, 2]
    s = NodeSplit(5, 0, 1, 3)
    assert as_seed_set(s, 5) is s
    with pytest.raises(SamplingInputError, match="made for 5 nodes, but the graph has 6"):
        as_seed_set(s, 6)
    with pytest.raises(SamplingInputError, match="not within"):
        NodeSplit(5, 0, 3, 6)


@pytest.mark.parametrize("n", [1, 63, 64, 65, 1000, (1 << 16) + 77])
@pytest.mark.parametrize("density", [0.2, 1.0, 3.0])
def test_node_bits_read_the_nodes_with_a_neighbor(n, density):
    # sample's seeds as a bitmap: position i is the i-th node with a neighbor, and back
    from mnmg_sampler.graph.csr import CSRGraph
    from mnmg_sampler.graph.datasets import nonisolated_nodes
    from mnmg_sampler.loaders.seeds import NodeBits

    rng = np.random.default_rng(n)
    m = max(1, int(n * density))
    g = CSRGraph.from_edges(rng.integers(0, n, m), rng.integers(0, n, m), n)
    bits, want = NodeBits.nonisolated(g), nonisolated_nodes(g)
    assert len(bits) == want.size and bits.words.nbytes == 8 * -(-n // 64)
    pos = rng.permutation(want.size)
    assert np.array_equal(bits.ids(pos), want[pos])
    expect = np.full(n + 2, -1)
    expect[want] = np.arange(want.size)
    assert np.array_equal(bits.positions_of(np.arange(-1, n + 1)), np.r_[-1, expect[:n], -1])
