"""Runs under NUMBA_ENABLE_CUDASIM=1 (started by test_cuda_kernels.py): CUDA kernels vs CPU kernels.

Prints one JSON document on stdout: for every case, whether the CUDA kernel's
``(counts, neighbors, edge_ids)`` equal the CPU kernel's bit for bit, plus the same comparison for
a deliberately wrong kernel variant (off-by-one RNG slot), which must come out unequal.
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
    sys.exit("sim_worker.py: set NUMBA_ENABLE_CUDASIM=1 (or MNMG_GPU_TESTS_ON_DEVICE=1)")

# uint64 wrap-around in the RNG is intended; the simulator runs it as numpy scalars, which warn.
warnings.filterwarnings("ignore", "overflow encountered", RuntimeWarning)

from numba import cuda  # noqa: E402

from mnmg_sampler.graph.csr import CSRGraph  # noqa: E402
from mnmg_sampler.graph.rmat import rmat_edges  # noqa: E402
from mnmg_sampler.ops import cpu, weighted  # noqa: E402
from mnmg_sampler.ops import cuda as ocuda  # noqa: E402
from mnmg_sampler.system.gpu import simulator_enabled  # noqa: E402


def wrong_positions(out, o, deg, k, fanout, replace, base):
    """``cpu.sample_positions`` with one deliberate bug: every draw uses slot + 1."""
    if fanout < 0 or (not replace and deg <= fanout):
        for j in range(k):
            out[o + j] = j
    elif replace:
        for j in range(k):
            out[o + j] = bounded(draw(base, j + 1), deg)  # noqa: F821 (device namespace)
    else:
        for i in range(k):
            j = deg - k + i
            t = bounded(draw(base, i + 1), j + 1)  # noqa: F821 (device namespace)
            for m in range(i):
                if out[o + m] == t:
                    t = j
                    break
            out[o + i] = t


def wrong_weighted_positions(out, o, w, start, deg, nz, k, fanout, replace, base, c, so):
    """``weighted.weighted_positions`` with one deliberate bug: every draw uses slot + 1."""
    if fanout < 0 or (not replace and nz <= fanout):
        j = 0
        for p in range(deg):
            if w[start + p] > 0:
                out[o + j] = p
                j += 1
        return
    total = row_prefix(c, so, w, start, deg)  # noqa: F821 (device namespace)
    slot = 1
    for i in range(k):
        while True:
            t = search(c, so, deg, unit(draw(base, slot)) * total)  # noqa: F821
            slot += 1
            taken = False
            for m in range(i):
                if replace == 0 and out[o + m] == t:
                    taken = True
            if not taken:
                break
        out[o + i] = t


def weights_for(g: CSRGraph, seed: int, skewed: bool = False) -> np.ndarray:
    """float32 weights, ~30% zeros, two all-zero rows; ``skewed``: one huge weight per row."""
    rng = np.random.default_rng(seed)
    w = (rng.random(g.num_edges) + 0.05).astype(np.float32)
    w[rng.random(g.num_edges) < 0.3] = 0
    deg = np.diff(g.indptr)
    for v in np.flatnonzero(deg > 0)[:2]:
        w[g.indptr[v]:g.indptr[v + 1]] = 0
    if skewed:
        w[g.indptr[:-1][deg > 0]] = 1e6  # the first entry of every row: draws after it reject
    return w


def compare_weighted(g: CSRGraph, w, rows, nodes, keys, seed, hop, fanout, replace, eids=True,
                     kernels=None, with_eids=True) -> dict:
    e = g.edge_ids if eids else None
    want = weighted.sample_neighbors_weighted(g.indptr, g.indices, e, w, rows, nodes, keys, seed,
                                              hop, fanout, replace, with_eids=with_eids)
    got = ocuda.sample_neighbors_weighted_cuda(g.indptr, g.indices, e, w, rows, nodes, keys,
                                               seed, hop, fanout, replace, with_eids=with_eids,
                                               kernels=kernels)
    equal = all(np.array_equal(x, t.cpu().numpy()) and t.cpu().numpy().dtype == x.dtype
                for x, t in zip(want, got, strict=True))
    return {"equal": bool(equal), "n_out": int(want[1].size)}


def graphs() -> dict[str, CSRGraph]:
    # The simulator runs one Python thread per node and call: each graph is as small as what it
    # covers allows. 64 nodes are two blocks of the simulator's 32 threads.
    rng = np.random.default_rng(11)
    out = {}
    n = 64
    out["random"] = CSRGraph.from_edges(rng.integers(0, n, 384), rng.integers(0, n, 384), n)
    src, dst = rmat_edges(6, edge_factor=6, seed=3)  # 64 nodes, power law, many isolated
    out["power_law"] = CSRGraph.from_edges(src, dst, 64)
    # degree-0 nodes on purpose, a hub (degree 60 > every fanout) and low-degree nodes
    n = 64
    hub_src = rng.integers(0, n, 60)
    low_dst = rng.integers(32, 58, 80)  # nodes 1..31 and 58..63 get no in-edge at all
    src = np.concatenate([hub_src, rng.integers(0, n, 80)])
    dst = np.concatenate([np.zeros(60, np.int64), low_dst])
    out["degree0"] = CSRGraph.from_edges(src, dst, n)
    # rows wider than 64: Floyd's duplicate test takes its hashed-bitmask path there
    n = 12
    deg = rng.integers(65, 200, n)
    out["wide"] = CSRGraph.from_edges(rng.integers(0, n, deg.sum()), np.repeat(np.arange(n), deg),
                                      n)
    return out


def compare(g: CSRGraph, rows, nodes, keys, seed, hop, fanout, replace, eids=True,
            kernels=None, with_eids=True) -> dict:
    e = g.edge_ids if eids else None
    want = cpu.sample_neighbors(g.indptr, g.indices, e, rows, nodes, keys, seed, hop,
                                fanout, replace, with_eids=with_eids)
    got = ocuda.sample_neighbors_cuda(g.indptr, g.indices, e, rows, nodes, keys, seed, hop,
                                      fanout, replace, with_eids=with_eids, kernels=kernels)
    equal = all(np.array_equal(w, t.cpu().numpy()) and t.cpu().numpy().dtype == w.dtype
                for w, t in zip(want, got, strict=True))
    return {"equal": bool(equal), "n_out": int(want[1].size),
            "n_zero_deg": int((np.diff(g.indptr)[rows] == 0).sum())}


def main() -> None:
    results: dict[str, dict] = {"_meta": {
        "simulator": simulator_enabled(),
        "kernel_type": type(ocuda._fill_kernel).__name__,
        "numba_cuda_module": cuda.jit.__module__,
    }}
    seed = 20240607
    for name, g in graphs().items():
        n = g.num_nodes
        rows = np.arange(n, dtype=np.int64)
        keys = np.where(rows % 3 == 0, 987654321, 42).astype(np.int64)  # two merged requests
        for fanout in (1, 3, 10, -1):
            for replace in (False, True):
                results[f"{name}/f{fanout}/r{int(replace)}"] = compare(
                    g, rows, rows, keys, seed, 1, fanout, replace)
        # per-node fanouts and replace flags in one launch (requests with different settings)
        rng = np.random.default_rng(5)
        fan = rng.choice(np.array([-1, 1, 2, 5, 25]), n)
        rep = rng.integers(0, 2, n).astype(np.uint8)
        results[f"{name}/mixed"] = compare(g, rows, rows, keys, seed, 2, fan, rep)
        # partition-style call: local rows, RNG keyed on original ids; no edge ids (CSR positions)
        sub = rng.permutation(n)[: n // 2]
        results[f"{name}/remapped_no_eids"] = compare(
            g, sub, sub * 7 + 3, keys[sub], seed + 1, 0, 4, False, eids=False)
        # the data path's call: no edge ids at all (the third output is empty on both)
        results[f"{name}/no_edge_ids"] = compare(g, rows, rows, keys, seed, 1, fan, rep,
                                                 with_eids=False)
        results[f"{name}/repeated_rows"] = compare(
            g, np.concatenate([sub, sub]), np.concatenate([sub, sub]),
            np.concatenate([keys[sub], keys[sub] + 1]), seed, 1, 3, False)
        # weighted kernels: the same cases, plus rows dominated by one weight (rebuild path)
        w = weights_for(g, 1)
        for fanout in (1, 3, 10, -1):
            for replace in (False, True):
                results[f"W/{name}/f{fanout}/r{int(replace)}"] = compare_weighted(
                    g, w, rows, rows, keys, seed, 1, fanout, replace)
        results[f"W/{name}/mixed"] = compare_weighted(g, w, rows, rows, keys, seed, 2, fan, rep)
        results[f"W/{name}/remapped_no_eids"] = compare_weighted(
            g, w, sub, sub * 7 + 3, keys[sub], seed + 1, 0, 4, False, eids=False)
        results[f"W/{name}/no_edge_ids"] = compare_weighted(g, w, rows, rows, keys, seed, 1, fan,
                                                            rep, with_eids=False)
        bad = weights_for(g, 3)
        bad[::5] = np.array([-1.0, np.nan, np.inf], np.float32)[np.arange(bad[::5].size) % 3]
        results[f"W/{name}/unvalidated"] = compare_weighted(g, bad, rows, rows, keys, seed, 1, fan,
                                                            rep)
        results[f"W/{name}/skewed"] = compare_weighted(g, weights_for(g, 2, skewed=True), rows,
                                                       rows, keys, seed, 1, 5, False)
    g = graphs()["random"]
    rows = np.arange(g.num_nodes, dtype=np.int64)
    keys = np.full(g.num_nodes, 7, np.int64)
    empty = ocuda.sample_neighbors_cuda(g.indptr, g.indices, g.edge_ids, rows[:0], rows[:0],
                                        keys[:0], seed, 0, 3, False)
    results["empty_call"] = {"equal": all(t.numel() == 0 for t in empty), "n_out": 0}
    wrong = ocuda.make_kernels(ocuda.device_function(wrong_positions, "wrong_positions"))
    for replace in (False, True):
        results[f"WRONG/r{int(replace)}"] = compare(g, rows, rows, keys, seed, 1, 3, replace,
                                                    kernels=wrong)
    wrong_w = ocuda.make_weighted_kernels(
        ocuda.device_function(wrong_weighted_positions, "wrong_weighted_positions"))
    w = weights_for(g, 1)
    for replace in (False, True):
        results[f"WRONG_W/r{int(replace)}"] = compare_weighted(g, w, rows, rows, keys, seed, 1, 3,
                                                               replace, kernels=wrong_w)
    empty = ocuda.sample_neighbors_weighted_cuda(g.indptr, g.indices, g.edge_ids, w, rows[:0],
                                                 rows[:0], keys[:0], seed, 0, 3, False)
    results["W/empty_call"] = {"equal": all(t.numel() == 0 for t in empty), "n_out": 0}
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
