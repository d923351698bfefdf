"""``mnmg-sampler bench overlap``: does sampling hide behind a training step (prefetch)?

On ``--ranks`` ranks (default 2, torchrun, gloo on loopback), each rank runs a
:class:`~mnmg_sampler.distributed.service.SamplingService` in thread mode (features off) and one
:class:`~mnmg_sampler.loaders.neighbor.DistNeighborLoader` over ``--batches`` batches per rank. The
training step is a **fixed-cost** ``time.sleep(step)``: like a GPU step, it releases the GIL and
leaves the CPU to the sampling thread (a CPU matmul would instead measure two computations
fighting over the same two cores). Three epochs, interleaved repeat by repeat:

* **(a) sampling alone**: iterate the loader (prefetch ``--prefetch``), no step;
* **(b) training alone**: the steps on batches sampled beforehand, no sampling;
* **(c) both**: iterate the loader with prefetch ``--prefetch`` and run the step on each batch.

The step cost is ``--step-ms``, or by default the per-batch time of an untimed calibration run
of (a) (the slowest rank's), so sampling and training take about as long and the overlap is
actually tested. Reported: each epoch time (the slowest rank's, median of ``--repeats``) and
``(c) / max(a, b)``; target <= 1.15 (1.0 = perfect overlap, 2.0 = none).
"""

from __future__ import annotations

import argparse
import os
import time

from ..commands.sample import positive_int
from ._launch import (
    add_common_arguments,
    distinct_seeds,
    launch_on_partitions,
    median,
    start_run,
    worker_finish,
    worker_start,
    write_json,
)

HELP = "distributed: epoch time of sampling + a fixed-cost step with prefetch vs each alone"
TARGET = 1.15
PHASES = ("sampling", "training", "both")


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("overlap", help=HELP, description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(p, "rmat:16", "15,10,5", 1024)
    p.add_argument("--ranks", type=positive_int, default=2, help="world size (default: 2)")
    p.add_argument("--batches", type=positive_int, default=20,
                   help="batches per rank per epoch (default: 20)")
    p.add_argument("--prefetch", type=positive_int, default=4,
                   help="requests the loader keeps in flight (default: 4)")
    p.add_argument("--step-ms", type=float, default=0.0,
                   help="training step cost in ms; 0 = the measured per-batch sampling time "
                        "(default: 0)")
    p.set_defaults(bench_run=run)
    return p


# -- one rank ------------------------------------------------------------------------------------
def _worker(work: str) -> int:
    import numpy as np
    import torch
    import torch.distributed as dist

    from ..distributed.service import SamplingService
    from ..loaders.neighbor import DistNeighborLoader

    task, part, rank, world, seeds = worker_start(work)
    seed, B, fanouts = task["seed"], task["batch_size"], task["fanouts"]
    inputs = distinct_seeds(seeds, 0, task["batches"] * B * world)
    svc = SamplingService(part, seed=seed, mode="thread", features=False,
                          shared_topology=False)  # rounds over the wire, as documented
    loader = DistNeighborLoader(svc, inputs, fanouts, B, seed=seed, prefetch=task["prefetch"])
    svc.result(svc.submit(loader.request(0, np.arange(min(B, inputs.size)))))  # warm-up

    def step(batch) -> None:  # fixed cost; releases the GIL like a GPU step
        time.sleep(step_s)

    def epoch(phase: str) -> tuple[float, list]:
        dist.barrier()
        kept = []
        t = time.perf_counter()
        if phase == "training":
            for b in pre:
                step(b)
        else:
            for b in loader:
                if phase == "both":
                    step(b)
                else:
                    kept.append(b)
        return time.perf_counter() - t, kept

    step_s = 0.0
    calib, pre = epoch("sampling")  # untimed calibration; its batches feed (b)
    per_batch = torch.tensor([calib / max(len(pre), 1)], dtype=torch.float64)
    dist.all_reduce(per_batch, op=dist.ReduceOp.MAX)
    step_s = task["step_ms"] / 1e3 if task["step_ms"] > 0 else float(per_batch.item())
    res: dict = {"rank": rank, "world": world, "batches": len(pre), "step_s": step_s,
                 "calibration_s": calib, "per_batch_sampling_s": float(per_batch.item()),
                 "edges": sum(int(b.e_id.numel()) for b in pre), **{p: [] for p in PHASES}}
    st0 = svc.stats()
    for _ in range(task["repeats"]):
        for phase in PHASES:
            res[phase].append(epoch(phase)[0])
    svc.shutdown()
    st = svc.stats()
    res["stats"] = {k: st[k] - st0[k] for k in ("rounds", "requests", "kernel_calls",
                                                 "t_kernel", "t_exchange", "t_wait")}
    res["stats"]["requests_per_round"] = res["stats"]["requests"] / max(
        res["stats"]["rounds"], 1)
    worker_finish(work, rank, res)
    return 0


# -- parent --------------------------------------------------------------------------------------
def summarize(ranks: list[dict]) -> dict:
    """Epoch times (slowest rank per repeat, then median) and the overlap ratio."""
    out: dict = {}
    for p in PHASES:
        runs = [max(r[p][k] for r in ranks) for k in range(len(ranks[0][p]))]
        out[p] = {"median_s": median(runs), "runs_s": runs}
    base = max(out["sampling"]["median_s"], out["training"]["median_s"])
    out["ratio"] = out["both"]["median_s"] / base
    out["sum_ratio"] = (out["sampling"]["median_s"] + out["training"]["median_s"]) / base
    out["step_s"] = ranks[0]["step_s"]
    out["batches_per_rank"] = [r["batches"] for r in ranks]
    out["per_batch_sampling_s"] = ranks[0]["per_batch_sampling_s"]
    out["stats_per_rank"] = [r["stats"] for r in ranks]
    return out


def run(args: argparse.Namespace) -> int:
    if args.worker:
        return _worker(args.worker)
    fanouts, threads, graph, res = start_run("overlap", args, TARGET, step="time.sleep")
    print(f"{args.ranks} ranks, {args.batches} batches of {args.batch_size} per rank, fanouts "
          f"{fanouts}, prefetch {args.prefetch}, threads {threads} per rank, median of "
          f"{args.repeats}; load average {res['machine']['loadavg_1m'] or 0:.2f} on "
          f"{os.cpu_count()} cores", flush=True)
    ranks = launch_on_partitions("overlap", args, graph, fanouts, threads, step_ms=args.step_ms)
    s = summarize(ranks)
    res.update(s)
    res["met"] = s["ratio"] <= TARGET
    how = "--step-ms" if args.step_ms > 0 else "measured per-batch sampling time"
    print(f"\ntraining step: time.sleep({s['step_s'] * 1e3:.1f} ms) per batch ({how})")
    print(f"{'epoch (slowest rank)':34}{'median':>10}")
    for label, p in (("(a) sampling alone", "sampling"), ("(b) training alone", "training"),
                     (f"(c) both, prefetch {args.prefetch}", "both")):
        print(f"{label:34}{s[p]['median_s']:>9.3f}s")
    verdict = "met" if res["met"] else "MISSED"
    print(f"\n(c) / max(a, b)   {s['ratio']:.3f} (target <= {TARGET:g}: {verdict}; "
          f"no overlap would be {s['sum_ratio']:.2f})")
    write_json(args.json, res)
    return 0
