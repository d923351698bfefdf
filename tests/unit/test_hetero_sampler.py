"""Hetero sampling in one process: PyG's hetero invariants, per-relation fanouts, one kernel call
per hop for any number of relations and requests, and ``to_pyg()`` laid out as PyG's loader."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mnmg_sampler.errors import SamplingInputError
from mnmg_sampler.graph.typed import typed_graph
from mnmg_sampler.ops import typed as typed_ops
from mnmg_sampler.sampling.sampler import (
    HeteroSampler,
    HeteroSampleRequest,
    fanout_table,
    sample_hetero,
)

from ..typed_graphs import hetero_data, take_all

COUNTS = {"paper": 120, "author": 80, "field": 10}
RELS = [("author", "writes", "paper"), ("paper", "rev_writes", "author"),
        ("paper", "cites", "paper"), ("field", "topic_of", "paper"),
        ("paper", "has_topic", "field")]


def _spec(seed=0):
    g = np.random.default_rng(seed)
    ei = {}
    for s, r, d in RELS:
        m = 4 * COUNTS[d]
        ei[(s, r, d)] = np.stack([g.integers(0, COUNTS[s], m), g.integers(0, COUNTS[d], m)])
    return {"num_nodes": dict(COUNTS), "edge_index": ei,
            "x": {"paper": g.random((120, 6), dtype=np.float32),
                  "author": g.random((80, 3)).astype(np.float64)},
            "y": {"paper": g.integers(0, 4, 120)}}


@pytest.fixture(scope="module")
def graph():
    return typed_graph(_spec())


def check_invariants(g, spec, b, input_type, seeds, table, replace=False):
    """PyG's hetero NeighborLoader invariants, checked against the input edge lists."""
    assert b.batch_size == len(seeds) and b.input_type == input_type
    np.testing.assert_array_equal(b.n_id[input_type][:b.batch_size].numpy(), seeds)
    H = table.shape[0]
    node_off = {}
    for t, nid in b.n_id.items():
        assert nid.dtype == torch.int64
        assert np.unique(nid.numpy()).size == nid.numel()
        assert sum(b.num_sampled_nodes[t]) == nid.numel()
        assert len(b.num_sampled_nodes[t]) == H + 1
        node_off[t] = np.cumsum([0, *b.num_sampled_nodes[t]])
        if t in spec["x"]:
            np.testing.assert_array_equal(b.x[t].numpy(), spec["x"][t][nid.numpy()])
    for r, et in enumerate(g.edge_types):
        s, _, d = et
        ei, e = b.edge_index[et].numpy(), b.e_id[et].numpy()
        assert ei.dtype == e.dtype == np.int64 and ei.shape == (2, e.size)
        assert sum(b.num_sampled_edges[et]) == e.size
        src, dst = spec["edge_index"][et]
        # every sampled edge exists in its relation: row indexes n_id[src], col n_id[dst]
        np.testing.assert_array_equal(src[e], b.n_id[s].numpy()[ei[0]])
        np.testing.assert_array_equal(dst[e], b.n_id[d].numpy()[ei[1]])
        e_off = np.cumsum([0, *b.num_sampled_edges[et]])
        deg = np.bincount(dst, minlength=COUNTS[d])
        for h in range(H):
            k = table[h, r]
            cols = ei[1, e_off[h]:e_off[h + 1]]
            front = np.arange(node_off[d][h], node_off[d][h + 1])
            cnt = np.bincount(cols - node_off[d][h], minlength=front.size) if cols.size else \
                np.zeros(front.size, np.int64)
            assert cnt.size == front.size  # only frontier nodes of hop h sample in hop h
            dv = deg[b.n_id[d].numpy()[front]]
            expect = dv if k < 0 else (np.where(dv > 0, k, 0) if replace else np.minimum(dv, k))
            np.testing.assert_array_equal(cnt, expect)
            if not replace:  # distinct neighbors (edge ids) per frontier node
                pairs = np.stack([cols, e[e_off[h]:e_off[h + 1]]])
                assert np.unique(pairs, axis=1).shape[1] == cols.size


@pytest.mark.parametrize("num_neighbors, replace", [
    ([3, 2], False), ([4, 2], True), ([-1, 1], False),
    ({("author", "writes", "paper"): [2, 1], ("paper", "rev_writes", "author"): [3, 0],
      "paper__cites__paper": [-1, 2], ("field", "topic_of", "paper"): [0, 5],
      ("paper", "has_topic", "field"): [1, 1]}, False),
])
def test_invariants(graph, num_neighbors, replace):
    spec = _spec()
    seeds = np.random.default_rng(3).permutation(120)[:16]
    b = sample_hetero(graph, ("paper", seeds), num_neighbors, seed=5, key=9, replace=replace)
    table = fanout_table(graph, num_neighbors)
    assert sum(v.shape[1] for v in b.edge_index.values()) > 0
    check_invariants(graph, spec, b, "paper", seeds, table, replace)


