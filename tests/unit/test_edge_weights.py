"""sampler.weights: input-edge weights mapped to CSR entries; stored (checksummed) in partitions."""

from __future__ import annotations

import numpy as np
import pytest

from mnmg_sampler.errors import GraphFormatError
from mnmg_sampler.graph.csr import CSRGraph
from mnmg_sampler.graph.weights import input_edge_weights, map_pair_weights, resolve_edge_weights


def _input():
    # edge 3 duplicates edge 0 (dropped), edge 4 is the reverse of edge 1 (kept, own weight)
    src = np.array([0, 1, 2, 0, 2, 3])
    dst = np.array([1, 2, 3, 1, 1, 3])
    w = np.array([1.0, 2.0, 3.0, 9.0, 5.0, 7.0], np.float32)
    return src, dst, w


def test_pair_mapping_follows_dedup_and_reverses():
    src, dst, w = _input()
    g = CSRGraph.from_edges(src, dst, 4, undirected=True, drop_duplicates=True)
    got = map_pair_weights(src, dst, w, g)
    rows = np.repeat(np.arange(4), g.degrees())
    want = {(0, 1): 1.0, (1, 0): 1.0, (1, 2): 2.0, (2, 1): 5.0, (2, 3): 3.0, (3, 2): 3.0,
            (3, 3): 7.0}
    for s, d, x in zip(g.indices.tolist(), rows.tolist(), got.tolist(), strict=True):
        assert want[(s, d)] == x, (s, d)


def test_unknown_pair_is_a_typed_error():
    src, dst, w = _input()
    g = CSRGraph.from_edges(np.array([0]), np.array([3]), 4)
    with pytest.raises(GraphFormatError, match="not among the input edges"):
        map_pair_weights(src, dst, w, g)


def test_cora_column_and_npy_file(tmp_path):
    from mnmg_sampler.graph.datasets import load_graph

    g = load_graph("cora", drop_duplicates=True)
    w = resolve_edge_weights("adj_data", "cora", g)
    assert w.shape == (g.num_edges,) and np.all(w == 1.0)
    raw = load_graph("cora", undirected=False)
    ramp = np.arange(raw.num_edges, dtype=np.float32)
    np.save(tmp_path / "w.npy", ramp)
    w2 = resolve_edge_weights(str(tmp_path / "w.npy"), "cora", g)
    # an entry u -> v that is an input edge gets that edge's value (first occurrence)
    rows = np.repeat(np.arange(raw.num_nodes), raw.degrees())
    first = {}
    for e, s, d in zip(raw.edge_ids.tolist(), raw.indices.tolist(), rows.tolist(), strict=True):
        first[(s, d)] = min(first.get((s, d), e), e)
    grows = np.repeat(np.arange(g.num_nodes), g.degrees())
    for s, d, x in zip(g.indices.tolist()[:500], grows.tolist()[:500], w2.tolist()[:500],
                       strict=True):
        assert x == first.get((s, d), first.get((d, s)))
    with pytest.raises(GraphFormatError, match="has no array"):
        input_edge_weights("nope", "cora", raw.num_edges)
    np.save(tmp_path / "short.npy", ramp[:10])
    with pytest.raises(GraphFormatError, match="input edges"):
        input_edge_weights(str(tmp_path / "short.npy"), "cora", raw.num_edges)
