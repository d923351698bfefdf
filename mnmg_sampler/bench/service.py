"""``mnmg-sampler bench merge`` and ``bench overlap``: on ranks (torchrun, gloo on loopback), a
thread-mode :class:`~mnmg_sampler.distributed.service.SamplingService` (features off) driven by
:class:`~mnmg_sampler.loaders.neighbor.DistNeighborLoader` objects; :data:`MERGE_DOC` and
:data:`OVERLAP_DOC` say what each mode compares."""

from __future__ import annotations

import argparse
import os
import threading
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

MERGE_DOC = """\
``mnmg-sampler bench merge``: requests/s of concurrent loaders, merged vs one request a round.

On ``--ranks`` ranks, ``--loaders`` loaders per rank, each iterated in its own thread over its own
seeds. Two configurations of the same service, interleaved repeat by repeat:

* **merged**: every round takes every pending local request (the default service): one kernel
  call per hop serves all of them;
* **one request per round**: ``SamplingService(max_requests_per_round=1)``: each request pays
  its own rounds, collectives and kernel calls. Requests of *different* ranks still share a
  round in both (a round is collective); only the merging of a rank's own loaders differs.

Reported per configuration: requests/s per rank and in total (all ranks' requests / the slowest
rank), sampled edges/s, and the service's ``stats()`` over the timed part. Target: merged >= 2x
the requests/s of one request per round. Medians of ``--repeats``; details in
benchmarks/README.md#distributed-modes-bench-dist-bench-merge-bench-overlap.
"""

OVERLAP_DOC = """\
``mnmg-sampler bench overlap``: does sampling hide behind a training step (prefetch)?

On ``--ranks`` ranks, one loader per rank over ``--batches`` batches. The training step is a
**fixed-cost** ``time.sleep(step)``: like a GPU step, it releases the GIL and leaves the CPU to
the sampling thread (a CPU matmul would instead measure two computations fighting over the same
cores). Three epochs, interleaved repeat by repeat:

* **(a) sampling alone**: iterate the loader (prefetch ``--prefetch``), no step;
* **(b) training alone**: the steps on batches sampled beforehand, no sampling;
* **(c) both**: iterate the loader with prefetch ``--prefetch`` and run the step on each batch.

The step cost is ``--step-ms``, or by default the per-batch time of an untimed calibration run
of (a) (the slowest rank's), so sampling and training take about as long and the overlap is
actually tested. Reported: each epoch time (the slowest rank's, median of ``--repeats``) and
``(c) / max(a, b)``; target <= 1.15 (1.0 = perfect overlap, 2.0 = none).
"""

MERGE_HELP = "distributed: 8 concurrent loaders, merged rounds vs one request per round"
OVERLAP_HELP = "distributed: epoch time of sampling + a fixed-cost step with prefetch vs each alone"
MERGE_LINE = ("{ranks} ranks x {loaders} loaders (one thread each, prefetch {prefetch}), {batches} "
              "batches of {batch_size} per loader, fanouts {fanouts}, threads {threads} per rank")
OVERLAP_LINE = ("{ranks} ranks, {batches} batches of {batch_size} per rank, fanouts {fanouts}, "
                "prefetch {prefetch}, threads {threads} per rank")
MERGE_TARGET = 2.0
OVERLAP_TARGET = 1.15
CONFIGS = {"merged": None, "one_per_round": 1}  # -> max_requests_per_round
PHASES = ("sampling", "training", "both")
_STATS = ("rounds", "idle_rounds", "requests", "hops", "kernel_calls", "kernel_edges",
          "bytes_exchanged", "exchange_calls", "t_kernel", "t_exchange", "t_round")


def add_parser(subparsers) -> None:
    """The ``merge`` and ``overlap`` sub-subparsers."""
    m = _mode_parser(subparsers, "merge", MERGE_HELP, MERGE_DOC, 64, _run_merge)
    m.add_argument("--loaders", type=positive_int, default=8,
                   help="concurrent loaders per rank, one thread each (default: 8)")
    m.add_argument("--batches", type=positive_int, default=20,
                   help="batches per loader per rank per repeat (default: 20)")
    m.add_argument("--prefetch", type=positive_int, default=1,
                   help="requests in flight per loader (default: 1)")
    o = _mode_parser(subparsers, "overlap", OVERLAP_HELP, OVERLAP_DOC, 1024, _run_overlap)
    o.add_argument("--batches", type=positive_int, default=20,
                   help="batches per rank per epoch (default: 20)")
    o.add_argument("--prefetch", type=positive_int, default=4,
                   help="requests the loader keeps in flight (default: 4)")
    o.add_argument("--step-ms", type=float, default=0.0,
                   help="training step cost in ms; 0 = the measured per-batch sampling time "
                        "(default: 0)")


