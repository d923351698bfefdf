"""Runs under NUMBA_ENABLE_CUDASIM=1 (started by test_cuda_temporal.py): the temporal CUDA kernel
vs the temporal CPU kernel.

Prints one JSON document: per case, whether ``(counts, neighbors, relations, edge_ids)`` are
equal bit for bit, how many edges came out, and how many of the graph's edges were admissible.
"""

from __future__ import annotations

import json
import os
import sys
import warnings

import numpy as np

# on a GPU machine, MNMG_GPU_TESTS_ON_DEVICE=1 runs the same comparisons on the device
if (os.environ.get("NUMBA_ENABLE_CUDASIM") != "1"
        and os.environ.get("MNMG_GPU_TESTS_ON_DEVICE") != "1"):
    sys.exit("temporal_worker.py: set NUMBA_ENABLE_CUDASIM=1 (or MNMG_GPU_TESTS_ON_DEVICE=1)")

warnings.filterwarnings("ignore", "overflow encountered", RuntimeWarning)

from mnmg_sampler.graph.typed import typed_graph  # noqa: E402
from mnmg_sampler.ops import cuda as cuda_typed  # noqa: E402
from mnmg_sampler.ops import typed  # noqa: E402


def graphs() -> dict:
    g = np.random.default_rng(0)
    n = {"a": 30, "b": 20}
    rels = [("a", "x", "a"), ("b", "y", "a"), ("a", "z", "b")]
    ei = {r: np.stack([g.integers(0, n[r[0]], 4 * n[r[2]]), g.integers(0, n[r[2]], 4 * n[r[2]])])
          for r in rels}
    et = {r: g.integers(0, 50, v.shape[1]) for r, v in ei.items()}
    nt = {t: g.integers(0, 50, c) for t, c in n.items()}
    w = (g.random(ei[("b", "y", "a")].shape[1]) + 0.05).astype(np.float32)
    base = {"num_nodes": n, "edge_index": ei}
    return {"edge": typed_graph({**base, "edge_time": et}),
            "node": typed_graph({**base, "node_time": nt}),
            "weighted": typed_graph({**base, "edge_time": et,
                                     "edge_weight": {("b", "y", "a"): w}})}


def main() -> None:
    results = {}
    for name, g in graphs().items():
        rows = np.arange(g.num_nodes, dtype=np.int64)
        keys = (rows * 7919) % 1000
        bounds = (rows * 13) % 60
        R = len(g.edge_types)
        for label, f in (("f2", 2), ("all", -1)):
            for rep in (0, 1):
                for last in (0, 1):
                    args = (g, rows, rows, keys, np.zeros(rows.size, np.int64),
                            np.full((1, R), f), [rep], 5, 1)
                    kw = {"bounds": bounds, "last": [last]}
                    cpu = typed.sample_typed_neighbors(*args, **kw)
                    gpu = cuda_typed.sample_typed_neighbors_cuda(*args, **kw)
                    results[f"{name}/{label}/r{rep}/last{last}"] = {
                        "equal": all(np.array_equal(x, y.cpu().numpy())
                                     for x, y in zip(cpu, gpu, strict=True)),
                        "n_out": int(cpu[1].size)}
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
