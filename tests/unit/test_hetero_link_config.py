"""The typed link job's config checks, generated user-item graph and edge split (no ranks)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mnmg_sampler.config import load_config, parse_dataset_name
from mnmg_sampler.errors import ConfigError
from mnmg_sampler.graph.link_split import (
    relation_edge_index,
    split_relation,
    typed_training_graph,
)
from mnmg_sampler.graph.typed_generate import typed_useritem_graph
from mnmg_sampler.train.checks import check_homogeneous_job, check_typed_job, link_edge_type
from mnmg_sampler.train.setup import typed_meta

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs" / "hetero_link.yaml"
RATES = ("user", "rates", "item")
REV = ("item", "rev_rates", "user")


def _check(*overrides: str) -> str:
    cfg = load_config(CONFIG, list(overrides))
    return check_typed_job(cfg, typed_meta(cfg))


def test_shipped_config_predicts_rates():
    cfg = load_config(CONFIG)
    assert _check() == "user"
    assert link_edge_type(cfg, typed_meta(cfg)) == RATES
    # null: the only relation besides its rev_ reverse
    assert link_edge_type(load_config(CONFIG, ["link.edge_type=null"]), typed_meta(cfg)) == RATES


@pytest.mark.parametrize("override,text", [
    ("link.edge_type=[user, rate, item]",
     r"^link.edge_type: \[user, rate, item\] is not a relation of the graph \(did you mean "
     r"\[user, rates, item\]\?\)"),
    ("link.edge_type=[item, rates, user]", "^link.edge_type: .* not a relation"),
    ("training.mode=sample", "^training.mode: sample with task link"),
    ("sampler.input_type=user", "^sampler.input_type: set with task link"),
    ("sampler.fanouts={user__rates__item: [2, 2]}",
     "^sampler.fanouts: no fanouts for relations item__rev_rates__user"),
])
def test_bad_link_keys_name_the_key(override, text):
    with pytest.raises(ConfigError, match=text):
        _check(override)


def test_edge_type_is_a_list_of_three_names():
    with pytest.raises(ConfigError, match="^link.edge_type: expected a list of 3 names"):
        load_config(CONFIG, ["link.edge_type=[user, rates]"])


def test_without_the_reverse_relation_items_read_nothing():
    from mnmg_sampler.train.checks import TypedMeta

    meta = TypedMeta({"user": 10, "item": 10}, [RATES], {"item": 16}, [])
    cfg = load_config(CONFIG)
    with pytest.raises(ConfigError, match="^link.edge_type: no chain of 2 relations ends at "
                                          "both node types"):
        check_typed_job(cfg, meta)


def test_edge_type_on_a_homogeneous_graph():
    cfg = load_config(REPO / "configs" / "cora_link.yaml", ["link.edge_type=[a, b, c]"])
    with pytest.raises(ConfigError, match="^link.edge_type: cora is a homogeneous graph"):
        check_homogeneous_job(cfg)


def test_useritem_name_and_graph():
    spec = parse_dataset_name("typed-useritem:300")
    assert (spec.kind, spec.users, spec.items) == ("typed-useritem", 300, 300)
    with pytest.raises(ConfigError, match="^dataset.name: bad typed-useritem spec"):
        parse_dataset_name("typed-useritem:300:4")
    g = typed_useritem_graph(300, 100, seed=1)
    h = typed_useritem_graph(300, 100, seed=1)
    ei = relation_edge_index(g, RATES)
    assert np.array_equal(ei, relation_edge_index(h, RATES))
    assert not np.array_equal(ei, relation_edge_index(typed_useritem_graph(300, 100, 2), RATES))
    assert np.array_equal(relation_edge_index(g, REV), ei[::-1])
    assert g.num_nodes_dict() == {"item": 100, "user": 300} and set(g.x) == {"item"}
    assert 5 * 300 < ei.shape[1] <= 10 * 300  # 10 ratings per user, repeats merged
    # items are rated by popularity (Zipf), not uniformly within their community: the most
    # rated item has several times the median's ratings (uniform picks: under twice)
    deg = np.bincount(ei[1], minlength=100)
    assert deg.max() > 3 * np.median(deg)


def test_training_graph_holds_no_held_out_edge():
    g = typed_useritem_graph(300, 100, seed=0)
    split = split_relation(g, RATES, [0.8, 0.1, 0.1], seed=3)
    pairs = {k: set(map(tuple, v.T.tolist())) for k, v in split.items()}
    full = set(map(tuple, relation_edge_index(g, RATES).T.tolist()))
    assert pairs["train"] | pairs["val"] | pairs["test"] == full
    assert not (pairs["train"] & pairs["val"]) and not (pairs["val"] & pairs["test"])
    assert len(pairs["val"]) == round(0.9 * len(full)) - round(0.8 * len(full))
    t = typed_training_graph(g, RATES, split, REV)
    assert set(map(tuple, relation_edge_index(t, RATES).T.tolist())) == pairs["train"]
    assert set(map(tuple, relation_edge_index(t, REV)[::-1].T.tolist())) == pairs["train"]
    assert np.array_equal(t.x["item"], g.x["item"])


def test_encoder_outputs_both_endpoint_types():
    import torch

    from mnmg_sampler.sampling.hetero_sampler import sample_hetero
    from mnmg_sampler.train.model import HeteroGraphSAGE, LinkModel

    g = typed_useritem_graph(200, 50, seed=0)
    b = sample_hetero(g, ("user", np.arange(12)), [4, 3], seed=1, key=2)
    torch.manual_seed(0)
    enc = HeteroGraphSAGE(g.edge_types, {"item": 16}, 8, 8, 2, ("user", "item"), 6,
                          dropout=0.0)
    assert enc.embedded == ["user"]  # items have features
    net = LinkModel(enc, 8, edge_type=RATES)
    h = net(b.x, b.edge_index, {"user": torch.randn(b.n_id["user"].numel(), 6)})
    assert {t: v.shape for t, v in h.items()} == {
        "user": (b.n_id["user"].numel(), 8), "item": (b.n_id["item"].numel(), 8)}
    src, dst = torch.arange(4), torch.arange(4) % b.n_id["item"].numel()
    logits = net.score(h, src, dst)
    assert torch.allclose(logits, (h["user"][src] * h["item"][dst]).sum(-1) / 8 ** 0.5)
    logits.sum().backward()
    for name, p in net.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    with pytest.raises(ConfigError, match="^link.decoder is 'cosine'"):
        LinkModel(enc, 8, decoder="cosine", edge_type=RATES)
