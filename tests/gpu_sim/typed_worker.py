"""Runs under NUMBA_ENABLE_CUDASIM=1 (started by test_cuda_typed.py): the typed CUDA kernel vs the
typed CPU kernel.

Prints one JSON document: per case, whether ``(counts, neighbors, relations, edge_ids)`` are equal
bit for bit, plus the same comparison for a deliberately wrong kernel (RNG slot + 1).
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
    sys.exit("typed_worker.py: set NUMBA_ENABLE_CUDASIM=1 (or MNMG_GPU_TESTS_ON_DEVICE=1)")

warnings.filterwarnings("ignore", "overflow encountered", RuntimeWarning)

from mnmg_sampler.graph.typed import typed_graph  # noqa: E402
from mnmg_sampler.ops import cuda as cuda_typed  # noqa: E402
from mnmg_sampler.ops import cuda as ocuda  # noqa: E402
from mnmg_sampler.ops import typed  # noqa: E402


def wrong_positions(out, o, deg, k, fanout, replace, base):
    """``cpu.sample_positions`` with one deliberate bug: every draw uses slot + 1."""
    if fanout < 0 or (not replace and deg <= fanout):
        for j in range(k):
            out[o + j] = j
    else:
        for j in range(k):
            out[o + j] = bounded(draw(base, j + 1), deg)  # noqa: F821 (device namespace)


def graphs() -> dict:
    g = np.random.default_rng(0)
    n = {"a": 40, "b": 25, "c": 6}
    rels = [("a", "x", "a"), ("b", "y", "a"), ("a", "z", "b"), ("c", "u", "b"), ("b", "v", "b")]
    ei = {}
    for s, r, d in rels:
        m = 5 * n[d]
        ei[(s, r, d)] = np.stack([g.integers(0, n[s], m), (g.integers(0, n[d], m) ** 2) % n[d]])
    w = (g.random(ei[("b", "y", "a")].shape[1]) + 0.05).astype(np.float32)
    w[g.random(w.size) < 0.3] = 0
    one = {"num_nodes": {"a": 40}, "edge_index": {("a", "x", "a"): ei[("a", "x", "a")]}}
    return {"three_types": typed_graph({"num_nodes": n, "edge_index": ei}),
            "weighted": typed_graph({"num_nodes": n, "edge_index": ei,
                                     "edge_weight": {("b", "y", "a"): w}}),
            "one_type": typed_graph(one)}


def compare(g, rows, keys, req, fan, rep, kernels=None) -> dict:
    cpu_out = typed.sample_typed_neighbors(g, rows, rows, keys, req, fan, rep, 5, 1)
    gpu_out = cuda_typed.sample_typed_neighbors_cuda(g, rows, rows, keys, req, fan, rep, 5, 1,
                                                     kernels=kernels)
    equal = all(np.array_equal(a, b.cpu().numpy()) for a, b in zip(cpu_out, gpu_out, strict=True))
    return {"equal": equal, "n_out": int(cpu_out[1].size),
            "relations": int(np.unique(cpu_out[2]).size)}


def main() -> None:
    results = {}
    for name, g in graphs().items():
        rows = np.arange(g.num_nodes, dtype=np.int64)
        keys = (rows * 7919) % 1000
        R = len(g.edge_types)
        for label, row in (("f3", [3] * R), ("all", [-1] * R),
                           ("mixed", [(r % 4) - 1 for r in range(R)])):
            for rep in (0, 1):
                results[f"{name}/{label}/r{rep}"] = compare(
                    g, rows, keys, np.zeros(rows.size, np.int64), np.array([row]), [rep])
        req = rows % 2
        fan = np.array([[2] * R, [(r % 3) + 1 for r in range(R)]])
        results[f"{name}/two_requests"] = compare(g, rows, keys, req, fan, [0, 1])
    g = graphs()["three_types"]
    rows = np.arange(g.num_nodes, dtype=np.int64)
    wrong = cuda_typed.make_typed_kernels(ocuda.device_function(wrong_positions,
                                                                "wrong_positions_typed"))
    results["WRONG"] = compare(g, rows, rows, np.zeros(rows.size, np.int64),
                               np.array([[3] * len(g.edge_types)]), [1], kernels=wrong)
    out = cuda_typed.sample_typed_neighbors_cuda(g, rows[:0], rows[:0], rows[:0], rows[:0],
                                                 np.array([[3] * len(g.edge_types)]), [0], 5, 0)
    results["empty_call"] = {"equal": all(t.numel() == 0 for t in out), "n_out": 0}
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
