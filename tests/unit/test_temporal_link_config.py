"""The temporal link job's pieces without ranks: the generated user-item graph with rating
times, ``link.split_by: time`` (the training graph holds no validation, test or later edge) and
its config errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mnmg_sampler.config import load_config, parse_dataset_name
from mnmg_sampler.errors import ConfigError
from mnmg_sampler.graph.link_split import (
    relation_edge_index,
    split_relation,
    split_relation_by_time,
    typed_training_graph,
)
from mnmg_sampler.graph.typed_generate import typed_useritem_graph
from mnmg_sampler.train.checks import check_typed_job
from mnmg_sampler.train.setup import typed_meta

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs" / "temporal_link.yaml"
RATES = ("user", "rates", "item")
REV = ("item", "rev_rates", "user")


def _codes(ei: np.ndarray) -> set:
    return set(map(tuple, ei.T.tolist()))


def _times(g, et) -> dict:
    """(src, dst) -> time of relation ``et``'s edges (one edge per pair here)."""
    from mnmg_sampler.graph.link_split import _relation_entries

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


def test_tastes_drift_through_communities_and_settle():
    """The planted signal: each user goes through TASTE_PHASES different communities, changing
    before TASTE_SETTLED of the horizon; its ratings follow its community at their time."""
    from mnmg_sampler.graph import typed_generate as tg

    tastes = tg.useritem_tastes(600, 200, 3)
    assert tastes.community.shape == (600, tg.TASTE_PHASES)
    assert all(len(set(row)) == tg.TASTE_PHASES for row in tastes.community.tolist())
    assert (np.diff(tastes.switch, axis=1) >= 0).all() and tastes.switch.min() >= 0
    assert tastes.switch.max() < tg.TASTE_SETTLED * tg.USERITEM_HORIZON
    g = typed_useritem_graph(600, 200, 3, temporal=True)
    (u, i), t = np.array(list(_times(g, RATES))).T, np.array(list(_times(g, RATES).values()))
    now = tastes.item_community[i] == tastes.at(u, t)
    first = tastes.item_community[i] == tastes.community[u, 0]
    assert now.mean() > 0.85  # TASTE_PLANTED plus the away draws that land at home
    late = t >= tg.TASTE_SETTLED * tg.USERITEM_HORIZON  # every user in its last community
    assert first[late].mean() < 0.1 < now[late].mean() - 0.7  # the first taste misleads


def test_latest_ratings_predict_the_next_better_than_all():
    """What a temporal sampler with temporal_strategy: last exploits and a static one cannot:
    for the latest 10% of ratings, the user's 5 latest earlier ratings are mostly of the
    rated item's community, its earlier ratings as a whole much less."""
    from mnmg_sampler.graph import typed_generate as tg

    g = typed_useritem_graph(1000, 500, 0, temporal=True)
    tastes = tg.useritem_tastes(1000, 500, 0)
    times = _times(g, RATES)
    (u, i), t = np.array(list(times)).T, np.array(list(times.values()))
    cut = np.quantile(t, [0.8, 0.9])
    order = np.lexsort((t, u))
    hist: dict = {}  # user -> item communities of its ratings before the validation start
    for e in order[t[order] < cut[0]]:
        hist.setdefault(u[e], []).append(tastes.item_community[i[e]])
    last, every = [], []
    for e in np.flatnonzero(t >= cut[1]):
        h = np.array(hist.get(u[e], []))
        c = tastes.item_community[i[e]]
        last.append((h[-5:] == c).mean() if h.size else 0.0)
        every.append((h == c).mean() if h.size else 0.0)
    assert np.mean(last) > 0.55 and np.mean(every) < 0.4, (np.mean(last), np.mean(every))


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
    from mnmg_sampler.train.checks import check_homogeneous_job

    key = override.split("=")[0]
    cfg = load_config(REPO / "configs" / "hetero.yaml", [override])
    with pytest.raises(ConfigError, match=f"^{key}: set with task node"):
        check_typed_job(cfg, typed_meta(cfg))
    cfg = load_config(REPO / "configs" / "cora.yaml", [override])
    with pytest.raises(ConfigError, match=f"^{key}: .* is a homogeneous graph"):
        check_homogeneous_job(cfg)


def test_generating_more_ratings_than_memory_holds_is_refused(monkeypatch):
    from mnmg_sampler.errors import MemoryBudgetError
    from mnmg_sampler.system import host_limits

    monkeypatch.setattr(host_limits, "available_bytes", lambda: 2**20)
    with pytest.raises(MemoryBudgetError, match="typed-useritem-t: the ratings of 20,000 users"):
        typed_useritem_graph(20_000, 100, 0, temporal=True)
    typed_useritem_graph(200, 100, 0, temporal=True)  # 0.3 MiB: fits


def test_eval_fanouts_default_to_the_training_fanouts_for_disjoint_trees():
    """``sampler.eval_fanouts: null`` is every neighbor, except in a link job with disjoint
    trees (time or ``sampler.disjoint``), where each endpoint and negative grows its own tree:
    there it is the training fanouts (issue 32: full trees ran a 10 MB graph out of 24 GB). An
    explicit -1 is kept; ``training.eval_memory_mb`` sizes those jobs' chunks and is refused
    by typed jobs that would ignore it."""
    base = ["sampler.eval_fanouts=null", "sampler.fanouts=[10,5]"]
    cfg = load_config(CONFIG, base)
    assert cfg.sampler.eval_fanouts == [10, 5]
    assert load_config(CONFIG, [*base, "sampler.time_attr=null", "sampler.disjoint=true"]
                       ).sampler.eval_fanouts == [10, 5]
    assert load_config(CONFIG, [*base, "sampler.time_attr=null", "link.split_by=random"]
                       ).sampler.eval_fanouts == [-1, -1]
    assert load_config(CONFIG, ["sampler.eval_fanouts=[-1,-1]"]).sampler.eval_fanouts == [-1, -1]
    meta = typed_meta(cfg)
    check_typed_job(load_config(CONFIG, ["training.eval_memory_mb=64"]), meta)
    with pytest.raises(ConfigError, match="training.eval_memory_mb"):
        check_typed_job(load_config(CONFIG, ["training.eval_memory_mb=64", "sampler.time_attr=null",
                                             "link.split_by=random"]), meta)
