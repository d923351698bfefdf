"""``mnmg-sampler bench single --hetero``: the typed kernel and sampler against the homogeneous
ones on the same edges, typed (:func:`typed_view`: :data:`NUM_TYPES` node types by id range, one
relation per type pair, each with the fanouts of ``--fanouts``).

Interleaved repeats on the same frontier:

1. **one hop**: :func:`mnmg_sampler.ops.typed.sample_typed_neighbors` (with edge ids) against
   :func:`mnmg_sampler.ops.cpu.sample_neighbors` over the same (node, relation) segments as CSR
   rows (the same edge counts, so the ratio is the typed kernel's own cost: the target) and over
   the nodes' whole rows (``k`` per node: also the cost of per-relation fanouts). Costs are CPU
   seconds per sampled edge (wall times beside them: on shared cores they also count other jobs).
2. **multi-hop minibatches** of ``t0`` seeds: ``HeteroSampler`` against ``MultiHopSampler`` and,
   with a peer venv, **DGL 2.1's heterograph** ``NeighborSampler``
   (:mod:`mnmg_sampler.bench.dgl_hetero_peer`) on the same seeds and fanouts. DGL re-samples every
   layer's destination nodes, so compare sampled edges per second.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

NUM_TYPES = 3
COST_TARGET = 1.15  # typed cost per sampled edge <= 1.15x the homogeneous kernel's (issue 30)
DGL_TARGET = 2.2  # typed multi-hop edges/s >= 2.2x DGL's heterograph NeighborSampler's (issue 30)


def typed_view(graph, num_types: int = NUM_TYPES, weights: np.ndarray | None = None):
    """``graph`` as a typed graph: node types by id range, one relation per type pair; with
    ``weights`` (one per CSR edge), the relations into the first type carry theirs."""
    from ..graph.typed import typed_graph

    n = graph.num_nodes
    bounds = np.linspace(0, n, num_types + 1).astype(np.int64)
    dst = np.repeat(np.arange(n, dtype=np.int64), graph.degrees())
    src = graph.indices
    ts = np.searchsorted(bounds, src, side="right") - 1
    td = np.searchsorted(bounds, dst, side="right") - 1
    spec: dict = {"num_nodes": {f"t{t}": int(bounds[t + 1] - bounds[t])
                                for t in range(num_types)}, "edge_index": {}}
    for a in range(num_types):
        for b in range(num_types):
            sel = (ts == a) & (td == b)
            rel = (f"t{a}", f"r{a}{b}", f"t{b}")
            spec["edge_index"][rel] = np.stack([src[sel] - bounds[a], dst[sel] - bounds[b]])
            if weights is not None and b == 0:
                spec.setdefault("edge_weight", {})[rel] = weights[sel]
    return typed_graph(spec, f"{graph.name} typed ({num_types} types)"), bounds


def bench_hetero(graph, seeds, fanouts, replace: bool, seed: int, batch_size: int,
                 batches: int, kernel_nodes: int, repeats: int, *, peer=None,
                 peer_repeats: int = 3, threads: int = 1,
                 peer_missing: str = "not measured") -> dict:
    """The measurements of the module docstring, as a dict; ``peer``: the Python of a DGL peer
    venv (``None``: DGL not measured, ``peer_missing`` says why)."""
    from ..ops import cpu, typed
    from .timing import MultiHopBench, block_keys, interleaved_runs, per_edge

    t0 = time.perf_counter()
    tg, bounds = typed_view(graph)
    build_s = time.perf_counter() - t0
    nodes = np.ascontiguousarray(seeds[:kernel_nodes], np.int64)
    keys = block_keys(seed, nodes.size, batch_size)
    k = fanouts[0]
    R = len(tg.edge_types)
    fan = np.full((1, R), k, np.int64)
    req = np.zeros(nodes.size, np.int64)
    rows = nodes  # types are id ranges in order, so internal ids are the original ids

    # the segments of every node, in node then relation order (all types have R_t relations)
    t_of = np.searchsorted(tg.node_type_offset, rows, side="right") - 1
    r_t = np.diff(tg.rel_offset)[t_of]
    first = tg.seg_base[t_of] + (rows - tg.node_type_offset[t_of]) * r_t
    segs = np.repeat(first - np.cumsum(r_t) + r_t, r_t) + np.arange(int(r_t.sum()))
    seg_nodes, seg_keys = np.repeat(rows, r_t), np.repeat(keys, r_t)

    fns = {
        "homogeneous": lambda: cpu.sample_neighbors(graph.indptr, graph.indices, graph.edge_ids,
                                                    nodes, nodes, keys, seed, 0, k, replace),
        "homogeneous_segments": lambda: cpu.sample_neighbors(
            tg.indptr, tg.indices, tg.edge_ids, segs, seg_nodes, seg_keys, seed, 0, k, replace),
        "typed": lambda: typed.sample_typed_neighbors(tg, rows, rows, keys, req, fan, [replace],
                                                      seed, 0),
    }
    edges = {name: int(f()[0].sum()) for name, f in fns.items()}  # warm-up and edge counts
    runs, cpu_s = interleaved_runs(fns, repeats)
    kern: dict = {name: per_edge(runs[name], edges[name], cpu_s[name]) for name in fns}
    kern.update(nodes=int(nodes.size), segments=int(segs.size), fanout=k, relations=R)
    for name, ref in (("cost_ratio", "homogeneous_segments"), ("cost_ratio_rows", "homogeneous")):
        kern[name] = kern["typed"]["cpu_ns_per_edge"] / kern[ref]["cpu_ns_per_edge"]
        kern[name + "_wall"] = kern["typed"]["ns_per_edge"] / kern[ref]["ns_per_edge"]

    t0_seeds = seeds[seeds < bounds[1]]
    nb = min(batches, -(-t0_seeds.size // batch_size))
    seeds0 = t0_seeds[:nb * batch_size]
    # the same seeds: MultiHopSampler on the graph, HeteroSampler on the typed view (type t0)
    mh = {"homogeneous": MultiHopBench(graph, seeds0, fanouts, replace, seed, batch_size, nb),
          "typed": MultiHopBench(tg, seeds0, fanouts, replace, seed, batch_size, nb, "t0")}

    def run_once() -> None:  # one timed repeat of both, so DGL's runs interleave with them
        for b in mh.values():
            b.run_once()

    dgl: dict = {"available": False, "error": peer_missing}
    if peer:
        dgl = bench_dgl_hetero(tg, "t0", seeds0, peer, fanouts, replace, batch_size, nb, threads,
                               peer_repeats, run_once)
    while len(mh["typed"].seconds) < repeats:
        run_once()
    multi: dict = {name: dict(per_edge(b.seconds, b.edges), best_per_s=b.edges / min(b.seconds))
                   for name, b in mh.items()}
    multi.update(batches=nb, cost_ratio=multi["typed"]["ns_per_edge"]
                 / multi["homogeneous"]["ns_per_edge"])
    if dgl.get("available"):
        dgl["typed_vs_dgl"] = multi["typed"]["per_s"] / dgl["sampled_edges_per_s"]
        dgl["typed_vs_dgl_best"] = multi["typed"]["best_per_s"] / dgl["best_per_s"]
    return {"num_types": NUM_TYPES, "relations": [list(e) for e in tg.edge_types],
            "typed_build_s": build_s, "kernel": kern, "multihop": multi, "dgl": dgl}


def save_typed_graph(tg, path, input_type: str, seeds: np.ndarray) -> None:
    """Write ``tg`` for :mod:`mnmg_sampler.bench.dgl_hetero_peer` (its docstring has the keys):
    per relation its edges in per-type ids, edge ``i`` being our per-relation edge id ``i``."""
    T = len(tg.node_types)
    seg_len = np.diff(tg.indptr)
    arrays: dict = {}
    for r, (s_t, _, d_t) in enumerate(tg.edge_types):
        t = tg.node_types.index(d_t)
        lo, hi = int(tg.rel_offset[t]), int(tg.rel_offset[t + 1])
        n = int(tg.node_type_offset[t + 1] - tg.node_type_offset[t])
        segs = tg.seg_base[t] + np.arange(n, dtype=np.int64) * (hi - lo) + (r - lo)
        deg = seg_len[segs]
        entries = np.repeat(tg.indptr[segs] - np.cumsum(deg) + deg, deg) + np.arange(
            int(deg.sum()), dtype=np.int64)
        src = np.empty(entries.size, np.int64)
        dst = np.empty(entries.size, np.int64)
        eid = tg.edge_ids[entries]
        src[eid] = tg.indices[entries] - tg.node_type_offset[tg.node_types.index(s_t)]
        dst[eid] = np.repeat(np.arange(n, dtype=np.int64), deg)
        arrays[f"src_{r}"], arrays[f"dst_{r}"] = src, dst
    np.savez(path, node_types=np.array(tg.node_types), rel_src=np.array([e[0] for e in
                                                                          tg.edge_types]),
             rel_name=np.array([e[1] for e in tg.edge_types]),
             rel_dst=np.array([e[2] for e in tg.edge_types]),
             num_nodes=np.diff(tg.node_type_offset).astype(np.int64)[:T],
             input_type=np.array(input_type), seeds=np.asarray(seeds, np.int64), **arrays)


def bench_dgl_hetero(tg, input_type: str, seeds, python, fanouts, replace: bool,
                     batch_size: int, batches: int, threads: int, repeats: int,
                     before_each=None) -> dict:
    """DGL's heterograph ``NeighborSampler`` on ``tg`` with the same seeds and per-relation
    fanouts, ``repeats`` subprocesses of the peer venv's ``python`` (median run), each after
    ``before_each()``; or ``{"available": False, "error": ...}``."""
    from .peers import run_peer

    return run_peer(python, Path(__file__).with_name("dgl_hetero_peer.py"),
                    lambda path: save_typed_graph(tg, path, input_type, seeds), fanouts,
                    threads=threads, batch_size=batch_size, replace=replace, repeats=repeats,
                    before_each=before_each, options=("--batches", batches),
                    python=str(python))


def print_hetero(res: dict) -> None:
    """The human-readable lines of :func:`bench_hetero`'s result."""
    k, m, d = res["kernel"], res["multihop"], res["dgl"]
    print(f"\ntyped view: {res['num_types']} node types, {len(res['relations'])} relations, "
          f"built in {res['typed_build_s']:.1f}s")
    print(f"one hop, {k['nodes']:,} nodes ({k['segments']:,} node-relation segments), fanout "
          f"{k['fanout']} per relation")
    for name, label in (("typed", "typed kernel"),
                        ("homogeneous_segments", "homogeneous, segments as rows"),
                        ("homogeneous", "homogeneous, whole rows")):
        r = k[name]
        print(f"  {label:<30} {r['cpu_ns_per_edge']:.1f} CPU ns/edge, {r['edges']:,} edges "
              f"(wall: {r['per_s'] / 1e6:,.2f} M edges/s)")
    verdict = "met" if k["cost_ratio"] <= COST_TARGET else "MISSED"
    print(f"  typed / homogeneous on the same segments (same edge counts)  "
          f"{k['cost_ratio']:.2f}x CPU time (target <= {COST_TARGET:g}x: {verdict}); wall "
          f"{k['cost_ratio_wall']:.2f}x")
    print(f"  typed / homogeneous on whole rows (k per node)  {k['cost_ratio_rows']:.2f}x CPU "
          f"time; wall {k['cost_ratio_rows_wall']:.2f}x")
    print(f"multi-hop, {m['batches']} batches of t0 seeds")
    for name in ("homogeneous", "typed"):
        r = m[name]
        print(f"  {name:<12} sampler {r['per_s'] / 1e6:,.2f} M edges/s, "
              f"{r['ns_per_edge']:.1f} ns/edge, {r['edges']:,} edges")
    print(f"  typed / homogeneous cost per edge  {m['cost_ratio']:.2f}x")
    if d.get("available"):
        ratio = d["typed_vs_dgl"]
        print(f"  DGL {d.get('version', '?')} heterograph NeighborSampler "
              f"{d['sampled_edges_per_s'] / 1e6:,.2f} M edges/s, {d['edges_per_batch']:,.0f} "
              f"edges/batch (median run)")
        print(f"  typed / DGL  {ratio:.2f}x (target >= {DGL_TARGET:g}x: "
              f"{'met' if ratio >= DGL_TARGET else 'MISSED'}); best runs "
              f"{d['typed_vs_dgl_best']:.2f}x")
        print("  note: DGL re-samples every layer's destination nodes, so its edges per batch "
              "differ; compare sampled edges per second")
    else:
        print(f"  DGL heterograph sampler: {d['error']}")
