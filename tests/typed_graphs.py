"""A small typed graph shared by the typed partition and distributed typed tests."""

from __future__ import annotations

import numpy as np


def typed_spec(seed: int = 0) -> dict:
    """Three node types (one featureless), five relations (one weighted, one empty-ish),
    features of different widths and dtypes, labels and masks."""
    g = np.random.default_rng(seed)
    n = {"author": 23, "field": 5, "paper": 31}

    def edges(s, d, m):
        return np.stack([g.integers(0, n[s], m), g.integers(0, n[d], m)])

    return {
        "num_nodes": n,
        "edge_index": {("author", "writes", "paper"): edges("author", "paper", 70),
                       ("paper", "rev_writes", "author"): edges("paper", "author", 70),
                       ("paper", "cites", "paper"): edges("paper", "paper", 90),
                       ("paper", "has", "field"): edges("paper", "field", 40),
                       ("field", "of", "paper"): edges("field", "paper", 3)},
        "x": {"paper": g.random((31, 4), dtype=np.float32),
              "author": g.random((23, 3)).astype(np.float16)},
        "y": {"paper": g.integers(0, 3, 31)},
        "masks": {"paper": {"train": np.arange(31) < 20, "test": np.arange(31) >= 25}},
        "edge_weight": {("paper", "cites", "paper"): g.random(90).astype(np.float32) + 0.1},
    }


def link_spec(seed: int = 0) -> dict:
    """A user-item graph for link tests: ``rates`` and its PyG reverse ``rev_rates`` (the same
    edges flipped), a user-user relation, features on both types, labels on users."""
    g = np.random.default_rng(seed)
    n = {"movie": 19, "user": 27}
    rates = np.stack([g.integers(0, 27, 110), g.integers(0, 19, 110)])
    return {
        "num_nodes": n,
        "edge_index": {("user", "rates", "movie"): rates,
                       ("movie", "rev_rates", "user"): rates[::-1].copy(),
                       ("user", "follows", "user"): np.stack([g.integers(0, 27, 60),
                                                              g.integers(0, 27, 60)])},
        "x": {"user": g.random((27, 3), dtype=np.float32),
              "movie": g.random((19, 5), dtype=np.float32)},
        "y": {"user": g.integers(0, 2, 27)},
    }
