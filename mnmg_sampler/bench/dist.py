"""``mnmg-sampler bench dist``: distributed sampling throughput per rank, beside one process.

Measured in one run, on one graph, one thread per rank:

1. **single process**: :class:`~mnmg_sampler.sampler.MultiHopSampler` on the whole graph,
   ``--batches`` minibatches (as ``bench single`` measures them), in this process.
2. **distributed**, for each world size ``W`` in ``--world-sizes`` (default 1,2): the graph is
   partitioned into ``W`` parts in a temporary directory and ``W`` ranks are started with
   torchrun (gloo, loopback). Each rank samples ``--batches`` minibatches with
   :class:`~mnmg_sampler.distributed.sampler.DistSampler`, one request per rank per collective
   call (global batch ``i`` on rank ``i % W``, keys as ``mnmg-sampler sample`` uses), after one
   untimed warm-up call. Reported: sampled edges/s of each rank (its edges / its time), total
   edges/s (all ranks' edges / the slowest rank's time), and **bytes exchanged per sampled
   edge**: the sampler's ``Exchanger.bytes_sent`` (every row of every all-to-all, including the
   rows a rank sends itself) and, separately, the bytes that go to *other* ranks.

Ratios are against the single-process edges/s of the same run: per rank (ideal 1.0: each rank
does the work of one process) and total (ideal ``W``, when there are ``W`` free cores).
Every time is the median over ``--repeats``.
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time
from pathlib import Path

from ..commands.sample import positive_int
from ._launch import (
    add_common_arguments,
    command_line,
    count_remote_bytes,
    graph_line,
    launch,
    load_for_bench,
    median,
    partition_for,
    set_bench_threads,
    worker_finish,
    worker_start,
    write_json,
)

log = logging.getLogger(__name__)

HELP = "distributed: edges/s per rank and bytes per edge for 1 and 2 ranks vs one process"


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("dist", help=HELP, description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(p, "rmat:20", "15,10,5", 1024)
    p.add_argument("--batches", type=positive_int, default=30,
                   help="timed minibatches per rank per repeat (default: 30)")
    p.add_argument("--world-sizes", default="1,2",
                   help="comma-separated rank counts to run, one torchrun each (default: 1,2)")
    p.set_defaults(bench_run=run)
    return p


def parse_world_sizes(text: str) -> list[int]:
    """``"1,2"`` -> ``[1, 2]``; each >= 1."""
    from ..errors import ConfigError

    try:
        out = [int(t) for t in str(text).split(",") if t.strip()]
    except ValueError:
        out = []
    if not out or min(out) < 1:
        raise ConfigError(f"--world-sizes {text!r} is not a list of positive integers",
                          "no distributed run can be started", "pass e.g. --world-sizes 1,2")
    return out


# -- one rank ------------------------------------------------------------------------------------
def _worker(work: str) -> int:
    import torch.distributed as dist

    from ..distributed.sampler import DistSampler
    from ..ops.rng import request_key
    from ..sampler import SampleRequest

    task, part, rank, world, seeds = worker_start(work)
    seed, B, fanouts = task["seed"], task["batch_size"], task["fanouts"]
    sampler = DistSampler(part, seed=seed)
    ex = sampler.ex
    count_remote_bytes(ex)
    n = min(task["batches"] * world, -(-seeds.size // B))
    rounds = -(-n // world)

    def one_round(r: int) -> int:
        i = r * world + rank
        reqs = [SampleRequest(seeds[i * B:(i + 1) * B], fanouts, request_key(seed, 0, i),
                              replace=task["replace"])] if i < n else []
        return sum(int(b.e_id.numel()) for b in sampler.sample(reqs))

    one_round(0)  # warm-up: compiled code, page cache, gloo buffers
    res: dict = {"rank": rank, "world": world, "batches": len(range(rank, n, world)),
                 "seconds": [], "edges": [], "bytes": [], "remote_bytes": [], "t_kernel": [],
                 "t_exchange": [], "exchange_calls": [], "kernel_nodes": []}
    for _ in range(task["repeats"]):
        dist.barrier()
        b0, rb0, k0, x0 = ex.bytes_sent, ex.remote_bytes, sampler.t_kernel, ex.t_exchange
        c0, kn0 = ex.calls, sampler.kernel_nodes
        t = time.perf_counter()
        edges = sum(one_round(r) for r in range(rounds))
        res["seconds"].append(time.perf_counter() - t)
        res["edges"].append(edges)
        res["bytes"].append(ex.bytes_sent - b0)
        res["remote_bytes"].append(ex.remote_bytes - rb0)
        res["t_kernel"].append(sampler.t_kernel - k0)
        res["t_exchange"].append(ex.t_exchange - x0)
        res["exchange_calls"].append(ex.calls - c0)
        res["kernel_nodes"].append(sampler.kernel_nodes - kn0)
    res["edges_sampled_here"] = int(sampler.kernel_edges)
    worker_finish(work, rank, res)
    return 0


# -- parent --------------------------------------------------------------------------------------
def summarize(ranks: list[dict]) -> dict:
    """Per-rank and total rates of one world size from the ranks' JSON."""
    world = len(ranks)
    reps = len(ranks[0]["seconds"])
    per_rank = []
    for r in ranks:
        med = median(r["seconds"])
        per_rank.append({"rank": r["rank"], "batches": r["batches"], "edges": r["edges"][0],
                         "median_s": med, "edges_per_s": r["edges"][0] / med,
                         "kernel_share": median(r["t_kernel"]) / med,
                         "exchange_share": median(r["t_exchange"]) / med,
                         "exchange_calls": r["exchange_calls"][0], "seconds": r["seconds"]})
    totals = [sum(r["edges"][k] for r in ranks) / max(r["seconds"][k] for r in ranks)
              for k in range(reps)]
    edges = sum(sum(r["edges"]) for r in ranks)
    return {
        "world_size": world, "ranks": per_rank,
        "edges_per_rank": [p["edges"] for p in per_rank],
        "edges_per_s_per_rank": [p["edges_per_s"] for p in per_rank],
        "mean_edges_per_s_per_rank": sum(p["edges_per_s"] for p in per_rank) / world,
        "total_edges_per_s": median(totals), "total_edges_per_s_runs": totals,
        "bytes_per_edge": sum(sum(r["bytes"]) for r in ranks) / max(edges, 1),
        "remote_bytes_per_edge": sum(sum(r["remote_bytes"]) for r in ranks) / max(edges, 1),
        "bytes_exchanged": sum(r["bytes"][0] for r in ranks),
    }


