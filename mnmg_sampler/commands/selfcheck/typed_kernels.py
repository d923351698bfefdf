"""Typed kernel lines: the one-call-per-hop kernel of typed graphs against its twins.

* ``kernel.cpu.typed``: :func:`mnmg_sampler.ops.typed.sample_typed_neighbors` on every thread
  against one thread, and on the one-type view of the graph against the homogeneous kernel bit
  for bit (the format's promise: a homogeneous graph is the one-type case).
* ``kernel.cuda.typed``: :mod:`mnmg_sampler.ops.cuda_typed` against the CPU kernel on the typed
  view of the workload graph (3 node types, 9 relations, some weighted), on the GPU or in
  Numba's simulator.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

from .kernels import NO_DEVICE, SEED, Workload, _threads_text, quiet_wraparound
from .result import FAIL, PASS, Check, compare, inject, skipped

HOP = 2
TYPED_OUT = ("counts", "neighbors", "relations", "edge_ids")


class TypedWork:
    """The workload graph typed (node types by id range, one relation per type pair, the
    relations into the first type weighted) and the per-request fanout tables of the cases."""

    def __init__(self, w: Workload) -> None:
        from ...bench.hetero import typed_view

        self.w = w
        self.graph, _ = typed_view(w.graph, weights=w.weights)
        g = self.graph
        R = len(g.edge_types)
        rng = np.random.default_rng(SEED)
        table = rng.choice(np.array([-1, 0, 1, 3, 10]), (2, R)).astype(np.int64)
        self.cases = [("fanout 5, every relation", np.full((1, R), 5, np.int64), [0]),
                      ("fanout 3 with replacement", np.full((1, R), 3, np.int64), [1]),
                      ("mixed fanouts, two requests", table, [0, 1])]
        n = g.num_nodes
        self.rows = np.tile(np.arange(n, dtype=np.int64), max(1, -(-4096 // n)))

    def args(self, case, n: int | None = None) -> tuple:
        """``(rows, nodes, keys, req, fanouts, replace, seed, hop)`` of ``case``."""
        _, fan, rep = case
        rows = self.rows if n is None else self.rows[:n]
        keys = np.where(np.arange(rows.size) % 3 == 0, 987654321, 42).astype(np.int64)
        req = (np.arange(rows.size) % fan.shape[0]).astype(np.int64)
        replace = np.array(rep[: fan.shape[0]], np.uint8)
        return rows, rows, keys, req, fan, replace, SEED, HOP

    @cached_property
    def one_type(self):
        """The workload graph as a one-type, one-relation typed graph."""
        from ...graph.typed import typed_graph

        g = self.w.graph
        dst = np.repeat(np.arange(g.num_nodes, dtype=np.int64), g.degrees())
        return typed_graph({"num_nodes": {"n": g.num_nodes},
                            "edge_index": {("n", "to", "n"): np.stack([g.indices, dst])}})


def cpu_typed(w: Workload) -> Check:
    import numba

    from ...ops import cpu
    from ...ops.typed import sample_typed_neighbors

    name = "kernel.cpu.typed"
    t = TypedWork(w)
    threads = numba.get_num_threads()
    for case in t.cases:
        many = sample_typed_neighbors(t.graph, *t.args(case))
        numba.set_num_threads(1)
        try:
            one = sample_typed_neighbors(t.graph, *t.args(case))
        finally:
            numba.set_num_threads(threads)
        diff = compare(one, [many[0], inject(name, many[1], w.rank), *many[2:]], TYPED_OUT)
        if diff:
            return Check(name, FAIL, f"{case[0]}: {diff}")
    g = w.graph
    rows, keys = w.rows, w.keys
    # the one-type graph's edge ids are its CSR positions: compare with the kernel's positions
    want = cpu.sample_neighbors(g.indptr, g.indices, None, rows, rows, keys, SEED, HOP, 10, False)
    got = sample_typed_neighbors(t.one_type, rows, rows, keys, np.zeros(rows.size, np.int64),
                                 np.full((1, 1), 10, np.int64), np.zeros(1, np.uint8), SEED, HOP)
    diff = compare(want, [got[0], got[1], got[3]], ("counts", "neighbors", "edge_ids"))
    if diff:
        return Check(name, FAIL, f"one-type graph against the homogeneous kernel: {diff}")
    g = t.graph
    return Check(name, PASS, f"{len(t.cases)} cases on {len(g.node_types)} types and "
                 f"{len(g.edge_types)} relations {_threads_text(threads)}; the one-type graph "
                 "equals the homogeneous kernel", data={"relations": len(g.edge_types),
                                                        "threads": threads})


def cuda_typed(w: Workload) -> Check:
    name = "kernel.cuda.typed"
    if w.device is None:
        return skipped(name, NO_DEVICE)
    from ...ops.cuda_typed import sample_typed_neighbors_cuda
    from ...ops.typed import sample_typed_neighbors

    t = TypedWork(w)
    n = w.cuda_nodes
    with quiet_wraparound():
        for case in t.cases:
            args = t.args(case, n)
            want = sample_typed_neighbors(t.graph, *args)
            got = [x.cpu().numpy() for x in sample_typed_neighbors_cuda(t.graph, *args)]
            diff = compare(want, [got[0], inject(name, got[1], w.rank), *got[2:]], TYPED_OUT)
            if diff:
                return Check(name, FAIL, f"{case[0]}: {diff}")
    where = "Numba's CUDA simulator" if w.sim else str(w.device)
    return Check(name, PASS, f"{len(t.cases)} cases on {len(t.graph.edge_types)} relations equal "
                 f"the CPU kernel on {where} ({n} nodes per call)",
                 data={"device": where, "nodes_per_call": n})


CHECKS = (("kernel.cpu.typed", cpu_typed), ("kernel.cuda.typed", cuda_typed))
