"""``mnmg-sampler bench single --hetero``: the typed kernel and sampler against the homogeneous
ones, on the same edges.

The typed graph is the loaded graph with its nodes split into :data:`NUM_TYPES` types by id
range (``t0``, ``t1``, ...) and its edges into one relation per (source type, destination type)
pair (``(t1, r10, t0)``: edges from a ``t1`` node into a ``t0`` node): the same edges, typed.
Every relation gets the fanouts of ``--fanouts``.

Measured, interleaved repeats on the same frontier:

1. **one hop**: :func:`mnmg_sampler.ops.typed.sample_typed_neighbors` against
   :func:`mnmg_sampler.ops.cpu.sample_neighbors` over the same ``--kernel-nodes`` nodes (with
   edge ids), as seconds per sampled edge. They draw different edge sets (``min(k, degree)``
   per relation against per node), so the cost per sampled edge is the comparable number.
2. **multi-hop minibatches**: :class:`mnmg_sampler.hetero_sampler.HeteroSampler` with seeds of
   type ``t0`` against :class:`mnmg_sampler.sampler.MultiHopSampler` with the same seeds.

DGL's heterograph sampler is not measured here.
"""

from __future__ import annotations

import time

import numpy as np

NUM_TYPES = 3
COST_TARGET = 1.3  # typed cost per sampled edge <= 1.3x the homogeneous kernel's


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


def _per_edge(seconds: list[float], edges: int) -> dict:
    med = float(np.median(seconds))
    return {"seconds": seconds, "median_s": med, "edges": edges,
            "per_s": edges / med, "ns_per_edge": 1e9 * med / max(edges, 1)}


def bench_hetero(graph, seeds, fanouts, replace: bool, seed: int, batch_size: int,
                 batches: int, kernel_nodes: int, repeats: int) -> dict:
    """The measurements of the module docstring, as a dict."""
    from ..hetero_sampler import HeteroSampler, HeteroSampleRequest
    from ..ops import cpu, typed
    from ..ops.rng import request_key
    from ..sampler import MultiHopSampler, SampleRequest, local_hop_fn

    t0 = time.perf_counter()
    tg, bounds = typed_view(graph)
    build_s = time.perf_counter() - t0
    nodes = np.ascontiguousarray(seeds[:kernel_nodes], np.int64)
    keys = np.repeat(np.array([request_key(seed, 0, i) for i in range(-(-nodes.size //
                                                                         batch_size))]),
                     batch_size)[:nodes.size]
    k = fanouts[0]
    R = len(tg.edge_types)
    fan = np.full((1, R), k, np.int64)
    req = np.zeros(nodes.size, np.int64)
    rows = nodes  # types are id ranges in order, so internal ids are the original ids

    def homo():
        return cpu.sample_neighbors(graph.indptr, graph.indices, graph.edge_ids, nodes, nodes,
                                    keys, seed, 0, k, replace)

    def het():
        return typed.sample_typed_neighbors(tg, rows, rows, keys, req, fan, [replace], seed, 0)

    h_edges, t_edges = int(homo()[0].sum()), int(het()[0].sum())  # warm-up and edge counts
    runs: dict[str, list[float]] = {"homogeneous": [], "typed": []}
    for _ in range(repeats):
        for name, f in (("homogeneous", homo), ("typed", het)):
            t = time.perf_counter()
            f()
            runs[name].append(time.perf_counter() - t)
    kern = {"homogeneous": _per_edge(runs["homogeneous"], h_edges),
            "typed": _per_edge(runs["typed"], t_edges), "nodes": int(nodes.size),
            "fanout": k, "relations": R}
    kern["cost_ratio"] = kern["typed"]["ns_per_edge"] / kern["homogeneous"]["ns_per_edge"]

    t0_seeds = seeds[seeds < bounds[1]]
    nb = min(batches, -(-t0_seeds.size // batch_size))
    chunks = [t0_seeds[i * batch_size:(i + 1) * batch_size] for i in range(nb)]
    hs = HeteroSampler(tg, seed)
    ms = MultiHopSampler(local_hop_fn(graph, seed), graph.num_nodes)
    h_reqs = [HeteroSampleRequest("t0", c, fanouts, request_key(seed, 0, i), replace)
              for i, c in enumerate(chunks)]
    m_reqs = [SampleRequest(c, fanouts, request_key(seed, 0, i), replace)
              for i, c in enumerate(chunks)]
    hs.sample(h_reqs[:1])
    ms.sample(m_reqs[:1])
    mh: dict[str, list[float]] = {"homogeneous": [], "typed": []}
    edges = {"homogeneous": 0, "typed": 0}
    for _ in range(repeats):
        t = time.perf_counter()
        e = sum(int(b.e_id.numel()) for r in m_reqs for b in ms.sample([r]))
        mh["homogeneous"].append(time.perf_counter() - t)
        edges["homogeneous"] = e
        t = time.perf_counter()
        e = sum(sum(v.numel() for v in b.e_id.values()) for r in h_reqs for b in hs.sample([r]))
        mh["typed"].append(time.perf_counter() - t)
        edges["typed"] = int(e)
    multi = {name: _per_edge(mh[name], edges[name]) for name in mh}
    multi.update(batches=nb, cost_ratio=multi["typed"]["ns_per_edge"]
                 / multi["homogeneous"]["ns_per_edge"])
    return {"num_types": NUM_TYPES, "relations": [list(e) for e in tg.edge_types],
            "typed_build_s": build_s, "kernel": kern, "multihop": multi,
            "dgl": {"available": False, "error": "not measured: no DGL heterograph peer"}}


def print_hetero(res: dict) -> None:
    """The human-readable lines of :func:`bench_hetero`'s result."""
    k, m = res["kernel"], res["multihop"]
    print(f"\ntyped view: {res['num_types']} node types, {len(res['relations'])} relations, "
          f"built in {res['typed_build_s']:.1f}s")
    print(f"one hop, {k['nodes']:,} nodes, fanout {k['fanout']} per relation "
          f"(homogeneous: per node)")
    for name in ("homogeneous", "typed"):
        r = k[name]
        print(f"  {name:<12} kernel  {r['per_s'] / 1e6:,.2f} M edges/s, "
              f"{r['ns_per_edge']:.1f} ns/edge, {r['edges']:,} edges")
    verdict = "met" if k["cost_ratio"] <= COST_TARGET else "MISSED"
    print(f"  typed / homogeneous cost per edge  {k['cost_ratio']:.2f}x "
          f"(target <= {COST_TARGET:g}x: {verdict})")
    print(f"multi-hop, {m['batches']} batches of t0 seeds")
    for name in ("homogeneous", "typed"):
        r = m[name]
        print(f"  {name:<12} sampler {r['per_s'] / 1e6:,.2f} M edges/s, "
              f"{r['ns_per_edge']:.1f} ns/edge, {r['edges']:,} edges")
    print(f"  typed / homogeneous cost per edge  {m['cost_ratio']:.2f}x")
    print(f"  DGL heterograph sampler: {res['dgl']['error']}")
