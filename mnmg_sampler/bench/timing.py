"""Timed repeats shared by the one-process modes (``single``, ``--hetero``, ``--temporal``,
``link``): interleaved runs, so drifts in machine state hit every contender alike, and medians."""

from __future__ import annotations

import statistics
import time

import numpy as np


def median_rate(work: float, seconds: list[float]) -> dict:
    med = statistics.median(seconds)
    # best = fastest repeat: on a shared machine, interference only ever adds time
    return {"work": work, "seconds": seconds, "median_s": med, "per_s": work / med,
            "best_per_s": work / min(seconds)}


def per_edge(seconds: list[float], edges: int, cpu: list[float] | None = None) -> dict:
    med = float(np.median(seconds))
    out = {"seconds": seconds, "median_s": med, "edges": edges, "per_s": edges / med,
           "ns_per_edge": 1e9 * med / max(edges, 1)}
    if cpu is not None:
        out.update(cpu_seconds=cpu, cpu_ns_per_edge=1e9 * float(np.median(cpu)) / max(edges, 1))
    return out


def block_keys(seed: int, n: int, batch_size: int) -> np.ndarray:
    """The request key of each of ``n`` frontier nodes, in batches of ``batch_size`` (as the
    sampler keys them)."""
    from ..ops.rng import request_key

    keys = [request_key(seed, 0, i) for i in range(-(-n // batch_size))]
    return np.repeat(np.array(keys, np.int64), batch_size)[:n]


def interleaved_runs(fns: dict, repeats: int) -> tuple[dict, dict]:
    """``repeats`` interleaved runs of every function: their wall and CPU seconds (this
    process's). On shared cores the wall time also holds the time other jobs held the core, so
    the costs are compared in CPU time (the kernels run on this process's threads)."""
    wall: dict[str, list[float]] = {name: [] for name in fns}
    cpu: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, f in fns.items():
            t, c = time.perf_counter(), time.process_time()
            f()
            cpu[name].append(time.process_time() - c)
            wall[name].append(time.perf_counter() - t)
    return wall, cpu


class TimedBatches:
    """Timed repeats over the same ``n`` minibatches: :meth:`run_once` samples batch ``_one(i)``
    for ``i < n`` and records the time, sampled edges and nodes (typed batches: of all types).

    Each :meth:`run_once` is one timed repeat, so repeats can be interleaved with the DGL
    peer's runs and both see the same machine state.
    """

    def __init__(self, n: int) -> None:
        self.n, self.seconds = n, []
        self.edges = self.nodes = 0

    def _one(self, i: int):
        raise NotImplementedError

    def run_once(self) -> None:
        edges = nodes = 0
        t = time.perf_counter()
        for i in range(self.n):
            b = self._one(i)
            if b.typed:
                edges += sum(int(v.numel()) for v in b.e_id.values())
                nodes += sum(b.num_nodes.values())
            else:
                edges += int(b.e_id.numel())
                nodes += b.num_nodes
        self.seconds.append(time.perf_counter() - t)
        self.edges, self.nodes = edges, nodes

    def result(self) -> dict:
        out = median_rate(self.edges, self.seconds)
        n, med = self.n, out["median_s"]
        out.update(batches=n, edges=self.edges, nodes=self.nodes, edges_per_batch=self.edges / n,
                   nodes_per_batch=self.nodes / n, nodes_per_s=self.nodes / med,
                   batches_per_s=n / med)
        return out


class MultiHopBench(TimedBatches):
    """Timed minibatches, one request per ``sample`` call, as ``mnmg-sampler sample`` does; with
    ``input_type``, ``graph`` is a typed graph and the seeds are of that type."""

    def __init__(self, graph, seeds, fanouts, replace: bool, seed: int, batch_size: int,
                 batches: int, input_type: str | None = None) -> None:
        from ..ops.rng import request_key
        from ..sampling import sampler as s

        super().__init__(min(batches, -(-seeds.size // batch_size)))
        chunks = [seeds[i * batch_size:(i + 1) * batch_size] for i in range(self.n)]
        if input_type is None:
            self.sampler = s.MultiHopSampler(s.local_hop_fn(graph, seed), graph.num_nodes)
            self.reqs = [s.SampleRequest(c, fanouts, request_key(seed, 0, i), replace=replace)
                         for i, c in enumerate(chunks)]
        else:
            self.sampler = s.HeteroSampler(graph, seed)
            self.reqs = [s.HeteroSampleRequest(input_type, c, fanouts, request_key(seed, 0, i),
                                               replace) for i, c in enumerate(chunks)]
        self.sampler.sample(self.reqs[:1])  # warm-up

    def _one(self, i: int):
        (b,) = self.sampler.sample([self.reqs[i]])
        return b