def _mode_parser(subparsers, name: str, help: str, doc: str, batch_size: int,
                 run) -> argparse.ArgumentParser:
    p = subparsers.add_parser(name, help=help, description=doc,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(p, "rmat:16", "15,10,5", batch_size)
    p.add_argument("--ranks", type=positive_int, default=2, help="world size (default: 2)")
    p.set_defaults(bench_run=run)
    return p


def _launch(mode: str, args: argparse.Namespace, target: float, what: str, head: dict,
            **task) -> tuple[dict, list[dict]]:
    """The parent: load the graph, print ``what`` (formatted with ``args``, the fanouts and the
    threads), run the ranks; returns the JSON head (with ``head``) and the ranks' results."""
    fanouts, threads, graph, res = start_run(mode, args, target, **head)
    print(what.format_map({**vars(args), "fanouts": fanouts, "threads": threads}) + f", median of "
          f"{args.repeats}; load average {res['machine']['loadavg_1m'] or 0:.2f} on "
          f"{os.cpu_count()} cores", flush=True)
    return res, launch_on_partitions(mode, args, graph, fanouts, threads, **task)


# -- merge: one rank -----------------------------------------------------------------------------
def _merge_worker(work: str) -> int:
    import numpy as np
    import torch.distributed as dist

    from ..distributed.service import SamplingService
    from ..loaders.neighbor import DistNeighborLoader

    task, part, rank, world, seeds = worker_start(work)
    seed, B, fanouts = task["seed"], task["batch_size"], task["fanouts"]
    per = task["batches"] * B * world  # seeds per loader: `batches` full batches per rank
    # loader k: its own window of the seed order (windows wrap and overlap on small graphs)
    inputs = [distinct_seeds(seeds, k * per, per) for k in range(task["loaders"])]

    def phase(limit: int | None) -> dict:
        svc = SamplingService(part, seed=seed, mode="thread", features=False,
                              max_requests_per_round=limit, shared_topology=False)
        loaders = [DistNeighborLoader(svc, x, fanouts, B, seed=k, prefetch=task["prefetch"])
                   for k, x in enumerate(inputs)]
        warm = loaders[0]
        svc.result(svc.submit(warm.request(0, np.arange(min(B, inputs[0].size)))))  # warm-up
        dist.barrier()  # every warm-up served: from here to the next barrier, idle rounds only
        st0 = settled_stats(svc)
        dist.barrier()
        counts = [[0, 0] for _ in loaders]  # batches, edges per loader
        errors: list[BaseException] = []

        def iterate(k: int) -> None:
            try:
                for b in loaders[k]:
                    counts[k][0] += 1
                    counts[k][1] += int(b.e_id.numel())
            except BaseException as e:  # re-raised below: a bench must not hide failures
                errors.append(e)

        threads = [threading.Thread(target=iterate, args=(k,)) for k in range(len(loaders))]
        t = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        dt = time.perf_counter() - t
        svc.shutdown()  # collective: returns once every rank's requests are served
        st1 = svc.stats()
        if errors:
            raise errors[0]
        d = {k: st1[k] - st0[k] for k in _STATS}
        d.update(seconds=dt, batches=sum(c[0] for c in counts),
                 edges=sum(c[1] for c in counts))
        return d

    res: dict = {"rank": rank, "world": world, **{name: [] for name in CONFIGS}}
    for _ in range(task["repeats"]):
        for name, limit in CONFIGS.items():
            res[name].append(phase(limit))
    worker_finish(work, rank, res)
    return 0


def settled_stats(svc) -> dict:
    """Collective: ``svc.stats()`` once every rank's service has counted the same sampling rounds.

    A rank's warm-up result can arrive while another rank's service thread is still finishing
    that round (it takes part with no request of its own, and counts the round after its kernel
    calls): a snapshot taken then would put the round's kernel calls before the snapshot and the
    round itself after it. Rounds with requests are collective, so once every rank counts as
    many, none is half-counted (only idle rounds run until the next request is submitted).
    """
    import torch
    import torch.distributed as dist

    while True:
        st = svc.stats()
        r = torch.tensor([st["rounds"], -st["rounds"]], dtype=torch.int64)
        dist.all_reduce(r, op=dist.ReduceOp.MAX)  # [most rounds, -fewest rounds]
        if int(r[0]) == -int(r[1]):
            return st
        time.sleep(0.01)


# -- merge: parent -------------------------------------------------------------------------------
def summarize_merge(ranks: list[dict], name: str) -> dict:
    """Rates and service statistics of one configuration from the ranks' JSON."""
    reps = len(ranks[0][name])
    runs = [[r[name][k] for r in ranks] for k in range(reps)]  # [repeat][rank]
    total = [sum(x["batches"] for x in run) / max(x["seconds"] for x in run) for run in runs]
    total_edges = [sum(x["edges"] for x in run) / max(x["seconds"] for x in run) for run in runs]
    per_rank = [median([r[name][k]["batches"] / r[name][k]["seconds"] for k in range(reps)])
                for r in ranks]
    first = runs[0]
    rounds = first[0]["rounds"]  # collective: every rank counts the same rounds
    requests = sum(x["requests"] for x in first)
    return {
        "requests_per_s": median(total), "requests_per_s_runs": total,
        "requests_per_s_per_rank": per_rank, "edges_per_s": median(total_edges),
        "requests_per_rank": [x["batches"] for x in first],
        "median_s": median([max(x["seconds"] for x in run) for run in runs]),
        "rounds": rounds, "requests": requests,
        "requests_per_round": requests / max(rounds, 1),
        "local_requests_per_round": [x["requests"] / max(x["rounds"], 1) for x in first],
        "kernel_calls": sum(x["kernel_calls"] for x in first),
        "kernel_calls_per_request": sum(x["kernel_calls"] for x in first) / max(requests, 1),
        "idle_rounds": sum(x["idle_rounds"] for x in first),
        "kernel_share": sum(x["t_kernel"] for x in first) / sum(x["seconds"] for x in first),
        "exchange_share": sum(x["t_exchange"] for x in first) / sum(
            x["seconds"] for x in first),
        "bytes_per_request": sum(x["bytes_exchanged"] for x in first) / max(requests, 1),
        "stats_per_rank": first,
    }


def _run_merge(args: argparse.Namespace) -> int:
    if args.worker:
        return _merge_worker(args.worker)
    res, ranks = _launch("merge", args, MERGE_TARGET, MERGE_LINE, {"loaders": args.loaders},
                         loaders=args.loaders)
    for name in CONFIGS:
        res[name] = summarize_merge(ranks, name)
    m, o = res["merged"], res["one_per_round"]
    res["ratio"] = m["requests_per_s"] / o["requests_per_s"]
    res["met"] = res["ratio"] >= MERGE_TARGET

    print(f"\n{'':24}{'requests/s':>12}{'edges/s':>14}{'req/round':>11}{'rounds':>8}"
          f"{'kernel calls':>14}{'calls/req':>11}")
    for label, s in (("merged", m), ("one request per round", o)):
        print(f"{label:24}{s['requests_per_s']:>12,.1f}{s['edges_per_s'] / 1e6:>10,.2f} M/s"
              f"{s['requests_per_round']:>11.2f}{s['rounds']:>8}{s['kernel_calls']:>14}"
              f"{s['kernel_calls_per_request']:>11.2f}")
    verdict = "met" if res["met"] else "MISSED"
    print(f"\nmerged / one per round   {res['ratio']:.2f}x requests/s "
          f"(target >= {MERGE_TARGET:g}x: {verdict})")
    print("(first repeat; req/round: all ranks' requests per collective round; kernel calls: "
          "summed over ranks. Requests of different ranks share a round in both "
          "configurations.)")
    write_json(args.json, res)
    return 0


# -- overlap: one rank ---------------------------------------------------------------------------
def _overlap_worker(work: str) -> int:
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


# -- overlap: parent -----------------------------------------------------------------------------
def summarize_overlap(ranks: list[dict]) -> dict:
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


def _run_overlap(args: argparse.Namespace) -> int:
    if args.worker:
        return _overlap_worker(args.worker)
    res, ranks = _launch("overlap", args, OVERLAP_TARGET, OVERLAP_LINE, {"step": "time.sleep"},
                         step_ms=args.step_ms)
    s = summarize_overlap(ranks)
    res.update(s)
    res["met"] = s["ratio"] <= OVERLAP_TARGET
    how = "--step-ms" if args.step_ms > 0 else "measured per-batch sampling time"
    print(f"\ntraining step: time.sleep({s['step_s'] * 1e3:.1f} ms) per batch ({how})")
    print(f"{'epoch (slowest rank)':34}{'median':>10}")
    for label, p in (("(a) sampling alone", "sampling"), ("(b) training alone", "training"),
                     (f"(c) both, prefetch {args.prefetch}", "both")):
        print(f"{label:34}{s[p]['median_s']:>9.3f}s")
    verdict = "met" if res["met"] else "MISSED"
    print(f"\n(c) / max(a, b)   {s['ratio']:.3f} (target <= {OVERLAP_TARGET:g}: {verdict}; "
          f"no overlap would be {s['sum_ratio']:.2f})")
    write_json(args.json, res)
    return 0
