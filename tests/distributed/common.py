"""Shared fixtures of the distributed tests: a small graph, its partitions, reference batches."""

from __future__ import annotations

import numpy as np

from mnmg_sampler.graph.csr import CSRGraph
from mnmg_sampler.ops.rng import request_key
from mnmg_sampler.sampling.sampler import MultiHopSampler, SampleRequest, local_hop_fn

FANOUTS = [4, 3, 2]
SEED = 11


def small_graph(n: int = 240, m: int = 1500, seed: int = 3, features: bool = True) -> CSRGraph:
    """A random graph with a few hubs, isolated and degree-0 nodes, features and labels."""
    rng = np.random.default_rng(seed)
    src = np.concatenate([rng.integers(0, n, m), rng.integers(0, 5, 200)])
    dst = np.concatenate([rng.integers(0, n - 10, m), rng.integers(0, n - 10, 200)])
    x = rng.standard_normal((n, 5)).astype(np.float32) if features else None
    y = rng.integers(0, 7, n).astype(np.int64) if features else None
    g = CSRGraph.from_edges(src, dst, n, name="small", x=x, y=y)
    return g


def batches_of(seeds: np.ndarray, batch_size: int) -> list[np.ndarray]:
    return [seeds[i:i + batch_size] for i in range(0, seeds.size, batch_size)]


def reference(graph: CSRGraph, seeds: np.ndarray, batch_size: int, fanouts=FANOUTS,
              seed: int = SEED) -> list[dict]:
    """Single-process batches: global batch i has key request_key(seed, 0, i)."""
    s = MultiHopSampler(local_hop_fn(graph, seed), graph.num_nodes)
    out = []
    for i, b in enumerate(batches_of(seeds, batch_size)):
        mb = s.sample([SampleRequest(b, fanouts, request_key(seed, 0, i))])[0]
        out.append(as_arrays(mb))
    return out


def as_arrays(mb) -> dict:
    d = {"n_id": mb.n_id.numpy(), "edge_index": mb.edge_index.numpy(), "e_id": mb.e_id.numpy(),
         "num_sampled_nodes": list(mb.num_sampled_nodes),
         "num_sampled_edges": list(mb.num_sampled_edges), "batch_size": mb.batch_size}
    if mb.x is not None:
        d["x"] = mb.x.numpy()
    if mb.y is not None:
        d["y"] = mb.y.numpy()
    return d


def assert_same(a: dict, b: dict, keys=("n_id", "edge_index", "e_id", "num_sampled_nodes",
                                        "num_sampled_edges", "batch_size")) -> None:
    for k in keys:
        va, vb = a[k], b[k]
        if isinstance(va, np.ndarray):
            assert va.dtype == vb.dtype and va.shape == vb.shape, k
            assert np.array_equal(va, vb), k
        else:
            assert va == vb, k


def topology_budget(d: str, rank: int, world: int, layout) -> int:
    """Bytes of the other hosts' topology as seen from ``rank`` (``layout[r]``: rank ``r``'s
    host): the budget that holds it and nothing more."""
    from mnmg_sampler.distributed.fit import part_bytes
    from mnmg_sampler.graph.partition_io import load_partition

    return sum(part_bytes(load_partition(d, r, world, verify="off"))[0]
               for r in range(world) if layout[r] != layout[rank])