def test_one_kernel_call_per_hop_and_merged_equals_alone(graph, monkeypatch):
    calls = []
    real = typed_ops.sample_typed_neighbors

    def counted(*a, **kw):
        calls.append(a[1].size)
        return real(*a, **kw)

    monkeypatch.setattr(typed_ops, "sample_typed_neighbors", counted)
    reqs = [HeteroSampleRequest("paper", np.arange(10), [3, 2, 2], key=1),
            HeteroSampleRequest("author", np.arange(5, 12), [2, 2], key=2),
            HeteroSampleRequest("field", np.arange(3), {et: [1, 1, 1] for et in RELS}, key=3,
                                replace=True)]
    s = HeteroSampler(graph, seed=11)
    merged = s.sample(reqs)
    assert len(calls) == s.kernel_calls == 3  # 3 hops, 5 relations, 3 requests: 3 calls
    for r, m in zip(reqs, merged, strict=True):
        alone = HeteroSampler(graph, seed=11).sample([r])[0]
        assert m.equal(alone)
    again = HeteroSampler(graph, seed=12).sample(reqs[:1])[0]
    assert not again.equal(merged[0])  # the seed matters: the comparison can fail


def test_num_neighbors_errors(graph):
    full = {et: [2] for et in RELS}
    with pytest.raises(SamplingInputError, match="no fanouts for"):
        fanout_table(graph, {et: [2] for et in RELS[1:]})
    with pytest.raises(SamplingInputError, match="not a relation of the graph"):
        fanout_table(graph, {**full, ("paper", "writes", "author"): [1]})
    with pytest.raises(SamplingInputError, match="hops"):
        fanout_table(graph, {**full, RELS[0]: [1, 1]})
    with pytest.raises(SamplingInputError, match="invalid fanouts"):
        fanout_table(graph, [2, -3])
    with pytest.raises(SamplingInputError, match="out of range"):
        sample_hetero(graph, ("author", [80]), [1])
    with pytest.raises(SamplingInputError, match="not in graph"):
        sample_hetero(graph, ("venue", [0]), [1])
    with pytest.raises(SamplingInputError, match="duplicate"):
        sample_hetero(graph, ("paper", [1, 1]), [1])


# --- PyG's own loader around a reference sampler: the layout PyG's hetero NeighborLoader gives ---

pyg = pytest.importorskip("torch_geometric")


def _full_sampler(data, hops):
    """A BaseSampler taking every neighbor for ``hops`` hops (:func:`take_all`)."""
    from torch_geometric.sampler import BaseSampler

    class Full(BaseSampler):
        def sample_from_edges(self, inputs, neg_sampling=None):
            raise NotImplementedError

        def sample_from_nodes(self, inputs, **kw):
            out = take_all(data, {inputs.input_type: inputs.node}, hops)
            out.metadata = (inputs.input_id, inputs.time)
            return out

    return Full()


def _attrs(store):
    return {k: (v.dtype if torch.is_tensor(v) else type(v)) for k, v in store.items()}


def _edges(b, et):
    """The sampled edges of ``et`` as (source id, destination id, edge id) triples."""
    s, _, d = et
    ei, e = b[et].edge_index, b[et].e_id
    return set(zip(b[s].n_id[ei[0]].tolist(), b[d].n_id[ei[1]].tolist(), e.tolist(),
                   strict=True))


def test_to_pyg_matches_pyg_loader_layout(graph):
    from torch_geometric.loader import NodeLoader

    spec = _spec()
    data = hetero_data(spec)
    seeds = torch.tensor([5, 17, 40])
    loader = NodeLoader(data, node_sampler=_full_sampler(data, 2),
                        input_nodes=("paper", seeds), batch_size=3)
    ref = next(iter(loader))
    ours = sample_hetero(graph, ("paper", seeds), [-1, -1]).to_pyg()
    assert sorted(ours.node_types) == sorted(ref.node_types)
    assert sorted(ours.edge_types) == sorted(ref.edge_types)
    for t in ref.node_types:
        assert _attrs(ours[t]) == _attrs(ref[t]), t
        assert set(ours[t].n_id.tolist()) == set(ref[t].n_id.tolist())
        assert ours[t].num_sampled_nodes == ref[t].num_sampled_nodes
        assert ours[t].num_nodes == ref[t].num_nodes
    for et in ref.edge_types:
        assert _attrs(ours[et]) == _attrs(ref[et]), et
        assert _edges(ours, et) == _edges(ref, et)
        assert len(_edges(ref, et)) == ref[et].e_id.numel()
        assert ours[et].num_sampled_edges == ref[et].num_sampled_edges
    assert ours["paper"].batch_size == ref["paper"].batch_size == 3
    assert torch.equal(ours["paper"].n_id[:3], seeds) and torch.equal(ref["paper"].n_id[:3], seeds)
    assert torch.equal(ours["paper"].input_id, ref["paper"].input_id)


def test_to_hetero_graphsage_runs_on_to_pyg(graph):
    from torch_geometric.nn import GraphSAGE, to_hetero

    b = sample_hetero(graph, ("paper", np.arange(8)), [4, 3], seed=1).to_pyg()
    # PyG's model needs features on every node type; "field" has none: give it an embedding
    b["field"].x = torch.zeros(b["field"].num_nodes, 2)
    for t in b.node_types:
        b[t].x = b[t].x.float()
    model = to_hetero(GraphSAGE((-1, -1), 16, num_layers=2, out_channels=4), b.metadata(),
                      aggr="sum")
    out = model(b.x_dict, b.edge_index_dict)
    assert out["paper"].shape == (b["paper"].num_nodes, 4)
    assert torch.isfinite(out["paper"][:b["paper"].batch_size]).all()
