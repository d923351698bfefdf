"""The temporal link job's pieces without ranks: the generated user-item graph with rating
times, ``link.split_by: time`` (the training graph holds no validation, test or later edge) and
its config errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mnmg_sampler.config import load_config, parse_dataset_name
from mnmg_sampler.errors import ConfigError
from mnmg_sampler.graph.typed_generate import typed_useritem_graph
from mnmg_sampler.graph.typed_link_split import (
    relation_edge_index,
    split_relation,
    split_relation_by_time,
    typed_training_graph,
)
from mnmg_sampler.train.typed_setup import check_typed_job, typed_meta

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs" / "temporal_link.yaml"
RATES = ("user", "rates", "item")
REV = ("item", "rev_rates", "user")


def _codes(ei: np.ndarray) -> set:
    return set(map(tuple, ei.T.tolist()))


def _times(g, et) -> dict:
    """(src, dst) -> time of relation ``et``'s edges (one edge per pair here)."""
    from mnmg_sampler.graph.typed_link_split import _relation_entries

    ei = relation_edge_index(g, et)
    t = g.edge_time[_relation_entries(g, et)[0]]
    return dict(zip(map(tuple, ei.T.tolist()), t.tolist(), strict=True))


def test_temporal_useritem_name_and_times():
    spec = parse_dataset_name("typed-useritem-t:300:100")
    assert (spec.kind, spec.name, spec.users, spec.items, spec.temporal) == \
        ("typed-useritem", "typed-useritem-t:300:100", 300, 100, True)
    assert not parse_dataset_name("typed-useritem:300").temporal
    g = typed_useritem_graph(300, 100, 0, temporal=True)
    assert g.edge_time is not None and g.edge_time.dtype == np.int64
    fwd, rev = _times(g, RATES), _times(g, REV)
    assert len(fwd) == g.num_edges_dict()[RATES]  # one rating per pair
    assert fwd == {(u, i): t for (i, u), t in rev.items()}  # the reverse at the same time
    again = typed_useritem_graph(300, 100, 0, temporal=True)
    assert np.array_equal(again.edge_time, g.edge_time)
    assert typed_useritem_graph(300, 100, 0).edge_time is None


def test_ratings_drift_to_a_second_community():
    """A user's late ratings share fewer items' communities with its early ones than two halves
    of a static user's ratings do: the graph carries a time signal."""
    from mnmg_sampler.graph import typed_generate as tg

    g = typed_useritem_graph(600, 200, 3, temporal=True)
    rng = np.random.default_rng([3, 600, 200, 0x5E1])
    rng.integers(0, tg.USERITEM_COMMUNITIES, 600)
    item_c = rng.integers(0, tg.USERITEM_COMMUNITIES, 200)
    item_c[:tg.USERITEM_COMMUNITIES] = np.arange(tg.USERITEM_COMMUNITIES)
    by_user: dict = {}  # each user's items' communities, in time order
    for (u, i), _ in sorted(_times(g, RATES).items(), key=lambda kv: (kv[0][0], kv[1])):
        by_user.setdefault(u, []).append(item_c[i])
    agree = [np.bincount(v[:len(v) // 2], minlength=8).argmax() ==
             np.bincount(v[len(v) // 2:], minlength=8).argmax() for v in by_user.values()]
    assert 0.2 < np.mean(agree) < 0.8  # static users would agree almost always


def test_time_split_training_graph_holds_no_held_out_or_later_edge():
    g = typed_useritem_graph(400, 120, 0, temporal=True)
    s = split_relation_by_time(g, RATES, [0.7, 0.15, 0.15])
    tg = typed_training_graph(g, RATES, s, REV)
    before = int(s["before"])
    assert s["val_time"].size and before == int(s["val_time"][0])
    assert s["train_time"].max() < before <= s["val_time"].min()
    assert s["val_time"].max() < s["test_time"].min()
    held = _codes(s["val"]) | _codes(s["test"])
    t_fwd, t_rev = _times(tg, RATES), _times(tg, REV)
    assert not held & set(t_fwd) and not held & {(u, i) for i, u in t_rev}
    assert max(t_fwd.values()) < before and max(t_rev.values()) < before
    assert set(t_fwd) == _codes(s["train"])  # every earlier rating stays
    # the training graph keeps the times it was built with
    orig = _times(g, RATES)
    assert all(orig[k] == t for k, t in t_fwd.items())


def test_split_by_time_needs_edge_time():
    g = typed_useritem_graph(200, 50, 0)
    with pytest.raises(ConfigError, match="link.split_by is time but .* has no edge time"):
        split_relation_by_time(g, RATES, [0.8, 0.1, 0.1])


def test_random_split_of_a_temporal_graph_is_refused():
    g = typed_useritem_graph(200, 50, 0, temporal=True)
    s = split_relation(g, RATES, [0.8, 0.1, 0.1], 0)
    with pytest.raises(ConfigError, match="with a random split"):
        typed_training_graph(g, RATES, s, REV)


def test_shipped_config_and_its_errors():
    cfg = load_config(CONFIG)
    assert (cfg.link.split_by, cfg.sampler.time_attr) == ("time", "time")
    assert check_typed_job(cfg, typed_meta(cfg)) == "user"
    cfg = load_config(CONFIG, ["sampler.time_attr=null"])  # the static baseline
    assert check_typed_job(cfg, typed_meta(cfg)) == "user"
    cfg = load_config(CONFIG, ["link.split_by=random"])
    with pytest.raises(ConfigError, match="^sampler.time_attr: 'time' with link.split_by"):
        check_typed_job(cfg, typed_meta(cfg))
    with pytest.raises(ConfigError, match="link.split_by"):
        load_config(CONFIG, ["link.split_by=latest"])
    with pytest.raises(ConfigError, match="sampler.temporal_strategy"):
        load_config(CONFIG, ["sampler.temporal_strategy=first"])


@pytest.mark.parametrize("override", ["sampler.time_attr=time", "sampler.disjoint=true",
                                      "link.split_by=time"])
def test_time_keys_elsewhere_are_refused(override):
    from mnmg_sampler.train.typed_setup import check_homogeneous_job

    key = override.split("=")[0]
    cfg = load_config(REPO / "configs" / "hetero.yaml", [override])
    with pytest.raises(ConfigError, match=f"^{key}: set with task node"):
        check_typed_job(cfg, typed_meta(cfg))
    cfg = load_config(REPO / "configs" / "cora.yaml", [override])
    with pytest.raises(ConfigError, match=f"^{key}: .* is a homogeneous graph"):
        check_homogeneous_job(cfg)
