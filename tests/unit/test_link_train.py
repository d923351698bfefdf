"""Pieces of the link job: edge split, AUC, MRR / Hits@K, decoder, config rules."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mnmg_sampler.config import config_from_dict
from mnmg_sampler.errors import ConfigError
from mnmg_sampler.graph.csr import CSRGraph
from mnmg_sampler.train.link import auc, rank_metrics, split_edges, training_graph
from mnmg_sampler.train.model import GraphSAGE, LinkModel


def test_auc_equals_pairwise_probability_with_ties_half():
    rng = np.random.default_rng(0)
    pos = rng.integers(0, 20, 300).astype(np.float64)
    neg = rng.integers(0, 15, 400).astype(np.float64)
    d = pos[:, None] - neg[None, :]
    want = ((d > 0).sum() + 0.5 * (d == 0).sum()) / d.size
    assert auc(pos, neg) == pytest.approx(want, abs=1e-12)
    assert auc(np.array([2.0, 3.0]), np.array([0.0, 1.0])) == 1.0
    assert np.isnan(auc(np.array([]), np.array([1.0])))


def test_rank_metrics():
    pos = torch.tensor([5.0, 1.0, 3.0])
    neg = torch.tensor([[1.0, 2.0, 3.0], [2.0, 3.0, 4.0], [3.0, 4.0, 0.0]])
    rr, hits = rank_metrics(pos, neg, k=2)
    # ranks: 1, 4, 2.5 (one tie counted half)
    assert rr == pytest.approx(1 + 1 / 4 + 1 / 2.5)
    assert hits == 1.0


def test_split_keeps_each_undirected_pair_in_one_split_and_drops_held_out_edges():
    rng = np.random.default_rng(1)
    src, dst = rng.integers(0, 60, 400), rng.integers(0, 60, 400)
    g = CSRGraph.from_edges(src, dst, 60, undirected=True, drop_duplicates=True)
    sp = split_edges(g, [0.7, 0.1, 0.2], seed=3, undirected=True)
    sets = {k: set(map(tuple, sp[k].T.tolist())) for k in ("train", "val", "test")}
    assert not (sets["train"] & sets["val"]) and not (sets["train"] & sets["test"])
    assert all(u < v for s in sets.values() for u, v in s)
    n_pairs = sum(len(s) for s in sets.values())
    assert abs(len(sets["test"]) - 0.2 * n_pairs) <= 1
    tg = training_graph(g, sp, undirected=True)
    dst_of = np.repeat(np.arange(tg.num_nodes), tg.degrees())
    have = set(zip(tg.indices.tolist(), dst_of.tolist(), strict=True))
    for u, v in sets["test"] | sets["val"]:
        assert (u, v) not in have and (v, u) not in have
    for u, v in sets["train"]:
        assert (u, v) in have and (v, u) in have
    again = split_edges(g, [0.7, 0.1, 0.2], seed=3, undirected=True)
    assert np.array_equal(again["test"], sp["test"])


@pytest.mark.parametrize("decoder", ["dot", "mlp"])
def test_link_model_scores_edges(decoder):
    torch.manual_seed(0)
    m = LinkModel(GraphSAGE(4, 8, 8, 2, dropout=0.0, aggr="mean", use_pyg=False), 8, decoder)
    x = torch.randn(5, 4)
    ei = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]])
    h = m(x, ei)
    s = m.score(h, torch.tensor([0, 1]), torch.tensor([2, 3]))
    assert s.shape == (2,)
    if decoder == "dot":
        # the dot product over sqrt(width): logits of order one at any model.hidden
        assert torch.allclose(s, (h[[0, 1]] * h[[2, 3]]).sum(-1) / h.shape[1] ** 0.5)


def test_link_config_rules():
    cfg = config_from_dict({"task": "link"})
    assert cfg.training.target_metric == "val_auc"
    assert config_from_dict({}).training.target_metric == "val_acc"
    with pytest.raises(ConfigError, match="training.target_metric"):
        config_from_dict({"task": "node", "training": {"target_metric": "val_auc"}})
    with pytest.raises(ConfigError, match="training.target_metric"):
        config_from_dict({"task": "link", "training": {"target_metric": "val_acc"}})
    with pytest.raises(ConfigError, match="link.decoder"):
        config_from_dict({"task": "link", "link": {"decoder": "bilinear"}})
