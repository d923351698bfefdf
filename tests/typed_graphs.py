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


def hetero_data(spec: dict):
    """The PyG ``HeteroData`` of a plain dict form ``spec`` (node counts, ``x``, ``y``, edges)."""
    import torch
    from torch_geometric.data import HeteroData

    d = HeteroData()
    for t, n in spec["num_nodes"].items():
        d[t].num_nodes = n
        if t in spec.get("x", {}):
            d[t].x = torch.from_numpy(spec["x"][t])
        if t in spec.get("y", {}):
            d[t].y = torch.from_numpy(spec["y"][t])
    for et, ei in spec["edge_index"].items():
        d[et].edge_index = torch.from_numpy(ei)
    return d


def take_all(data, seed_dict: dict, hops: int):
    """A PyG ``HeteroSamplerOutput`` taking every neighbor of ``seed_dict``'s nodes (per type,
    first in ``node``) for ``hops`` hops: a reference sampler for PyG's own loaders, which need
    pyg-lib or torch-sparse for theirs; with all neighbors the subgraph is fixed, so outputs can
    be compared as sets."""
    import torch
    from torch_geometric.sampler import HeteroSamplerOutput

    nodes = {t: [] for t in data.node_types}
    index = {t: {} for t in data.node_types}
    rows = {et: [] for et in data.edge_types}
    cols = {et: [] for et in data.edge_types}
    eids = {et: [] for et in data.edge_types}
    n_nodes = {t: [0] * (hops + 1) for t in data.node_types}
    n_edges = {et: [0] * hops for et in data.edge_types}
    for t, seeds in seed_dict.items():
        for v in seeds.tolist():
            index[t][v] = len(nodes[t])
            nodes[t].append(v)
        n_nodes[t][0] = len(nodes[t])
    frontier = {t: list(nodes[t]) for t in data.node_types}
    for h in range(hops):
        new = {t: [] for t in data.node_types}
        for et in data.edge_types:
            s, _, d = et
            src, dst = data[et].edge_index
            for v in frontier[d]:
                for e in torch.nonzero(dst == v).flatten().tolist():
                    u = int(src[e])
                    if u not in index[s]:
                        index[s][u] = len(nodes[s])
                        nodes[s].append(u)
                        new[s].append(u)
                    rows[et].append(index[s][u])
                    cols[et].append(index[d][v])
                    eids[et].append(e)
                    n_edges[et][h] += 1
        for t in data.node_types:
            n_nodes[t][h + 1] = len(new[t])
        frontier = new

    def as_t(a):
        return torch.tensor(a, dtype=torch.long)

    return HeteroSamplerOutput(
        node={t: as_t(v) for t, v in nodes.items()},
        row={et: as_t(v) for et, v in rows.items()},
        col={et: as_t(v) for et, v in cols.items()},
        edge={et: as_t(v) for et, v in eids.items()},
        num_sampled_nodes=n_nodes, num_sampled_edges=n_edges)


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
