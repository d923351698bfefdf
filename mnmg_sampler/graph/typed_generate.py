"""A generated typed graph with planted labels (``dataset.name: typed-sbm:PAPERS[:CLASSES]``).

A small citation graph in ogbn-mag's shape, so a typed job learns something whose accuracy means
something: ``paper`` (features, labels), ``author`` and ``field`` (no features: a model learns
embeddings for them); 3 authors (``writes``), 2 fields (``has_topic``), both with their ``rev_``
reverses, and 4 citations (``cites``) per paper (docs/hetero.md#yaml-jobs). Papers have a class
in ``[0, CLASSES)``, authors a community, fields a class (``f % CLASSES``). A paper's authors come
from its class's community, its fields and cited papers from its class, each with a planted
probability (:data:`PLANTED`), else from anywhere. Its own features are weak (class centre times
:data:`FEATURE_SIGNAL` plus unit noise): the signal is in its authors, fields and citations.

A pure function of ``(papers, classes, seed)`` (NumPy's PCG64), the same on every rank and run;
one process builds it (a generated graph is partitioned by one process).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..system.host_limits import check_allocation
from .typed import TypedGraph, typed_graph
from .unique import sorted_unique

__all__ = ["FEATURE_DIM", "FEATURE_SIGNAL", "PLANTED", "USERITEM_COMMUNITIES", "Tastes",
           "typed_sbm_graph", "typed_sbm_metadata", "typed_useritem_graph",
           "typed_useritem_metadata", "useritem_tastes"]

FEATURE_DIM = 16
"""Width of the paper features."""
FEATURE_SIGNAL = 0.35
"""Scale of the class centre in a paper's features (noise has unit variance)."""
PLANTED = {"writes": 0.85, "has_topic": 0.8, "cites": 0.6}
"""Probability that a paper's author (field, cited paper) is drawn from its own class."""
_PER_PAPER = {"writes": 3, "has_topic": 2, "cites": 4}


