"""One link minibatch in one process: label indices, triplet shapes, exclude_seed_edges."""

from __future__ import annotations

import numpy as np
import pytest

from mnmg_sampler.graph.csr import CSRGraph
from mnmg_sampler.ops.negative import NegativeSampling
from mnmg_sampler.sampling.link import build_link_request, finish_link_batch
from mnmg_sampler.sampling.sampler import MultiHopSampler, local_hop_fn


def _graph():
    rng = np.random.default_rng(8)
    src, dst = rng.integers(0, 80, 700), rng.integers(0, 80, 700)
    return CSRGraph.from_edges(src, dst, 80, undirected=True, drop_duplicates=True)


def _batch(g, neg, exclude, reverse, label=None):
    dst = np.repeat(np.arange(g.num_nodes), g.degrees())
    pick = np.random.default_rng(1).choice(g.num_edges, 40, replace=False)
    eli = np.stack([g.indices[pick], dst[pick]])
    pos = np.arange(5, 35)
    plan = build_link_request(eli, label, pos, g=3, epoch=1, seed=4, num_neighbors=[4, 3],
                              replace=False, num_nodes=g.num_nodes, neg=neg)
    mb = MultiHopSampler(local_hop_fn(g, 4), g.num_nodes).sample([plan.request])[0]
    raw = finish_link_batch(mb, plan)
    out = finish_link_batch(mb, plan, exclude_seed_edges=exclude,
                            exclude_reverse_edges=reverse)
    return eli[:, pos], raw, out


@pytest.mark.parametrize("mode, amount", [("binary", 1), ("binary", 3), ("triplet", 2), (None, 0)])
@pytest.mark.parametrize("reverse", [False, True])
def test_exclusion_removes_exactly_the_seed_edges(mode, amount, reverse):
    g = _graph()
    neg = None if mode is None else NegativeSampling(mode, amount)
    seeds, raw, out = _batch(g, neg, True, reverse)
    P = seeds.shape[1]

    def pairs(b):
        n = b.n_id.numpy()
        ei = b.edge_index.numpy()
        return list(zip(n[ei[0]].tolist(), n[ei[1]].tolist(), strict=True))

    bad = set(zip(seeds[0].tolist(), seeds[1].tolist(), strict=True))
    if reverse:
        bad |= {(d, s) for s, d in bad}
    keep = [i for i, p in enumerate(pairs(raw)) if p not in bad]
    assert len(keep) < len(pairs(raw))  # the batch did contain seed edges
    assert pairs(out) == [pairs(raw)[i] for i in keep]
    assert np.array_equal(out.e_id.numpy(), raw.e_id.numpy()[keep])
    assert sum(out.num_sampled_edges) == out.edge_index.shape[1]
    # the label edges are the seed edges, positives first
    n_id = out.n_id.numpy()
    eli = out.edge_label_index.numpy()
    assert np.array_equal(n_id[eli[:, :P]], seeds)
    if mode == "binary":
        assert eli.shape[1] == P * (1 + amount)
        assert np.array_equal(n_id[eli[0, P:]], np.repeat(seeds[0], amount))
        assert out.edge_label.tolist() == [1.0] * P + [0.0] * (P * amount)
    if mode == "triplet":
        assert out.dst_neg_index.shape == (P, amount)
        assert np.array_equal(out.src_index.numpy(), eli[0, :P])
        assert np.array_equal(out.dst_pos_index.numpy(), eli[1, :P])


def test_edge_labels_are_kept_and_negatives_get_zero():
    g = _graph()
    _, _, out = _batch(g, NegativeSampling("binary", 2), False, False,
                       label=np.arange(40, dtype=np.float32) + 1)
    assert out.edge_label[:30].tolist() == list(range(6, 36))
    assert out.edge_label[30:].tolist() == [0.0] * 60


def test_to_and_to_pyg_keep_the_link_fields():
    g = _graph()
    _, _, out = _batch(g, NegativeSampling("triplet", 2), True, False)
    moved = out.to("cpu")
    assert type(moved).__name__ == "LinkMiniBatch" and moved.equal(out)
    pytest.importorskip("torch_geometric")
    data = out.to_pyg()
    for name in ("edge_label_index", "src_index", "dst_pos_index", "dst_neg_index"):
        assert data[name].equal(getattr(out, name))
    assert data.edge_index.equal(out.edge_index)


def test_exclusion_without_edge_ids():
    g = _graph()
    dst = np.repeat(np.arange(g.num_nodes), g.degrees())
    pick = np.random.default_rng(1).choice(g.num_edges, 40, replace=False)
    eli = np.stack([g.indices[pick], dst[pick]])
    plans = [build_link_request(eli, None, np.arange(40), g=0, epoch=0, seed=4,
                                num_neighbors=[4, 3], replace=False, num_nodes=g.num_nodes,
                                neg=NegativeSampling("binary", 1), edge_ids=e)
             for e in (True, False)]
    s = MultiHopSampler(local_hop_fn(g, 4), g.num_nodes)
    a, b = (finish_link_batch(s.sample([p.request])[0], p,
                              exclude_seed_edges=True) for p in plans)
    assert b.e_id.numel() == 0 and a.e_id.numel() == a.edge_index.shape[1]
    assert a.edge_index.equal(b.edge_index) and a.num_sampled_edges == b.num_sampled_edges


@pytest.mark.parametrize("mode", [None, "triplet"])
def test_one_type_relation_is_the_homogeneous_link_batch(mode):
    """One link module: the relation of a one-type typed graph gives the homogeneous batch
    (``to_homogeneous``), seed edges and reverses excluded; binary negatives are left out
    since a typed relation's draw their sources too (PyG's rule), a CSR's keep the positive's."""
    from mnmg_sampler.graph.typed import typed_graph
    from mnmg_sampler.sampling.sampler import HeteroSampler

    rng = np.random.default_rng(8)
    src, dst = rng.integers(0, 80, 700), rng.integers(0, 80, 700)
    g = CSRGraph.from_edges(src, dst, 80)
    et = ("node", "to", "node")
    tg = typed_graph({"num_nodes": {"node": 80}, "edge_index": {et: np.stack([src, dst])}})
    eli = np.stack([src, dst])[:, np.random.default_rng(1).choice(700, 40, replace=False)]
    neg = None if mode is None else NegativeSampling(mode, 2)
    kw = dict(g=3, epoch=1, seed=4, num_neighbors=[-1, 3], replace=False, neg=neg)
    plan = build_link_request(eli, None, np.arange(5, 35), num_nodes=80, **kw)
    mb = MultiHopSampler(local_hop_fn(g, 4), 80).sample([plan.request])[0]
    want = finish_link_batch(mb, plan, exclude_seed_edges=True, exclude_reverse_edges=True)
    plan = build_link_request(eli, None, np.arange(5, 35), num_nodes=(80, 80), edge_type=et,
                              **kw)
    mb = HeteroSampler(tg, 4).sample([plan.request])[0]
    got = finish_link_batch(mb, plan, exclude_seed_edges=True, reverse_edge_type=et)
    assert got.typed and got.edge_type == et
    flat = got.to_homogeneous()
    assert flat.edge_type is None and want.e_id.numel() > 0
    assert want.num_sampled_edges[0] < mb.num_sampled_edges[et][0]  # some were excluded
    assert flat.equal(want)
