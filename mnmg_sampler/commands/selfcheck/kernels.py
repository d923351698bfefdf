"""Kernel lines: every sampling kernel against its twin on a generated graph, bit for bit, with
sampled edges per second beside a random-gather loop over the same array (``bench single``'s
ratio on CPU).

* ``kernel.cpu.uniform`` / ``kernel.cpu.weighted``: the numba CPU kernels on every thread against
  one thread (results must not depend on the thread count), every draw a real CSR entry of its
  node (with a positive weight, for the weighted kernel).
* ``kernel.cpu.negative``: link prediction's negative destinations, the compiled kernel against
  the RNG's own Python source (:mod:`mnmg_sampler.rng`) evaluated by numpy.
* ``kernel.cuda.uniform`` / ``kernel.cuda.weighted``: :mod:`mnmg_sampler.ops.cuda` against the CPU
  kernels, on the GPU or in Numba's simulator (``NUMBA_ENABLE_CUDASIM=1``, small sizes).
* ``kernel.cpu.typed``: :func:`mnmg_sampler.ops.typed.sample_typed_neighbors` on every thread
  against one thread, and on the one-type view of the graph against the homogeneous kernel.
* ``kernel.cuda.typed``: the CUDA typed kernel against the CPU one on the typed view of the
  workload graph (3 node types, 9 relations, some weighted).

Negative sampling has no CUDA twin, and time-bounded draws have no line.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import cached_property, partial

import numpy as np
import torch

from .result import FAIL, PASS, Check, compare, inject, median_seconds, quiet_wraparound, skipped

SEED = 20240607
HOP = 1
EDGE_FACTOR = 8
MIN_CPU_NODES = 4096  # a CPU call below this many nodes runs the serial kernels only
RATE_NODES = 1 << 18  # nodes of a timed call (the graph's nodes repeated, each time a new key)
SIM_NODES = 48  # nodes per CUDA call in the simulator (one Python thread per CUDA thread)
NO_DEVICE = "no CUDA device (set NUMBA_ENABLE_CUDASIM=1 to run them in Numba's simulator)"
OUT = ("counts", "neighbors", "edge_ids")


@dataclass
class Case:
    """One kernel call's settings: fanout and replace per call or per node, edge ids or not."""

    name: str
    fanout: object
    replace: object
    eids: bool = True
    with_eids: bool = True


