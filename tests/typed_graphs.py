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


def check_batch_invariants(b: dict, spec: dict, seeds, num_neighbors, replace: bool) -> None:
    """The sampling invariants of one typed minibatch (``b`` as plain numpy dicts: ``n_id``,
    ``edge_index``, ``e_id``, ``num_sampled_nodes``, ``num_sampled_edges``, ``batch_size``,
    ``input_type``) drawn from ``spec`` (:func:`typed_spec`'s dict form): seeds first in
    ``n_id[input_type]``; every sampled edge of relation r is an edge of r (its ``e_id``
    column); at hop h each frontier node of r's destination type gets min(k, its degree in r)
    neighbors in r (k of them with replacement, all for k = -1, none for 0), distinct edges
    without replacement, and no edge goes to a node outside the frontier."""
    np.testing.assert_array_equal(b["n_id"][b["input_type"]][:b["batch_size"]], seeds)
    for et, ei in spec["edge_index"].items():
        src_t, _, dst_t = et
        ks = num_neighbors[et] if isinstance(num_neighbors, dict) else num_neighbors
        loc, e = b["edge_index"][et], b["e_id"][et]
        nsrc, ndst = b["n_id"][src_t], b["n_id"][dst_t]
        np.testing.assert_array_equal(ei[:, e], np.stack([nsrc[loc[0]], ndst[loc[1]]]))
        deg = np.bincount(ei[1], minlength=spec["num_nodes"][dst_t])
        e_at = np.cumsum([0, *b["num_sampled_edges"][et]])
        n_at = np.cumsum([0, *b["num_sampled_nodes"][dst_t]])
        assert e_at[-1] == e.size and len(ks) == e_at.size - 1
        for h, k in enumerate(ks):
            dl = loc[1, e_at[h]:e_at[h + 1]]
            assert np.all((dl >= n_at[h]) & (dl < n_at[h + 1])), (et, h)  # the hop's frontier
            got = np.bincount(dl - n_at[h], minlength=n_at[h + 1] - n_at[h])
            d = deg[ndst[n_at[h]:n_at[h + 1]]]
            want = d if k < 0 else (np.where(d > 0, k, 0) if replace else np.minimum(k, d))
            np.testing.assert_array_equal(got, want, err_msg=f"{et} hop {h}")
            if not replace:  # without replacement: distinct edges per frontier node
                pairs = np.stack([dl, e[e_at[h]:e_at[h + 1]]])
                assert np.unique(pairs, axis=1).shape[1] == dl.size, (et, h)
