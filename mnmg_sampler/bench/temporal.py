"""``mnmg-sampler bench single --temporal``: the temporal kernel against the non-temporal typed
kernel on the same graph.

The loaded graph as one type (:func:`~mnmg_sampler.bench.hetero.typed_view`) with uniform random
int64 edge times in ``[0, 2**20)`` (fixed seed). Interleaved repeats over one ``--kernel-nodes``
frontier (with edge ids): :func:`mnmg_sampler.ops.typed.sample_typed_neighbors` without time
against the same kernel bounded by the median edge time, ``"uniform"`` and ``"last"``. They
sample different edges (the temporal one about half of each neighborhood), so cost per sampled
edge compares; ``uniform on admissible edges`` (the untimed kernel on a static graph of the
edges with time <= the median: the temporal kernel's edge counts) isolates the time filter's
cost. Costs are this process's CPU seconds (wall-time ratios beside them: on shared cores wall
time also counts other jobs).
"""

from __future__ import annotations

import time

import numpy as np

COST_TARGET = 1.5  # temporal cost per sampled edge <= 1.5x the non-temporal kernel's
TIME_RANGE = 2**20


def bench_temporal(graph, seeds, fanouts, replace: bool, seed: int, batch_size: int,
                   kernel_nodes: int, repeats: int) -> dict:
    """The measurements of the module docstring, as a dict."""
    from ..graph.temporal import attach_time
    from ..ops import typed
    from .hetero import typed_view
    from .timing import block_keys, interleaved_runs, per_edge

    t0 = time.perf_counter()
    tg, _ = typed_view(graph, 1)
    et = tg.edge_types[0]
    times = np.random.default_rng(seed).integers(0, TIME_RANGE, tg.num_edges)
    attach_time(tg, {et: times})
    build_s = time.perf_counter() - t0
    bound = int(np.median(times))
    nodes = np.ascontiguousarray(seeds[:kernel_nodes], np.int64)
    keys = block_keys(seed, nodes.size, batch_size)
    k = fanouts[0]
    fan = np.full((1, 1), k, np.int64)
    req = np.zeros(nodes.size, np.int64)
    bounds = np.full(nodes.size, bound, np.int64)

    def plain():
        return typed.sample_typed_neighbors(tg, nodes, nodes, keys, req, fan, [replace], seed, 0)

    def temporal_fn(last):
        return lambda: typed.sample_typed_neighbors(tg, nodes, nodes, keys, req, fan, [replace],
                                                    seed, 0, bounds=bounds, last=[last])

    from ..graph.typed import typed_graph

    keep = tg.edge_time <= bound
    nt = tg.node_types[0]
    dst = np.repeat(np.arange(tg.num_nodes, dtype=np.int64), np.diff(tg.indptr))[keep]
    static = typed_graph({"num_nodes": {nt: tg.num_nodes},
                          "edge_index": {et: np.stack([tg.indices[keep], dst])}})
    del keep, dst

    def filtered():
        return typed.sample_typed_neighbors(static, nodes, nodes, keys, req, fan, [replace],
                                            seed, 0)

    fns = {"uniform (no time)": plain, "uniform on admissible edges": filtered,
           "temporal uniform": temporal_fn(0), "temporal last": temporal_fn(1)}
    edges = {name: int(f()[0].sum()) for name, f in fns.items()}  # warm-up and edge counts
    runs, cpu = interleaved_runs(fns, repeats)
    res = {name: per_edge(runs[name], edges[name], cpu[name]) for name in fns}
    base = res["uniform (no time)"]["cpu_ns_per_edge"]
    same = res["uniform on admissible edges"]["cpu_ns_per_edge"]
    wall = res["uniform (no time)"]["ns_per_edge"]
    return {"build_s": build_s, "nodes": int(nodes.size), "fanout": k, "bound": bound,
            "kernels": res,
            "cost_ratio": {name: res[name]["cpu_ns_per_edge"] / base for name in fns},
            "cost_ratio_admissible": {name: res[name]["cpu_ns_per_edge"] / same for name in fns},
            "cost_ratio_wall": {name: res[name]["ns_per_edge"] / wall for name in fns}}


def print_temporal(res: dict) -> None:
    """The human-readable lines of :func:`bench_temporal`'s result."""
    print(f"\ntimed one-type graph built (sorted by edge time) in {res['build_s']:.1f}s; "
          f"one hop, {res['nodes']:,} nodes, fanout {res['fanout']}, seeds' time = median")
    for name, r in res["kernels"].items():
        ratio = res["cost_ratio"][name]
        verdict = "" if name == "uniform (no time)" else (
            f", {ratio:.2f}x uniform (target <= {COST_TARGET:g}x: "
            f"{'met' if ratio <= COST_TARGET else 'MISSED'}), "
            f"{res['cost_ratio_admissible'][name]:.2f}x uniform on admissible edges")
        print(f"  {name:<27} {r['cpu_ns_per_edge']:.1f} CPU ns/edge, {r['edges']:,} edges"
              f"{verdict}")
    print("  wall time per edge against uniform (no time): " + ", ".join(
        f"{name} {ratio:.2f}x" for name, ratio in res["cost_ratio_wall"].items()))
