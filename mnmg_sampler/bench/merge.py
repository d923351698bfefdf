"""``mnmg-sampler bench merge``: requests/s of concurrent loaders, merged vs one request a round.

On ``--ranks`` ranks (default 2, torchrun, gloo on loopback), each rank runs a
:class:`~mnmg_sampler.distributed.service.SamplingService` in thread mode (features off) and
``--loaders`` :class:`~mnmg_sampler.loaders.neighbor.DistNeighborLoader` objects (default 8), each
iterated in its own thread, ``--batches`` batches of ``--batch-size`` seeds each (disjoint seed
sets, one per loader; ``--prefetch`` requests in flight per loader). Two configurations of the same
service, interleaved repeat by repeat:

* **merged**: every round takes every pending local request (the default service): one kernel
  call per hop serves all of them;
* **one request per round**: ``SamplingService(max_requests_per_round=1)``: each round takes
  one local request, so each request pays its own rounds, collectives and kernel calls.
  Requests of *different* ranks still share a round in both configurations (a round is
  collective); only the merging of a rank's own loaders differs.

Reported per configuration: requests/s per rank (its requests / its loaders' wall time), total
requests/s (all ranks' requests / the slowest rank), sampled edges/s, and the service's
``stats()`` over the timed part: rounds, requests per round, kernel calls per request.
Target: merged >= 2x the requests/s of one request per round. Medians of ``--repeats``.
"""

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

HELP = "distributed: 8 concurrent loaders, merged rounds vs one request per round"
TARGET = 2.0
CONFIGS = {"merged": None, "one_per_round": 1}  # -> max_requests_per_round
_STATS = ("rounds", "idle_rounds", "requests", "hops", "kernel_calls", "kernel_edges",
          "bytes_exchanged", "exchange_calls", "t_kernel", "t_exchange", "t_round")


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("merge", help=HELP, description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(p, "rmat:16", "15,10,5", 64)
    p.add_argument("--ranks", type=positive_int, default=2, help="world size (default: 2)")
    p.add_argument("--loaders", type=positive_int, default=8,
                   help="concurrent loaders per rank, one thread each (default: 8)")
    p.add_argument("--batches", type=positive_int, default=20,
                   help="batches per loader per rank per repeat (default: 20)")
    p.add_argument("--prefetch", type=positive_int, default=1,
                   help="requests in flight per loader (default: 1)")
    p.set_defaults(bench_run=run)
    return p


# -- one rank ------------------------------------------------------------------------------------
def _worker(work: str) -> int:
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


# -- parent --------------------------------------------------------------------------------------
def summarize(ranks: list[dict], name: str) -> dict:
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


def run(args: argparse.Namespace) -> int:
    if args.worker:
        return _worker(args.worker)
    fanouts, threads, graph, res = start_run("merge", args, TARGET, loaders=args.loaders)
    print(f"{args.ranks} ranks x {args.loaders} loaders (one thread each, prefetch "
          f"{args.prefetch}), {args.batches} batches of {args.batch_size} per loader, fanouts "
          f"{fanouts}, threads {threads} per rank, median of {args.repeats}; load average "
          f"{res['machine']['loadavg_1m'] or 0:.2f} on {os.cpu_count()} cores", flush=True)
    ranks = launch_on_partitions("merge", args, graph, fanouts, threads, loaders=args.loaders)
    for name in CONFIGS:
        res[name] = summarize(ranks, name)
    m, o = res["merged"], res["one_per_round"]
    res["ratio"] = m["requests_per_s"] / o["requests_per_s"]
    res["met"] = res["ratio"] >= TARGET

    print(f"\n{'':24}{'requests/s':>12}{'edges/s':>14}{'req/round':>11}{'rounds':>8}"
          f"{'kernel calls':>14}{'calls/req':>11}")
    for label, s in (("merged", m), ("one request per round", o)):
        print(f"{label:24}{s['requests_per_s']:>12,.1f}{s['edges_per_s'] / 1e6:>10,.2f} M/s"
              f"{s['requests_per_round']:>11.2f}{s['rounds']:>8}{s['kernel_calls']:>14}"
              f"{s['kernel_calls_per_request']:>11.2f}")
    verdict = "met" if res["met"] else "MISSED"
    print(f"\nmerged / one per round   {res['ratio']:.2f}x requests/s "
          f"(target >= {TARGET:g}x: {verdict})")
    print("(first repeat; req/round: all ranks' requests per collective round; kernel calls: "
          "summed over ranks. Requests of different ranks share a round in both "
          "configurations.)")
    write_json(args.json, res)
    return 0