def _counts(papers: int, classes: int) -> dict[str, int]:
    return {"paper": papers, "author": max(classes, papers // 2), "field": 4 * classes}


def typed_sbm_metadata(papers: int, classes: int) -> tuple[dict[str, int], list[tuple]]:
    """``(node counts per type, edge types)`` of :func:`typed_sbm_graph`, without building it
    (``validate`` checks a config's types and relations against these)."""
    ets = [("author", "writes", "paper"), ("paper", "rev_writes", "author"),
           ("paper", "has_topic", "field"), ("field", "rev_has_topic", "paper"),
           ("paper", "cites", "paper")]
    return _counts(papers, classes), ets


def _draw(rng, own: np.ndarray, k: int, p_in: float, group: np.ndarray, classes: int,
          weight: np.ndarray | None = None):
    """``k`` members per entry of ``own`` (a class each): from class ``own`` with probability
    ``p_in``, else from a uniformly drawn class; within that class uniformly, or with
    probability proportional to ``weight[i]`` (``group[i]`` = the class of member ``i``)."""
    order = np.argsort(group, kind="stable")
    count = np.bincount(group, minlength=classes)
    start = np.concatenate([[0], np.cumsum(count)[:-1]])
    n = own.shape[0] * k
    cls = np.repeat(own, k)
    away = rng.random(n) >= p_in
    cls[away] = rng.integers(0, classes, int(away.sum()))
    if weight is None:
        pick = start[cls] + np.floor(rng.random(n) * count[cls]).astype(np.int64)
    else:  # the member whose cumulative weight in its class first exceeds a uniform draw
        cum = np.cumsum(weight[order])
        below = np.concatenate([[0.0], cum])[start]  # weight of the classes before each
        total = cum[start + count - 1] - below
        pick = np.searchsorted(cum, below[cls] + rng.random(n) * total[cls], side="right")
        pick = np.clip(pick, start[cls], start[cls] + count[cls] - 1)
    return np.repeat(np.arange(own.shape[0], dtype=np.int64), k), order[pick]


def _unique_pairs(src: np.ndarray, dst: np.ndarray, n_dst: int) -> np.ndarray:
    code = sorted_unique(src * n_dst + dst)
    return np.stack([code // n_dst, code % n_dst]).astype(np.int64)


def typed_sbm_graph(papers: int, classes: int = 4, seed: int = 0) -> TypedGraph:
    """The typed graph of the module docstring (``papers`` >= ``classes`` >= 2)."""
    n = _counts(papers, classes)
    rng = np.random.default_rng([int(seed), int(papers), int(classes)])
    y = rng.integers(0, classes, papers).astype(np.int64)
    community = rng.integers(0, classes, n["author"]).astype(np.int64)
    community[:classes] = np.arange(classes)  # every community has an author
    y[:classes] = np.arange(classes)  # and every class a paper
    field_class = np.arange(n["field"], dtype=np.int64) % classes
    centre = rng.standard_normal((classes, FEATURE_DIM))
    x = (FEATURE_SIGNAL * centre[y] + rng.standard_normal((papers, FEATURE_DIM)))
    p, a = _draw(rng, y, _PER_PAPER["writes"], PLANTED["writes"], community, classes)
    writes = _unique_pairs(a, p, papers)  # (author, paper)
    p, f = _draw(rng, y, _PER_PAPER["has_topic"], PLANTED["has_topic"], field_class, classes)
    topic = _unique_pairs(p, f, n["field"])  # (paper, field)
    p, q = _draw(rng, y, _PER_PAPER["cites"], PLANTED["cites"], y, classes)
    keep = p != q
    cites = _unique_pairs(p[keep], q[keep], papers)
    spec = {
        "num_nodes": n,
        "edge_index": {("author", "writes", "paper"): writes,
                       ("paper", "rev_writes", "author"): writes[::-1].copy(),
                       ("paper", "has_topic", "field"): topic,
                       ("field", "rev_has_topic", "paper"): topic[::-1].copy(),
                       ("paper", "cites", "paper"): cites},
        "x": {"paper": x.astype(np.float32)},
        "y": {"paper": y},
    }
    return typed_graph(spec, f"typed-sbm:{papers}:{classes}")


USERITEM_COMMUNITIES = 8
"""Latent communities of the user-item graph."""
USERITEM_PLANTED = 0.8
"""Probability that a user rates an item of its own community."""
RATINGS_PER_USER = 10
ITEM_POPULARITY = 0.9
"""Zipf exponent of the items' popularity: the item of popularity rank ``r`` is rated in
proportion to ``1 / r ** ITEM_POPULARITY`` within its community, ranks in random order (real
ratings are long-tailed so: a few items draw most of them)."""


def typed_useritem_metadata(users: int, items: int) -> tuple[dict[str, int], list[tuple]]:
    """``(node counts per type, edge types)`` of :func:`typed_useritem_graph`."""
    return ({"user": users, "item": items},
            [("user", "rates", "item"), ("item", "rev_rates", "user")])


def typed_useritem_graph(users: int, items: int, seed: int = 0,
                         temporal: bool = False) -> TypedGraph:
    """A user-item graph for link prediction (``dataset.name: typed-useritem:USERS[:ITEMS]``).

    Users (no features) and items (weak features) each belong to one of
    :data:`USERITEM_COMMUNITIES` latent communities; every user rates :data:`RATINGS_PER_USER`
    items (``(user, rates, item)`` and its reverse ``rev_rates``), of its own community with
    probability :data:`USERITEM_PLANTED` (repeats merged), within it by the item's popularity
    (Zipf, :data:`ITEM_POPULARITY`), so a link predictor clearly beats chance. The features show
    an item's community, not its popularity: that part of its signal is its own (a learned id
    row, ``model.embeddings: all``, can carry it; mean aggregation cannot count neighbours). A
    pure function of ``(users, items, seed)`` (``items`` >= the communities). ``temporal``
    (``typed-useritem-t``): the ratings of :func:`_drifting_ratings` instead, with their times,
    and item features of scale :data:`TASTE_FEATURE_SIGNAL`."""
    c = USERITEM_COMMUNITIES
    rng = np.random.default_rng([int(seed), int(users), int(items), 0x5E1])
    user_c, item_c = _communities(rng, users, items)
    centre = rng.standard_normal((c, FEATURE_DIM))
    signal = TASTE_FEATURE_SIGNAL if temporal else FEATURE_SIGNAL
    x = signal * centre[item_c] + rng.standard_normal((items, FEATURE_DIM))
    if temporal:
        rates, t = _drifting_ratings(users, items, seed)
    else:
        pop = np.random.default_rng([int(seed), int(users), int(items), 0x909]).permutation(items)
        u, i = _draw(rng, user_c, RATINGS_PER_USER, USERITEM_PLANTED, item_c, c,
                     1.0 / (1.0 + pop) ** ITEM_POPULARITY)
        rates = _unique_pairs(u, i, items)
    et, rev = ("user", "rates", "item"), ("item", "rev_rates", "user")
    spec = {"num_nodes": {"user": users, "item": items},
            "edge_index": {et: rates, rev: rates[::-1].copy()},
            "x": {"item": x.astype(np.float32)}}
    if temporal:
        spec.update(edge_time={et: t, rev: t.copy()}, time_attr="time")
        return typed_graph(spec, f"typed-useritem-t:{users}:{items}")
    return typed_graph(spec, f"typed-useritem:{users}:{items}")


USERITEM_HORIZON = 1_000_000
"""Rating times of the temporal user-item graph are in ``[0, USERITEM_HORIZON)``."""
RATINGS_PER_USER_T = 20
"""Ratings drawn per user of the temporal user-item graph (repeated pairs merged)."""
TASTE_PHASES = 4
"""Communities each user of the temporal user-item graph goes through, all different."""
TASTE_SETTLED = 0.7
"""Fraction of the horizon after which no user changes taste again."""
TASTE_PLANTED = 0.9
"""Probability that a timed rating is of the user's community at that time."""
TASTE_FEATURE_SIGNAL = 1.0
"""Scale of the community centre in the temporal graph's item features (unit noise): an
item's community is readable from its features, the user's current one only from its latest
ratings."""


class Tastes(NamedTuple):
    """The planted time signal of ``typed-useritem-t`` (:func:`useritem_tastes`)."""

    item_community: np.ndarray  # [items] int64
    community: np.ndarray  # [users, TASTE_PHASES] the user's community in each phase
    switch: np.ndarray  # [users, TASTE_PHASES - 1] sorted times the user enters phases 1, 2, ...

    def at(self, user: np.ndarray, t: np.ndarray) -> np.ndarray:
        """The community of each ``user[j]`` at time ``t[j]``."""
        phase = (np.asarray(t)[:, None] >= self.switch[user]).sum(1)
        return self.community[user, phase]


def _communities(rng, users: int, items: int) -> tuple[np.ndarray, np.ndarray]:
    c = USERITEM_COMMUNITIES
    user_c = rng.integers(0, c, users).astype(np.int64)
    item_c = rng.integers(0, c, items).astype(np.int64)
    item_c[:c] = np.arange(c)  # every community has an item
    return user_c, item_c


def useritem_tastes(users: int, items: int, seed: int = 0) -> Tastes:
    """How the tastes of ``typed-useritem-t:USERS:ITEMS``'s users drift: each user starts in its
    community and moves through :data:`TASTE_PHASES` different communities in all, at sorted
    uniform times in ``[0, TASTE_SETTLED * USERITEM_HORIZON)``; it never returns to a community
    it left. A pure function of ``(users, items, seed)``."""
    user_c, item_c = _communities(np.random.default_rng([int(seed), int(users), int(items),
                                                         0x5E1]), users, items)
    c, p = USERITEM_COMMUNITIES, TASTE_PHASES
    rng = np.random.default_rng([int(seed), int(users), int(items), 0x7E2])
    others = np.argsort(rng.random((users, c)), axis=1)  # a random order of the communities
    others = others[others != user_c[:, None]].reshape(users, c - 1)  # without the first one
    community = np.concatenate([user_c[:, None], others[:, :p - 1]], axis=1)
    settled = int(TASTE_SETTLED * USERITEM_HORIZON)
    switch = np.sort(rng.integers(0, settled, (users, p - 1)), axis=1).astype(np.int64)
    return Tastes(item_c, community.astype(np.int64), switch)


def _drifting_ratings(users: int, items: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Ratings whose community drifts (``typed-useritem-t:USERS[:ITEMS]``, the tastes of
    :func:`useritem_tastes`): each user's :data:`RATINGS_PER_USER_T` ratings have uniform times
    in ``[0, USERITEM_HORIZON)`` and an item of the community the user is in at that time with
    probability :data:`TASTE_PLANTED`, else of a uniformly drawn one (a repeated pair keeps its
    earliest time). So a user's latest ratings say which items it rates next, and its older
    ones point to communities it has left: a temporal sampler that takes the latest neighbors
    sees the current taste, a static one a mix of the past ones (docs/temporal.md#yaml-jobs).
    ``[2, E]`` (user, item) pairs and their int64 times."""
    # per user: the communities' random order (8 + 8 bytes each) and, per rating, about ten
    # int64-sized temporaries (user, time, item, pair code, sort order, phase)
    check_allocation(f"typed-useritem-t: the ratings of {users:,} users",
                     users * (16 * USERITEM_COMMUNITIES + 80 * RATINGS_PER_USER_T),
                     "generate fewer users (dataset.name typed-useritem-t:USERS:ITEMS)")
    tastes = useritem_tastes(users, items, seed)
    rng = np.random.default_rng([int(seed), int(users), int(items), 0x7E1])
    u = np.repeat(np.arange(users, dtype=np.int64), RATINGS_PER_USER_T)
    t = rng.integers(0, USERITEM_HORIZON, u.shape[0]).astype(np.int64)
    _, i = _draw(rng, tastes.at(u, t), 1, TASTE_PLANTED, tastes.item_community,
                 USERITEM_COMMUNITIES)
    code = u * np.int64(items) + i
    order = np.lexsort((t, code))  # by pair, earliest first
    first = np.ones(order.shape[0], bool)
    first[1:] = code[order][1:] != code[order][:-1]
    keep = order[first]
    return np.stack([u[keep], i[keep]]).astype(np.int64), t[keep]