class Workload:
    """The generated graph every kernel line samples: R-MAT with ``2**scale`` nodes, weights
    with zeros, and the nodes of two merged requests (two keys)."""

    def __init__(self, scale: int, device: torch.device | None, sim: bool, repeats: int,
                 rank: int = 0) -> None:
        from ...graph.csr import CSRGraph
        from ...graph.rmat import rmat_edges

        self.scale, self.device, self.sim, self.rank = scale, device, sim, rank
        self.repeats = 1 if sim else repeats
        n = 1 << scale
        src, dst = rmat_edges(scale, edge_factor=EDGE_FACTOR, seed=3)
        self.graph = g = CSRGraph.from_edges(src, dst, n, name=f"rmat:{scale}")
        rng = np.random.default_rng(SEED)
        w = (rng.random(g.num_edges) + 0.05).astype(np.float32)
        w[rng.random(g.num_edges) < 0.25] = 0
        self.weights = w
        reps = -(-MIN_CPU_NODES // n)
        self.rows = np.tile(np.arange(n, dtype=np.int64), reps)
        self.keys = np.where(np.arange(self.rows.size) % 3 == 0, 987654321, 42).astype(np.int64)
        self.keys += np.repeat(np.arange(reps, dtype=np.int64), n)  # each repetition its own key
        fan = rng.choice(np.array([-1, 1, 2, 5, 25]), self.rows.size)
        rep = rng.integers(0, 2, self.rows.size).astype(np.uint8)
        self.cases = [Case("fanout 10", 10, False), Case("fanout 3 with replacement", 3, True),
                      Case("fanout -1", -1, False), Case("per-node fanouts", fan, rep),
                      Case("no edge ids", fan, rep, eids=False, with_eids=False),
                      Case("CSR positions", 4, False, eids=False)]
        self.cuda_nodes = min(SIM_NODES, n) if sim else self.rows.size
        reps = -(-RATE_NODES // n)
        self.rate_rows = np.tile(np.arange(n, dtype=np.int64), reps)
        self.rate_keys = np.repeat(np.arange(reps, dtype=np.int64) * 7919 + 5, n)

    def describe(self) -> str:
        g = self.graph
        return f"rmat:{self.scale} ({g.num_nodes:,} nodes, {g.num_edges:,} edges)"

    def case_args(self, case: Case, n: int | None = None) -> tuple:
        """``(rows, nodes, keys, seed, hop, fanout, replace)``: the kernels' arguments after the
        graph's, for ``case`` over the first ``n`` nodes."""
        n = self.rows.size if n is None else n
        cut = (lambda a: a[:n]) if isinstance(case.fanout, np.ndarray) else (lambda a: a)
        return (self.rows[:n], self.rows[:n], self.keys[:n], SEED, HOP, cut(case.fanout),
                cut(case.replace))

    def rate_args(self, device: torch.device | None = None) -> tuple:
        """The kernels' arguments of a timed call: fanout 10 over :data:`RATE_NODES` nodes
        (on ``device`` as tensors when given; in the simulator, the CUDA call's few nodes)."""
        if device is None:
            return (self.rate_rows, self.rate_rows, self.rate_keys, SEED, HOP, 10, False)
        if self.sim:
            return self.case_args(self.cases[0], self.cuda_nodes)
        rows, keys = (torch.from_numpy(a).to(device) for a in (self.rate_rows, self.rate_keys))
        return (rows, rows, keys, SEED, HOP, 10, False)

    @cached_property
    def on_device(self) -> tuple:
        """``(indptr, indices, edge_ids, weights)`` as tensors on the device (the CPU in the
        simulator), copied once."""
        g = self.graph
        return tuple(torch.from_numpy(np.array(a)).to(self.device)
                     for a in (g.indptr, g.indices, g.edge_ids, self.weights))

    def sync(self) -> None:
        if self.device is not None and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


# ----------------------------------------------------------------------------------- CPU


def _threads_twin(name: str, w: Workload, call, cases=None, out=OUT) -> tuple[str | None, int]:
    """Every case (``w.cases``) on all threads and on one; ``(first difference, threads)``."""
    import numba

    threads = numba.get_num_threads()
    for case in w.cases if cases is None else cases:
        many = call(case)
        numba.set_num_threads(1)
        try:
            one = call(case)
        finally:
            numba.set_num_threads(threads)
        diff = compare(one, [many[0], inject(name, many[1], w.rank), *many[2:]], out)
        if diff:
            return f"{case.name}: {diff}", threads
    return None, threads


def _draws_are_edges(w: Workload, counts, nbr, pos, fanout, positive_only: bool) -> str | None:
    """Every draw is a CSR position of its own node's row (with a positive weight when
    ``positive_only``) holding the neighbor reported."""
    g = w.graph
    owner = np.repeat(w.rows, counts)
    if not (np.all(pos >= g.indptr[owner]) and np.all(pos < g.indptr[owner + 1])):
        return "a draw lies outside its node's neighbor list"
    if not np.array_equal(g.indices[pos], nbr):
        return "a reported neighbor is not the CSR entry drawn"
    if positive_only and not np.all(w.weights[pos] > 0):
        return "a draw has weight 0"
    deg = np.diff(g.indptr)[w.rows]
    if not positive_only and not np.array_equal(counts, np.minimum(deg, fanout)):
        return "a node's sample count is not min(degree, fanout)"
    return None


def _cpu_rate(w: Workload, call) -> dict:
    """The timed call's edges/s (with edge ids, as the sampler calls it) against the
    random-gather loop of :mod:`mnmg_sampler.bench.gather`: as many random reads of
    ``indices`` as the kernel sampled edges."""
    from ...bench.gather import gather_sum, random_positions

    args = w.rate_args()
    edges = int(call(w.cases[0], args)[1].size)
    kernel_s = median_seconds(lambda: call(w.cases[0], args), w.repeats)
    pos = random_positions(w.graph.num_edges, max(edges, 1), SEED)
    gather_sum(w.graph.indices, pos[:16])  # load the compiled loop
    g_s = median_seconds(lambda: gather_sum(w.graph.indices, pos), w.repeats)
    eps, gps = edges / max(kernel_s, 1e-12), edges / max(g_s, 1e-12)
    return {"timed_nodes": int(args[0].size), "timed_edges": edges, "edges_per_s": eps,
            "gather_reads_per_s": gps, "ratio_vs_gather": eps / gps}


def _threads_text(threads: int) -> str:
    if threads > 1:
        return f"equal on {threads} threads and on 1"
    return "run on 1 thread (numba has one: the parallel kernels are not compared)"


def _rate_text(r: dict) -> str:
    from ...system.console import fmt_count

    return (f"{fmt_count(r['edges_per_s'])} edges/s = {r['ratio_vs_gather']:.2f}x a random "
            f"gather ({fmt_count(r['gather_reads_per_s'])} reads/s)")


def _cpu_line(name: str, w: Workload, call, weighted: bool) -> Check:
    """Thread-count twins, draws checked against the CSR (``call(case)`` with CSR positions as
    edge ids), then the rate against the random gather."""
    diff, threads = _threads_twin(name, w, call)
    c, nb, pos = call(Case("CSR positions", 10, False, eids=False))
    diff = diff or _draws_are_edges(w, c, nb, pos, 10, weighted)
    data = {"graph": w.describe(), "threads": threads, "nodes_per_call": int(w.rows.size)}
    if diff:
        return Check(name, FAIL, diff, data=data)
    data.update(_cpu_rate(w, call))
    draws = "draws have positive weights" if weighted else "draws are real edges"
    return Check(name, PASS, f"{len(w.cases)} cases {_threads_text(threads)}, {draws}; "
                 f"{_rate_text(data)}", data=data)


def _cpu_kernel(weighted: bool):
    """The CPU kernel of a line: uniform, or weighted by the workload's weights."""
    from ...ops import cpu
    from ...ops.weighted import sample_neighbors_weighted

    def call(w: Workload, case: Case, args: tuple):
        g = w.graph
        e = g.edge_ids if case.eids else None
        if weighted:
            return sample_neighbors_weighted(g.indptr, g.indices, e, w.weights, *args,
                                             with_eids=case.with_eids)
        return cpu.sample_neighbors(g.indptr, g.indices, e, *args, with_eids=case.with_eids)

    return call


def cpu_uniform(w: Workload, weighted: bool = False) -> Check:
    call = _cpu_kernel(weighted)
    return _cpu_line(f"kernel.cpu.{'weighted' if weighted else 'uniform'}", w,
                     lambda case, args=None: call(w, case, args or w.case_args(case)), weighted)


def cpu_negative(w: Workload) -> Check:
    from ... import rng
    from ...ops.negative import NEG_HOP, negative_candidates
    from ...system.console import fmt_count

    name = "kernel.cpu.negative"
    n = w.graph.num_nodes
    pos_index = np.arange(w.rows.size, dtype=np.int64)
    slot = np.arange(w.rows.size, dtype=np.int64) % 7
    key = 123456789
    got = inject(name, negative_candidates(SEED, key, pos_index, slot, n), w.rank)
    with np.errstate(over="ignore"):  # uint64 wrap-around is the RNG's arithmetic
        base = rng.stream_base(np.uint64(SEED), np.uint64(key), np.uint64(NEG_HOP),
                               pos_index.astype(np.uint64))
        want = np.asarray(rng.bounded(rng.draw(base, slot.astype(np.uint64)), np.uint64(n)),
                          np.int64)
    diff = compare([want], [got], ["negatives"])
    if diff:
        return Check(name, FAIL, diff)
    t = median_seconds(lambda: negative_candidates(SEED, key, pos_index, slot, n), w.repeats)
    per_s = pos_index.size / max(t, 1e-12)
    return Check(name, PASS, f"{pos_index.size:,} draws equal the RNG's Python source; "
                 f"{fmt_count(per_s)} negatives/s (no CUDA twin exists)",
                 data={"draws": int(pos_index.size), "negatives_per_s": per_s})


# ----------------------------------------------------------------------------------- CUDA


def _cuda_line(name: str, w: Workload, cuda_call, cpu_call) -> Check:
    """Every case through ``cuda_call`` and ``cpu_call``; bit for bit; then the rates of the
    first case: the CUDA kernel, the CPU kernel and a random gather in device memory."""
    if w.device is None:
        return skipped(name, NO_DEVICE)
    with quiet_wraparound():
        return _cuda_compare(name, w, cuda_call, cpu_call)


def _cuda_compare(name: str, w: Workload, cuda_call, cpu_call) -> Check:
    from ...system.console import fmt_count

    n = w.cuda_nodes
    t0 = time.perf_counter()
    cuda_call(w.cases[0], w.case_args(w.cases[0], n))  # the first call compiles (JIT)
    w.sync()
    compile_s = time.perf_counter() - t0
    diff = _device_twin(name, w, w.cases, lambda c: w.case_args(c, n), cuda_call, cpu_call)
    if diff:
        return Check(name, FAIL, diff)
    where = "Numba's CUDA simulator" if w.sim else str(w.device)
    data = {"graph": w.describe(), "device": where, "nodes_per_call": n, "cases": len(w.cases),
            "first_call_s": compile_s}
    first, host, dev = w.cases[0], w.rate_args(), w.rate_args(w.device)
    k_edges = int(cuda_call(first, dev)[1].numel())
    c_edges = int(cpu_call(first, host)[1].size)
    k_s = median_seconds(lambda: cuda_call(first, dev), w.repeats, w.sync)
    c_s = median_seconds(lambda: cpu_call(first, host), w.repeats)
    indices = w.on_device[1]
    pos = torch.randint(0, max(int(indices.numel()), 1), (max(k_edges, 1),), device=indices.device)
    g_s = median_seconds(lambda: indices[pos].sum(), w.repeats, w.sync)
    data.update(timed_nodes=int(dev[0].shape[0]), edges_per_s=k_edges / max(k_s, 1e-12),
                cpu_edges_per_s=c_edges / max(c_s, 1e-12),
                gather_reads_per_s=k_edges / max(g_s, 1e-12))
    data["vs_cpu"] = data["edges_per_s"] / data["cpu_edges_per_s"]
    data["ratio_vs_gather"] = data["edges_per_s"] / data["gather_reads_per_s"]
    rates = (f"{fmt_count(data['edges_per_s'])} edges/s = {data['vs_cpu']:.2f}x the CPU kernel, "
             f"{data['ratio_vs_gather']:.2f}x a device gather")
    if w.sim:
        rates += " (simulator: not GPU figures)"
    return Check(name, PASS, f"{len(w.cases)} cases equal the CPU kernel on {where} "
                 f"({n} nodes per call, first call {compile_s:.1f}s); {rates}", data=data)


def _device_twin(name: str, w: Workload, cases, args_of, cuda_call, cpu_call,
                 out=OUT) -> str | None:
    """The first case whose CUDA result differs from the CPU kernel's, as a line's detail."""
    for case in cases:
        args = args_of(case)
        got = [t.cpu().numpy() for t in cuda_call(case, args)]
        diff = compare(cpu_call(case, args), [got[0], inject(name, got[1], w.rank), *got[2:]],
                       out)
        if diff:
            return f"{case.name}: {diff}"
    return None


def cuda_uniform(w: Workload, weighted: bool = False) -> Check:
    cpu_call = _cpu_kernel(weighted)

    def cuda_call(case: Case, args: tuple):
        from ...ops.cuda import sample_neighbors_cuda, sample_neighbors_weighted_cuda

        indptr, indices, eids, weights = w.on_device
        e = eids if case.eids else None
        if weighted:
            return sample_neighbors_weighted_cuda(indptr, indices, e, weights, *args,
                                                  with_eids=case.with_eids)
        return sample_neighbors_cuda(indptr, indices, e, *args, with_eids=case.with_eids)

    return _cuda_line(f"kernel.cuda.{'weighted' if weighted else 'uniform'}", w, cuda_call,
                      lambda case, args: cpu_call(w, case, args))


# ----------------------------------------------------------------------------------- typed

TYPED_HOP = 2
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
        self.cases = [Case("fanout 5, every relation", np.full((1, R), 5, np.int64), [0]),
                      Case("fanout 3 with replacement", np.full((1, R), 3, np.int64), [1]),
                      Case("mixed fanouts, two requests", table, [0, 1])]
        n = g.num_nodes
        self.rows = np.tile(np.arange(n, dtype=np.int64), max(1, -(-4096 // n)))

    def args(self, case: Case, n: int | None = None) -> tuple:
        """``(rows, nodes, keys, req, fanouts, replace, seed, hop)`` of ``case``."""
        fan, rep = case.fanout, case.replace
        rows = self.rows if n is None else self.rows[:n]
        keys = np.where(np.arange(rows.size) % 3 == 0, 987654321, 42).astype(np.int64)
        req = (np.arange(rows.size) % fan.shape[0]).astype(np.int64)
        replace = np.array(rep[: fan.shape[0]], np.uint8)
        return rows, rows, keys, req, fan, replace, SEED, TYPED_HOP


def cpu_typed(w: Workload) -> Check:
    from ...bench.hetero import typed_view
    from ...ops import cpu
    from ...ops.typed import sample_typed_neighbors

    name = "kernel.cpu.typed"
    t = TypedWork(w)
    diff, threads = _threads_twin(name, w, lambda c: sample_typed_neighbors(t.graph, *t.args(c)),
                                  t.cases, TYPED_OUT)
    if diff:
        return Check(name, FAIL, diff)
    g = w.graph
    rows, keys = w.rows, w.keys
    # the one-type graph's edge ids are its CSR positions: compare with the kernel's positions
    want = cpu.sample_neighbors(g.indptr, g.indices, None, rows, rows, keys, SEED, TYPED_HOP, 10,
                                False)
    got = sample_typed_neighbors(typed_view(g, 1)[0], rows, rows, keys,  # the one-type graph
                                 np.zeros(rows.size, np.int64), np.full((1, 1), 10, np.int64),
                                 np.zeros(1, np.uint8), SEED, TYPED_HOP)
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
    from ...ops.cuda import sample_typed_neighbors_cuda
    from ...ops.typed import sample_typed_neighbors

    t = TypedWork(w)
    n = w.cuda_nodes
    with quiet_wraparound():
        diff = _device_twin(name, w, t.cases, lambda c: t.args(c, n),
                            lambda _, a: sample_typed_neighbors_cuda(t.graph, *a),
                            lambda _, a: sample_typed_neighbors(t.graph, *a), TYPED_OUT)
    if diff:
        return Check(name, FAIL, diff)
    where = "Numba's CUDA simulator" if w.sim else str(w.device)
    return Check(name, PASS, f"{len(t.cases)} cases on {len(t.graph.edge_types)} relations equal "
                 f"the CPU kernel on {where} ({n} nodes per call)",
                 data={"device": where, "nodes_per_call": n})


CHECKS = (("kernel.cpu.uniform", cpu_uniform),
          ("kernel.cpu.weighted", partial(cpu_uniform, weighted=True)),
          ("kernel.cpu.negative", cpu_negative), ("kernel.cuda.uniform", cuda_uniform),
          ("kernel.cuda.weighted", partial(cuda_uniform, weighted=True)),
          ("kernel.cpu.typed", cpu_typed), ("kernel.cuda.typed", cuda_typed))