def _fmt(x: float) -> str:
    return f"{x / 1e6:,.2f} M/s"


def run(args: argparse.Namespace) -> int:
    if args.worker:
        return _worker(args.worker)
    from ..commands.sample import parse_fanouts
    from .single import MultiHopBench, _machine

    fanouts = parse_fanouts(args.fanouts)
    worlds = parse_world_sizes(args.world_sizes)
    threads = set_bench_threads(args.threads)
    graph, seeds, load_s = load_for_bench(args)
    res: dict = {
        "mode": "dist", "command": command_line("dist"), "graph": args.graph,
        "name": graph.name, "undirected": args.undirected, "num_nodes": graph.num_nodes,
        "num_edges": graph.num_edges, "nonisolated_nodes": int(seeds.size), "load_s": load_s,
        "fanouts": fanouts, "batch_size": args.batch_size, "batches": args.batches,
        "replace": args.replace, "seed": args.seed, "repeats": args.repeats,
        "partition_method": args.partition_method, "machine": _machine(threads),
    }
    print(graph_line(args, graph, seeds, load_s))
    print(f"threads {threads} per rank, fanouts {fanouts}, batch size {args.batch_size}, "
          f"{args.batches} batches per rank, median of {args.repeats}; load average "
          f"{res['machine']['loadavg_1m'] or 0:.2f} on {os.cpu_count()} cores", flush=True)

    mh = MultiHopBench(graph, seeds, fanouts, args.replace, args.seed, args.batch_size,
                       args.batches)
    for _ in range(args.repeats):
        mh.run_once()
    single = res["single"] = mh.result()
    res["dist"] = {}
    task = {"fanouts": fanouts, "batch_size": args.batch_size, "batches": args.batches,
            "seed": args.seed, "replace": bool(args.replace), "repeats": args.repeats,
            "threads": threads}
    with tempfile.TemporaryDirectory(prefix="mnmg-bench-dist-") as tmp:
        root = Path(tmp)
        for w in worlds:
            parts = partition_for(graph, w, args.partition_method, args.seed, root)
            print(f"running {w} rank(s) ...", flush=True)
            t = time.perf_counter()
            ranks = launch("dist", w, root / f"work-{w}", {**task, "partitions": str(parts)},
                           args.timeout, threads)
            s = summarize(ranks)
            s["launch_s"] = time.perf_counter() - t
            s["per_rank_vs_single"] = s["mean_edges_per_s_per_rank"] / single["per_s"]
            s["total_vs_single"] = s["total_edges_per_s"] / single["per_s"]
            res["dist"][str(w)] = s

    print(f"\n{'':22}{'edges/s per rank':>28}{'total edges/s':>16}{'x single':>10}"
          f"{'bytes/edge':>12}{'remote B/edge':>15}")
    print(f"{'single process':22}{_fmt(single['per_s']):>28}{_fmt(single['per_s']):>16}"
          f"{'1.00x':>10}{'-':>12}{'-':>15}")
    for w, s in res["dist"].items():
        each = ", ".join(_fmt(v).replace(" M/s", "") for v in s["edges_per_s_per_rank"])
        print(f"{f'{w} rank(s)':22}{each + ' M/s':>28}{_fmt(s['total_edges_per_s']):>16}"
              f"{s['total_vs_single']:>9.2f}x{s['bytes_per_edge']:>12.1f}"
              f"{s['remote_bytes_per_edge']:>15.1f}")
    print("\nper rank vs single process: " + ", ".join(
        f"W={w} {s['per_rank_vs_single']:.2f}x" for w, s in res["dist"].items())
        + f"; {single['edges_per_batch']:,.0f} edges/batch")
    print("bytes/edge: all all-to-all rows (Exchanger.bytes_sent, including rows a rank sends "
          "itself); remote: rows sent to other ranks only")
    write_json(args.json, res)
    return 0
