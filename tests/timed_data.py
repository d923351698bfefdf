"""Real-shaped timed interaction data, saved as users save it (issue 32): a PyG ``HeteroData``
with ``data["user", "rates", "movie"].time`` in Unix seconds and its reverse relation, a
homogeneous ``Data`` with an edge ``time``, and a CSV edge table with a time column.

The shape follows a public ratings dataset (610 users, 9,742 movies with 20-d features, about
100k ratings; that data's licence forbids redistribution, so it is generated): user activity and
movie popularity are skewed (log-normal and Zipf), times are Unix seconds from mid-2017 to 2025,
and a time signal is planted: each user's taste moves through communities of movies (settled
after 60% of the span), 90% of its ratings are of its community at the time, and a movie's
community shows in its features. So a user's latest ratings predict its next ones better than
all of them.

``python -m tests.timed_data OUT_DIR [USERS MOVIES RATINGS]`` writes ``ratings.pt``
(HeteroData), ``ratings_homo.pt`` (Data) and ``ratings.csv``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

T0 = 1_500_000_000  # 2017-07-14 in Unix seconds
SPAN = 8 * 365 * 86_400
COMMUNITIES = 8
PHASES = 3
PLANTED = 0.9
SETTLED = 0.6  # no user's taste moves after this share of the span
DIM = 20


def ratings(users: int = 610, movies: int = 9742, n: int = 100_836, seed: int = 0) -> dict:
    """``{"src", "dst", "time", "x"}``: unique (user, movie) pairs, int64 Unix-second times
    (all > 1.5e9), float32 movie features ``[movies, DIM]``."""
    rng = np.random.default_rng(seed)
    movie_c = rng.integers(0, COMMUNITIES, movies)
    movie_c[:COMMUNITIES] = np.arange(COMMUNITIES)
    pop = 1.0 / np.arange(1, movies + 1) ** 0.9
    pop = pop[rng.permutation(movies)]
    by_c = [np.flatnonzero(movie_c == c) for c in range(COMMUNITIES)]
    p_c = [pop[m] / pop[m].sum() for m in by_c]
    activity = rng.lognormal(0.0, 1.0, users)
    per_user = np.maximum(20, np.round(activity / activity.sum() * n * 1.6)).astype(np.int64)
    u = np.repeat(np.arange(users, dtype=np.int64), per_user)
    t = T0 + rng.integers(0, SPAN, u.size).astype(np.int64)
    taste = np.stack([rng.permutation(COMMUNITIES)[:PHASES] for _ in range(users)])
    switch = T0 + np.sort(rng.integers(0, int(SETTLED * SPAN), (users, PHASES - 1)), 1)
    phase = (t[:, None] >= switch[u]).sum(1)
    c = np.where(rng.random(u.size) < PLANTED, taste[u, phase],
                 rng.integers(0, COMMUNITIES, u.size))
    m = np.empty(u.size, np.int64)
    for k in range(COMMUNITIES):
        sel = np.flatnonzero(c == k)
        m[sel] = rng.choice(by_c[k], sel.size, p=p_c[k])
    code = u * movies + m
    order = np.lexsort((t, code))
    first = np.ones(order.size, bool)
    first[1:] = code[order][1:] != code[order][:-1]
    keep = order[first]
    keep = np.sort(rng.choice(keep, min(n, keep.size), replace=False))
    centre = rng.standard_normal((COMMUNITIES, DIM)).astype(np.float32)
    x = centre[movie_c] + rng.standard_normal((movies, DIM)).astype(np.float32)
    return {"src": u[keep], "dst": m[keep], "time": t[keep].astype(np.int64), "x": x,
            "users": users, "movies": movies}


def hetero_data(r: dict):
    """The PyG ``HeteroData`` of :func:`ratings` (featureless users, reverse relation)."""
    import torch
    from torch_geometric.data import HeteroData

    d = HeteroData()
    d["user"].num_nodes = r["users"]
    d["movie"].x = torch.from_numpy(r["x"])
    ei = torch.from_numpy(np.stack([r["src"], r["dst"]]))
    t = torch.from_numpy(r["time"])
    d["user", "rates", "movie"].edge_index = ei
    d["user", "rates", "movie"].time = t
    d["movie", "rev_rates", "user"].edge_index = ei.flip(0)
    d["movie", "rev_rates", "user"].time = t.clone()
    return d


def homo_data(r: dict):
    """The same ratings as a homogeneous PyG ``Data``: users ``0..U-1``, movies after them,
    both directions, an edge ``time`` and features (zeros for users)."""
    import torch
    from torch_geometric.data import Data

    dst = r["dst"] + r["users"]
    ei = np.concatenate([np.stack([r["src"], dst]), np.stack([dst, r["src"]])], 1)
    x = np.concatenate([np.zeros((r["users"], DIM), np.float32), r["x"]])
    return Data(edge_index=torch.from_numpy(ei), x=torch.from_numpy(x),
                time=torch.from_numpy(np.concatenate([r["time"], r["time"]])),
                num_nodes=r["users"] + r["movies"])


def write_csv(r: dict, path: Path, hashed: bool = False) -> Path:
    """A ``src,dst,time`` edge table of users ``0..U-1`` rating movies ``U..``, both directions
    (one relation; a rating and its reverse share a time, so a split by time keeps them
    together). ``hashed``: every id is a distinct random 62-bit number instead, as an
    interaction log's hashed user and item ids."""
    dst = r["dst"] + r["users"]
    src = r["src"]
    if hashed:
        n = r["users"] + r["movies"]
        code = np.unique(np.random.default_rng(7).integers(1 << 40, 1 << 62, 2 * n))[:n]
        code = code[np.random.default_rng(8).permutation(n)]
        src, dst = code[src], code[dst]
    rows = np.concatenate([np.stack([src, dst, r["time"]], 1),
                           np.stack([dst, src, r["time"]], 1)])
    np.savetxt(path, rows, fmt="%d", delimiter=",", header="src,dst,time", comments="")
    return path


def write_all(out: Path, **kw) -> dict[str, Path]:
    import torch

    out.mkdir(parents=True, exist_ok=True)
    r = ratings(**kw)
    paths = {"hetero": out / "ratings.pt", "homo": out / "ratings_homo.pt",
             "csv": out / "ratings.csv"}
    torch.save(hetero_data(r), paths["hetero"])
    torch.save(homo_data(r), paths["homo"])
    write_csv(r, paths["csv"])
    return paths


if __name__ == "__main__":
    a = sys.argv[1:]
    sizes = dict(zip(("users", "movies", "n"), map(int, a[1:4]), strict=False))
    for k, p in write_all(Path(a[0]), **sizes).items():
        print(k, p)
