"""``mnmg-sampler bench dist``: distributed sampling rate and cost per rank, beside one process.

Measured in one run, on one graph, one thread per rank:

1. **single process**: :class:`~mnmg_sampler.sampling.sampler.MultiHopSampler` on the whole graph,
   ``--batches`` minibatches, one request per call (with ``--features``, each batch gathers its
   feature rows, as a rank does); ``--repeats`` times first and once more before each world
   size, so load changes hit both sides of a ratio.
2. **distributed**, for each world size ``W`` in ``--world-sizes``: ``W`` ranks under torchrun
   (gloo, loopback) on the graph partitioned into ``W`` parts, each sampling ``--batches``
   minibatches with :class:`~mnmg_sampler.distributed.sampler.DistSampler` after an untimed
   warm-up (``--loader``: through a ``DistNeighborLoader`` and a ``SamplingService``). Global
   batch ``i`` goes to rank ``i % W`` (``--split``); seeds are translated to the partitioning's
   ids once before the timed rounds, as a loader does (a setup figure; ``--seed-lookup``). With
   ``--hosts H`` each emulated host's ranks run on their own share of the cores, and the single
   process on one host's share (:mod:`.cores`).

Reported per world size (medians over ``--repeats``): sampled edges/s per rank and in total (all
ranks' edges / the slowest rank's time); **CPU seconds per million sampled edges summed over
ranks**; id and feature bytes per sampled edge, to self, to other ranks and to other hosts; per
hop, frontier nodes and their remote share. More ranks than cores oversubscribe them; the output
says so. How it runs: benchmarks/README.md#distributed-modes-bench-dist-bench-merge-bench-overlap.
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
    base_result,
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
from .cores import host_cores, pinned, usable_cores

log = logging.getLogger(__name__)

HELP = "distributed: edges/s, CPU and bytes per edge for 1, 2, ... ranks vs one process"


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("dist", help=HELP, description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(p, "rmat:20", "15,10,5", 1024)
    p.add_argument("--batches", type=positive_int, default=30,
                   help="timed minibatches per rank per repeat (default: 30)")
    p.add_argument("--world-sizes", type=_world_sizes, default=[1, 2],
                   help="comma-separated rank counts to run, one torchrun each (default: 1,2)")
    p.add_argument("--features", type=int, default=0, metavar="D",
                   help="fetch feature rows with every batch (synthetic D-dim rows where the "
                        "graph has none) (default: 0, none)")
    p.add_argument("--host-memory", type=_host_memory_arg, default=None,
                   metavar="BYTES|topology+F",
                   help="each host's budget for other hosts' data (features.host_memory_mb): "
                        "BYTES (0: none), or their topology and a fraction F of their feature "
                        "rows (default: half of the memory the host can see)")
    p.add_argument("--hosts", type=positive_int, default=None, metavar="H",
                   help="split each world size into H emulated hosts of contiguous ranks "
                        "(MNMG_HOST_ID per rank, the shared topology auto) (default: off)")
    p.add_argument("--host-cores", choices=["split", "shared"], default="split",
                   help="with --hosts: each emulated host's ranks (and the single process) "
                        "on their own share of the cores, or every rank on every core "
                        "(default: split; shared when there are fewer cores than hosts)")
    p.add_argument("--loader", action="store_true",
                   help="drive the rounds with a DistNeighborLoader per rank through a "
                        "SamplingService at default settings, not the sampler directly")
    p.add_argument("--split", choices=["global", "owner"], default="global",
                   help="seeds of each rank: global batch order, or its own (default: global)")
    p.add_argument("--id-maps", choices=["auto", "sharded", "replicated"], default="auto",
                   help="original <-> new id maps: sharded (lookups), replicated on every "
                        "rank, or auto: replicated up to 2M nodes (default: auto)")
    p.add_argument("--shared-topology", action="store_true",
                   help="ranks map each other's parts, as jobs on one host do (default: off)")
    p.add_argument("--merge", type=positive_int, default=None, metavar="K",
                   help="requests each rank merges into one round (default: 1; with --loader "
                        "the service's max_requests_per_round: every pending request)")
    p.add_argument("--rounds-in-flight", type=positive_int, default=None, metavar="K",
                   help="with --loader: the service's rounds_in_flight (default: auto)")
    p.add_argument("--prefetch", type=positive_int, default=None, metavar="N",
                   help="with --loader: the loader's prefetch (default: the loader's own)")
    p.add_argument("--seed-lookup", choices=["once", "per-round", "both"], default="once",
                   help="translate each rank's seeds to new ids once before the timed rounds "
                        "(as a loader does), in every round, or both, alternately (default: "
                        "once)")
    p.add_argument("--typed", type=int, default=0, metavar="T",
                   help="sample the graph typed: T node types by id range, a relation per "
                        "type pair (bench single --hetero's view) (default: 0, homogeneous)")
    p.add_argument("--edge-ids", action="store_true",
                   help="also fetch edge ids (default: off, as a GNN without edge features)")
    p.add_argument("--plot", metavar="PNG",
                   help="plot edges/s and CPU per edge against W (needs matplotlib)")
    p.set_defaults(bench_run=run)
    return p


def _host_memory_arg(text: str) -> str:
    """``--host-memory``: bytes (an integer >= 0) or ``topology+F`` with F in [0, 1]."""
    t = text.strip()
    try:
        ok = 0 <= float(t[9:]) <= 1 if t.startswith("topology+") else int(t) >= 0
    except ValueError:
        ok = False
    if not ok:
        raise argparse.ArgumentTypeError(f"{text!r} is neither bytes nor topology+F, F in [0, 1]")
    return t


def host_memory_for(spec: str | None, part, rank: int, world: int,
                    hosts: int | None) -> int | None:
    """Bytes of ``--host-memory`` on ``rank``: as given, or for ``topology+F`` the other
    hosts' topology and F of their rows as the feature store keeps them (features, label,
    original id: 4 bytes each); ``None``: the default."""
    if spec is None or not spec.startswith("topology+"):
        return None if spec is None else int(spec)
    import numpy as np

    from ..distributed.fit import part_bytes
    from ..graph.partition_io import load_partition

    H = min(hosts or world, world)
    mine = rank * H // world
    far = [r for r in range(world) if r * H // world != mine]
    topo = sum(part_bytes(load_partition(part.path, r, world, verify="off"))[0] for r in far)
    rows = int(np.diff(np.asarray(part.boundaries, np.int64))[far].sum())
    width = (int(part.x.shape[1]) if part.x is not None else 0) + 4
    return topo + int(float(spec.split("+", 1)[1]) * rows) * width * 4


def _world_sizes(text: str) -> list[int]:
    """``--world-sizes``: ``"1,2"`` -> ``[1, 2]``, each >= 1."""
    return [positive_int(t) for t in text.split(",")]


# -- one rank ------------------------------------------------------------------------------------
class _HopTally:
    """Wraps a :class:`DistSampler`'s hop function to count, per hop, what the requesting side
    sends other ranks: frontier nodes, remote ones, their sampled edges and the exchanger's
    id bytes to others (its ``ids`` counter before and after the hop)."""

    KEYS = ("nodes", "remote", "edges", "remote_edges", "id_remote", "mapped")

    def __init__(self, sampler) -> None:
        self.ds, self.inner = sampler, sampler.sampler.hop_fn
        sampler.sampler.hop_fn = self
        self.per_hop: dict[int, dict[str, int]] = {}
        self.on = True

    def __call__(self, h):
        if not self.on:  # timed rounds: no counting work inside them
            return self.inner(h)
        ex = self.ds.ex
        # remote nodes sampled from their owner's mapped part (shared topology, host group)
        # never went on the wire
        local = self.ds.shared or getattr(self.ds.host, "shared", None)

        def mapped() -> tuple[int, int]:
            return (0, 0) if local is None else (local.peer_nodes, local.peer_edges)

        b0, c0 = ex.bytes.get("ids", [0, 0])[1], mapped()
        counts, nbr, eids = self.inner(h)
        remote = self.ds.owner(h.nodes) != self.ds.rank
        t = self.per_hop.setdefault(int(h.hop), dict.fromkeys(self.KEYS, 0))
        c1 = mapped()
        hits, hit_edges = c1[0] - c0[0], c1[1] - c0[1]
        t["mapped"] += hits
        t["nodes"] += int(h.nodes.size)
        t["remote"] += int(remote.sum()) - hits
        t["edges"] += int(nbr.size)
        t["remote_edges"] += int(counts[remote].sum()) - hit_edges
        t["id_remote"] += ex.bytes.get("ids", [0, 0])[1] - b0
        return counts, nbr, eids


def _emulate_hosts(task: dict, rank: int, world: int):
    """``--hosts H``: this rank's forced host (contiguous ranks) and the shared topology
    ``auto``; else the task's shared topology setting."""
    from ..distributed.shared_topology import HOST_ENV

    hosts = task.get("hosts")
    if hosts:
        os.environ[HOST_ENV] = f"bench-host-{rank * min(hosts, world) // world}"
    return "auto" if hosts or task.get("loader") else task.get("shared_topology", False)


def _counters(sampler, store) -> dict:
    """A rank's running totals of bytes (to self, to others, to other hosts: ids are every
    traffic class but the feature rows'), exchange calls, times and feature rows."""
    ex = sampler.ex
    fs = store.stats if store else {}
    cb, ids, feat = ex.cross_bytes, ex.bytes.get("ids", [0, 0]), ex.bytes.get("features", [0, 0])
    return {"bytes": ex.bytes_sent, "remote_bytes": ex.remote_bytes, "id_self": ids[0],
            "id_remote": ids[1], "feat_self": feat[0], "feat_remote": feat[1],
            "t_kernel": sampler.t_kernel, "t_exchange": ex.t_exchange,
            "exchange_calls": ex.calls, "agreements": ex.agreements,
            "cross_ids": sum(v for k, v in cb.items() if k != "features"),
            "cross_feat": cb.get("features", 0),
            **{k: fs.get(k, 0) for k in ("remote_rows", "mapped_rows", "distinct_remote_rows",
                                          "rows_fetched", "cache_hits", "recent_hits",
                                          "duplicate_rows_fetched", "fetch_cpu_s",
                                          "fetch_exchange_cpu_s")}}


def _head(rank: int, world: int, batches: int, task: dict, sampler, store,
          placement) -> dict:
    """What a rank reports besides its timed repeats: its batches, its wire's id width, its
    feature store's cache, and the hosts' placement."""
    return {"rank": rank, "world": world, "batches": batches, "owned_seeds": 0, "hops": [],
            "wire_bytes": int(getattr(getattr(sampler, "wire", None), "itemsize", 4)),
            "edge_id_bytes": 8 if task["edge_ids"] else 0,
            "cache_size": store.cache_size if store else 0,
            "cache_choice": store.cache_choice if store else "none",
            "row_bytes": store.row_bytes if store else 0, "placement": placement,
            "seed_setup": {"seconds": 0.0, "cpu_s": 0.0, "remote_bytes": 0}}


def _timed(res: dict, repeats: int, snap, epoch, around=None) -> None:
    """``repeats`` timed calls of ``epoch`` (it returns its sampled edges), each after a
    barrier: per repeat, its wall and CPU seconds, edges, and the change of every counter of
    ``snap()`` are appended to ``res``; ``around(k, after)`` runs untimed before and after."""
    import torch.distributed as dist

    for k in range(repeats):
        if around is not None:
            around(k, False)
        dist.barrier()
        s0 = snap()
        t, c = time.perf_counter(), time.process_time()
        got = {"edges": epoch()}
        got.update(seconds=time.perf_counter() - t, cpu_s=time.process_time() - c)
        s1 = snap()
        for key, v in {**got, **{key: s1[key] - s0[key] for key in s0}}.items():
            res.setdefault(key, []).append(v)
        if around is not None:
            around(k, True)


def _loader_worker(work: str, task: dict, part, rank: int, world: int, seeds,
                   budget: int | None, shared) -> int:
    """``--loader``: each rank iterates a :class:`~mnmg_sampler.loaders.neighbor.DistNeighborLoader`
    through a :class:`~mnmg_sampler.distributed.service.SamplingService` at default settings
    (prefetch, merging, thread mode), ``--batches`` batches per rank per repeat."""
    import torch.distributed as dist

    from ..distributed.service import SamplingService
    from ..loaders.epoch_cursor import PREFETCH, refill
    from ..loaders.neighbor import DistNeighborLoader

    B = task["batch_size"]
    svc = SamplingService(part, seed=task["seed"], features=bool(task["features"]),
                          host_memory=budget, shared_topology=shared,
                          feature_cache_plan=(task["fanouts"], task["batch_size"],
                                              refill(task.get("prefetch") or PREFETCH)),
                          id_maps=task.get("id_maps", "auto"),
                          max_requests_per_round=task.get("merge"),
                          rounds_in_flight=task.get("rounds_in_flight") or "auto")
    try:
        n = min(task["batches"] * world * B, int(seeds.size))
        more = {"prefetch": task["prefetch"]} if task.get("prefetch") else {}
        loader = DistNeighborLoader(svc, seeds[:n], task["fanouts"], B, seed=task["seed"],
                                    replace=task["replace"], edge_ids=task["edge_ids"], **more)
        res = _head(rank, world, len(loader), task, svc.sampler, svc.features,
                    svc.stats().get("placement"))

        def snap() -> dict:
            # collectives counted per working round by the service: the ranks' counters are
            # read at slightly different times, and an idle service is always in an agreement;
            # with rounds in flight, every round's sampler and feature store counts its own
            out: dict = {}
            for slot in svc._slots:
                for k, v in _counters(slot.sampler, slot.features).items():
                    out[k] = out.get(k, 0) + v
            st = svc._stats
            return {**out, **{k: st[k] for k in ("waits", "t_wait", "t_wait_rows", "rounds")},
                    "exchange_calls": st["round_calls"], "agreements": st["round_agreements"]}

        def epoch() -> int:
            return sum(num_edges(b) for b in loader)

        epoch()  # warm-up: compiled code, page cache, buffers
        _timed(res, task["repeats"], snap, epoch)
        res["idle_rounds"] = svc._stats["idle_rounds"]
        res["rounds_in_flight"] = svc.rounds_in_flight
        dist.barrier()
    finally:
        svc.shutdown()
    worker_finish(work, rank, res)
    return 0


def _worker(work: str) -> int:
    import torch
    import torch.distributed as dist

    from ..distributed.features import DistFeatureStore
    from ..distributed.row_cache import CachePlan
    from ..distributed.sampler import DistSampler

    task, part, rank, world, seeds = worker_start(work)
    seed, B, fanouts = task["seed"], task["batch_size"], task["fanouts"]
    shared = _emulate_hosts(task, rank, world)
    budget = host_memory_for(task.get("host_memory"), part, rank, world, task.get("hosts"))
    if task.get("loader"):
        return _loader_worker(work, task, part, rank, world, seeds, budget, shared)
    sampler = DistSampler(part, seed=seed, id_maps=task.get("id_maps", "auto"),
                          shared_topology=shared, host_memory=budget)
    ex = sampler.ex
    store = None
    if task["features"] and part.x is not None:
        store = DistFeatureStore(part, ex, shared=sampler.shared, host=sampler.host,
                                 cache_plan=CachePlan(task["fanouts"], task["batch_size"]),
                                 fit=sampler.placement)
    K = task.get("merge") or 1  # requests per rank per round
    tally = _HopTally(sampler)
    mode = task.get("seed_lookup", "once")
    once = mode in ("once", "both") and part.typed is None  # (typed requests: no new ids)
    owned = 0
    if task["split"] == "owner":
        mine = seeds[sampler.owns(seeds)]
        owned = int(mine.size)
        n_mine = min(task["batches"], -(-mine.size // B))
        t = torch.tensor([n_mine])
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        slots = int(t)

        def batch(b):
            return (mine[b * B:(b + 1) * B], b * world + rank) if b < n_mine else None
    else:
        n = min(task["batches"] * world, -(-seeds.size // B))
        slots = -(-n // world)
        n_mine = len(range(rank, n, world))

        def batch(b):
            i = b * world + rank
            return (seeds[i * B:(i + 1) * B], i) if i < n else None
    rounds = -(-slots // K)
    new_seeds: list | None = None  # this rank's batches' seeds in new ids, once translated

    def one_round(r: int, translated: bool = True) -> int:
        todo = [(b, x) for b, x in ((b, batch(b)) for b in range(r * K, (r + 1) * K))
                if x is not None]
        use = new_seeds if translated else None
        reqs = [_request(part.typed, sd, fanouts, seed, i, task["replace"], task["edge_ids"],
                         None if use is None else use[b]) for b, (sd, i) in todo]
        return sum(num_edges(mb) for mb in sampler.sample(reqs, store))

    one_round(0)  # warm-up (seeds looked up in the round): compiled code, page cache, buffers
    res = _head(rank, world, n_mine, task, sampler, store, sampler.placement.report(
        None if store is None or store.shared is not None
        else store.cache_sizes(sampler.placement),
        "decided" if store is None else store.placement_from))
    res.update(owned_seeds=owned, rounds=[rounds] * task["repeats"])
    if once:  # as a loader does when it is built: every seed of this rank's batches, one lookup
        dist.barrier()
        t, c, b0 = time.perf_counter(), time.process_time(), ex.remote_bytes
        todo = [x[0] for x in (batch(b) for b in range(slots)) if x is not None]
        new_seeds = (sampler.ids.to_new_many(todo) if task["split"] == "global"
                     else [sampler.ids.to_new_local(sd) for sd in todo])  # own: no exchange
        res["seed_setup"] = {"seconds": time.perf_counter() - t,
                             "cpu_s": time.process_time() - c,
                             "remote_bytes": ex.remote_bytes - b0}

    def per_round_lookup(k: int, after: bool) -> None:
        """``--seed-lookup both``: the same rounds with their seeds looked up in the round,
        before even repeats and after odd ones (uncounted by the tally, off meanwhile)."""
        if mode == "both" and k % 2 == after:
            _timed(res.setdefault("per_round", {}), 1, lambda: {"exchange_calls": ex.calls},
                   lambda: sum(one_round(r, translated=False) for r in range(rounds)))

    tally.on = False  # per-hop counts come from one untimed pass after the timed repeats
    _timed(res, task["repeats"],
           lambda: {**_counters(sampler, store), "kernel_nodes": sampler.kernel_nodes},
           lambda: sum(one_round(r) for r in range(rounds)), per_round_lookup)
    tally.per_hop.clear()
    tally.on = True
    dist.barrier()
    for r in range(rounds):  # the same rounds again (deterministic): counted, not timed
        one_round(r)
    res["edges_sampled_here"] = int(sampler.kernel_edges)
    res["hops"] = [dict(tally.per_hop[k]) for k in sorted(tally.per_hop)]
    worker_finish(work, rank, res)
    return 0


# -- parent --------------------------------------------------------------------------------------
def _rates(ranks: list[dict]) -> dict:
    """Edges/s per rank (median time) and in total (all ranks' edges over the slowest rank's
    time), and CPU seconds per million edges summed over ranks, from each rank's per-repeat
    ``seconds``, ``cpu_s`` and ``edges``; medians over the repeats."""
    reps = range(len(ranks[0]["seconds"]))
    per_s = [r["edges"][0] / median(r["seconds"]) for r in ranks]
    totals = [sum(r["edges"][k] for r in ranks) / max(r["seconds"][k] for r in ranks)
              for k in reps]
    cpu = [sum(r["cpu_s"][k] for r in ranks) / max(sum(r["edges"][k] for r in ranks), 1) * 1e6
           for k in reps]
    return {"edges_per_s_per_rank": per_s, "mean_edges_per_s_per_rank": sum(per_s) / len(ranks),
            "total_edges_per_s": median(totals), "total_edges_per_s_runs": totals,
            "cpu_s_per_m_edges": median(cpu), "cpu_s_per_m_edges_runs": cpu}


# bytes per sampled edge (summed over ranks): JSON key <- the ranks' counter
_PER_EDGE = {"bytes_per_edge": "bytes", "remote_bytes_per_edge": "remote_bytes",
             "id_bytes_per_edge_self": "id_self", "id_bytes_per_edge_remote": "id_remote",
             "feature_bytes_per_edge_self": "feat_self",
             "feature_bytes_per_edge_remote": "feat_remote",
             # to ranks of other hosts (--hosts; 0 on one host)
             "cross_host_id_bytes_per_edge": "cross_ids",
             "cross_host_feature_bytes_per_edge": "cross_feat"}


def summarize(ranks: list[dict]) -> dict:
    """Per-rank and total rates and costs of one world size from the ranks' JSON."""
    world = len(ranks)
    rates = _rates(ranks)
    per_rank = [{"rank": r["rank"], "batches": r["batches"], "edges": r["edges"][0],
                 "median_s": median(r["seconds"]), "edges_per_s": v,
                 "kernel_share": median(r["t_kernel"]) / median(r["seconds"]),
                 "exchange_share": median(r["t_exchange"]) / median(r["seconds"]),
                 "exchange_calls": r["exchange_calls"][0], "seconds": r["seconds"],
                 "cpu_s": r["cpu_s"], "cores": r.get("cores")}
                for r, v in zip(ranks, rates["edges_per_s_per_rank"], strict=True)]
    edges = max(sum(sum(r["edges"]) for r in ranks), 1)

    def tot(key: str) -> int:
        return sum(sum(r[key]) for r in ranks)

    def per_round_of(r: dict) -> tuple[float, float, float]:
        n = max(r["rounds"][0], 1)
        calls, agree = r["exchange_calls"][0], r["agreements"][0]
        # an exchange: an agreement, or an all-to-all each way (a request and its reply)
        return calls / n, r["remote_bytes"][0] / n, (agree + (calls - agree) / 2) / n

    rounds = [per_round_of(r) for r in ranks]
    pr = [r.get("per_round") for r in ranks]
    fetched, row_bytes = tot("rows_fetched"), ranks[0]["row_bytes"]
    distinct = tot("distinct_remote_rows")
    hit_rate = tot("cache_hits") / distinct if distinct else 0.0
    wired = tot("remote_rows") - tot("mapped_rows")  # remote rows the wire path served
    setup = [r.get("seed_setup", {}) for r in ranks]
    return {
        "world_size": world, "ranks": per_rank, "edges_per_rank": [p["edges"] for p in per_rank],
        **rates, **{k: tot(v) / edges for k, v in _PER_EDGE.items()},
        # per round, mean of ranks: collectives (agreements included); exchanges (each
        # agreement, and each all-to-all each way: a request and its reply); bytes to others
        "collectives_per_round": sum(c for c, _, _ in rounds) / world,
        "exchanges_per_round": sum(e for _, _, e in rounds) / world,
        "bytes_per_round": sum(b for _, b, _ in rounds) / world,
        # requests per round, per rank (timed rounds of the first repeat)
        "requests_per_round": sum(r["batches"] / max(r["rounds"][0], 1) for r in ranks) / world,
        # --loader: the service's rounds in flight (as `auto` chose them); 1 for sampler calls
        "rounds_in_flight": ranks[0].get("rounds_in_flight", 1),
        "bytes_exchanged": sum(r["bytes"][0] for r in ranks),
        **_hop_summary(ranks),
        "owned_seeds_per_rank": [r.get("owned_seeds", 0) for r in ranks],
        # --seed-lookup both: the same rounds with seeds looked up per round, timed alternately
        # with the main (translated once) repeats, and the main run's ratios to them
        **({"per_round_seed_lookup": _per_round(pr, rates)} if all(pr) else {}),
        # the one-time translation of the ranks' seeds before the timed rounds (slowest rank;
        # CPU and bytes to others summed over ranks); zero work with --seed-lookup per-round
        "seed_setup_s": max(s.get("seconds", 0.0) for s in setup),
        "seed_setup_cpu_s": sum(s.get("cpu_s", 0.0) for s in setup),
        "seed_setup_remote_bytes": sum(s.get("remote_bytes", 0) for s in setup),
        # every remote row requested; those of other ranks' parts read in place (shared
        # topology, host groups: never on the wire); the distinct ones; what crossed the wire
        "feature_rows_remote": tot("remote_rows"), "feature_rows_mapped": tot("mapped_rows"),
        "feature_rows_distinct_remote": distinct,
        "feature_rows_fetched": fetched, "feature_cache_hits": tot("cache_hits"),
        # CPU seconds of the feature fetches per million sampled edges (all ranks; the
        # service thread's), and the part of them inside collectives
        "fetch_cpu_s_per_m_edges": tot("fetch_cpu_s") / edges * 1e6,
        "fetch_exchange_cpu_s_per_m_edges": tot("fetch_exchange_cpu_s") / edges * 1e6,
        "feature_cache_rows": [r["cache_size"] for r in ranks],
        # how the cache's rows were chosen: inclusion (probability), degree or none
        "feature_cache_choice": ranks[0].get("cache_choice", "none"),
        # fetched rows that duplicate another fetched row of the same round (0 by construction)
        "duplicate_rows_fetched_fraction": tot("duplicate_rows_fetched") / fetched
        if fetched else 0.0,
        "duplicate_rows_avoided_fraction": (1 - distinct / wired) if wired else 0.0,
        "feature_wire_vs_distinct_rows": (tot("feat_remote") + tot("feat_self"))
        / (distinct * row_bytes) if distinct and row_bytes else 0.0,
        # of the distinct rows a round needs from parts not read in place, the cached ones
        "cache_hit_rate": hit_rate, "row_cache_hit_rate": hit_rate,
        # and those the last round of the same rank fetched or kept (read again, not fetched)
        "recent_row_hit_rate": tot("recent_hits") / distinct if distinct else 0.0,
        # --loader: seconds a batch's consumer waited for it, and for its rows (the part of
        # the wait while the serving round fetched them), per batch, mean of ranks
        **{name: sum(sum(r.get(k, [0])) / max(sum(r.get("waits", [0])), 1) for r in ranks)
           / world for name, k in (("step_wait_s", "t_wait"),
                                   ("step_wait_for_rows_s", "t_wait_rows"))},
        # what each host holds of the other hosts (distributed/fit.py), as rank 0 reports it
        "placement": ranks[0].get("placement"),
    }


def _per_round(pr: list[dict], once: dict) -> dict:
    """The rates of the per-round seed lookups ``pr`` (per rank), and those of the main run
    (``once``) against them."""
    got = _rates(pr)
    mean, cpu = got["mean_edges_per_s_per_rank"], got["cpu_s_per_m_edges"]
    return {**{k: got[k] for k in ("edges_per_s_per_rank", "mean_edges_per_s_per_rank",
                                   "total_edges_per_s", "cpu_s_per_m_edges")},
            "exchange_calls_per_rank": [p["exchange_calls"][0] for p in pr],
            "seconds": [p["seconds"] for p in pr], "cpu_s": [p["cpu_s"] for p in pr],
            "once_per_rank_edges_per_s_ratio":
                once["mean_edges_per_s_per_rank"] / mean if mean else 0.0,
            "once_cpu_ratio": once["cpu_s_per_m_edges"] / cpu if cpu else 0.0}


def _hop_summary(ranks: list[dict]) -> dict:
    """Per hop, over ranks: frontier nodes, remote fraction, id bytes to others per sampled edge;
    and the id bytes to others per sampled edge split by what they scale with."""
    n = max(len(r.get("hops", [])) for r in ranks)
    tot = [{k: sum(r["hops"][i][k] for r in ranks if i < len(r["hops"]))
            for k in _HopTally.KEYS} for i in range(n)]
    edges = max(sum(t["edges"] for t in tot), 1)
    w, e = ranks[0].get("wire_bytes", 4), ranks[0].get("edge_id_bytes", 0)
    remote = sum(t["remote"] for t in tot)
    remote_edges = sum(t["remote_edges"] for t in tot)
    total = sum(t["id_remote"] for t in tot)
    per_node, per_edge = 2 * w * remote, (w + e) * remote_edges  # ids + counts; neighbors
    return {
        "hops": [{"frontier_nodes": t["nodes"], "sampled_edges": t["edges"],
                  "remote_fraction": t["remote"] / t["nodes"] if t["nodes"] else 0.0,
                  "mapped_fraction": t.get("mapped", 0) / t["nodes"] if t["nodes"] else 0.0,
                  "id_bytes_per_edge_remote": t["id_remote"] / edges} for t in tot],
        "id_bytes_per_edge_remote_parts": {
            "per_remote_node": per_node / edges, "per_remote_edge": per_edge / edges,
            "headers_and_sizes": (total - per_node - per_edge) / edges},
    }


class _Single:
    """The single process's figures: same batches, keys and edge-id setting as the ranks.

    Repeats are spread over the run (``--repeats`` first, then one before each world size), so
    a change in the machine's load hits both sides of a ratio alike.
    """

    def __init__(self, graph, seeds, fanouts, args, edge_ids: bool) -> None:
        from ..sampling.sampler import HeteroSampler, MultiHopSampler, local_hop_fn

        B = args.batch_size
        self.n = min(args.batches, -(-seeds.size // B))
        typed = graph if getattr(graph, "node_types", None) is not None else None  # --typed
        self.reqs = [_request(typed, seeds[i * B:(i + 1) * B], fanouts, args.seed, i,
                              args.replace, edge_ids) for i in range(self.n)]
        self.sampler = HeteroSampler(graph, args.seed) if typed is not None else \
            MultiHopSampler(local_hop_fn(graph, args.seed), graph.num_nodes)
        self.x = graph.x if args.features else None
        self.sampler.sample(self.reqs[:1])  # warm-up
        self.secs: list[float] = []
        self.cpus: list[float] = []
        self.edges = 0

    def run_once(self, cores: list[int] | None = None) -> None:
        """One timed pass over the batches, on ``cores`` when given (one emulated host's)."""
        edges = 0
        with pinned(cores):
            t, c = time.perf_counter(), time.process_time()
            for r in self.reqs:
                (b,) = self.sampler.sample([r])
                if self.x is not None:
                    b.x = self.x[b.n_id.numpy()]
                edges += num_edges(b)
            self.secs.append(time.perf_counter() - t)
            self.cpus.append(time.process_time() - c)
        self.edges = edges

    def result(self) -> dict:
        med = median(self.secs)
        return {"batches": self.n, "edges": self.edges, "median_s": med,
                "per_s": self.edges / med, "seconds": self.secs, "cpu_s": self.cpus,
                "edges_per_batch": self.edges / max(self.n, 1),
                "cpu_s_per_m_edges": median(self.cpus) / max(self.edges, 1) * 1e6}


def typed_request(node_types, offsets, seeds, fanouts, key: int, replace: bool,
                  edge_ids: bool):
    """The typed request of a batch of ``seeds`` (internal ids), grouped by node type."""
    import numpy as np

    from ..sampling.sampler import HeteroSampleRequest

    t = np.searchsorted(offsets, seeds, side="right") - 1
    groups = {name: seeds[t == i] - offsets[i] for i, name in enumerate(node_types)}
    first = node_types[0]
    return HeteroSampleRequest(first, groups.pop(first), fanouts, key, replace,
                               other_seeds=groups, edge_ids=edge_ids)


def _request(typed, seeds, fanouts, seed: int, i: int, replace: bool, edge_ids: bool,
             new_seeds=None):
    """Global batch ``i``'s request: typed (``typed``: a typed graph or part's types, the seeds
    grouped by node type) or homogeneous (``new_seeds``: its seeds in new ids, when known)."""
    from ..ops.rng import request_key
    from ..sampling.sampler import SampleRequest

    key = request_key(seed, 0, i)
    if typed is not None:
        return typed_request(typed.node_types, typed.node_type_offset, seeds, fanouts, key,
                             replace, edge_ids)
    return SampleRequest(seeds, fanouts, key, replace=replace, edge_ids=edge_ids,
                         new_seeds=new_seeds)


def num_edges(b) -> int:
    """Sampled edges of a batch, homogeneous or typed."""
    ei = b.edge_index
    return sum(int(e.shape[1]) for e in ei.values()) if isinstance(ei, dict) else int(
        ei.shape[1])


_TASK_ARGS = ("batch_size", "batches", "seed", "replace", "repeats", "split", "features",
              "host_memory", "edge_ids", "merge", "rounds_in_flight", "prefetch", "id_maps",
              "seed_lookup", "shared_topology", "hosts", "loader")


def run(args: argparse.Namespace) -> int:
    if args.worker:
        return _worker(args.worker)
    from ..commands.sample import parse_fanouts
    fanouts = parse_fanouts(args.fanouts)
    if (args.rounds_in_flight or args.prefetch) and not args.loader:
        raise SystemExit("bench dist: --rounds-in-flight and --prefetch need --loader")
    threads = set_bench_threads(args.threads)
    graph, seeds, load_s = load_for_bench(args)
    if args.features and graph.x is None:  # synthetic rows
        import numpy as np

        graph.x = np.random.default_rng(args.seed).standard_normal(
            (graph.num_nodes, args.features), dtype=np.float32)
    if args.typed:
        if args.features or args.loader or args.hosts or args.split != "global":
            raise SystemExit("bench dist: --typed runs the sampler alone (no --features, "
                             "--loader, --hosts or --split owner yet)")
        from .hetero import typed_view

        graph = typed_view(graph, args.typed)[0]  # types by id range: internal id == id
    opts = {k: getattr(args, k) for k in _TASK_ARGS}  # what the ranks and the JSON both get
    res = base_result("dist", args, graph, seeds, load_s, fanouts, threads, None, **opts,
                      typed=args.typed, host_cores=args.host_cores, dist={})
    cores = os.cpu_count() or 1
    print(graph_line(args, graph, seeds, load_s))
    print(f"threads {threads} per rank, fanouts {fanouts}, partitioning "
          f"{args.partition_method}, " + ", ".join(f"{k} {v}" for k, v in opts.items())
          + f"; load average {res['machine']['loadavg_1m'] or 0:.2f} on {cores} cores",
          flush=True)

    usable = usable_cores() if args.host_cores == "split" else None
    layouts = {w: host_cores(w, args.hosts, usable) for w in args.world_sizes}
    if args.hosts and args.host_cores == "split" and any(v is None for v in layouts.values()):
        print(f"emulated hosts share every core where fewer than {args.hosts} cores are "
              f"usable here ({len(usable) if usable else 'no'} pinnable cores)", flush=True)
    # the single process on one emulated host's cores (every world size splits them alike)
    single_cores = res["single_cores"] = next((v[0] for v in layouts.values() if v), None)
    one = _Single(graph, seeds, fanouts, args, args.edge_ids)
    for _ in range(args.repeats):
        one.run_once(single_cores)
    task = {**opts, "fanouts": fanouts, "threads": threads}
    if args.typed:  # a typed part cannot list its non-isolated nodes by row: sent instead
        task["seeds"] = seeds.tolist()
    with tempfile.TemporaryDirectory(prefix="mnmg-bench-dist-") as tmp:
        root = Path(tmp)
        for w in args.world_sizes:
            parts = partition_for(graph, w, args.partition_method, args.seed, root)
            over = f" (oversubscribed: {w * threads} threads on {cores} cores)" \
                if w * threads > cores else ""
            one.run_once(single_cores)
            cores_of = layouts[w]
            where = "" if cores_of is None else ", hosts on cores " + " | ".join(
                ",".join(map(str, c)) for c in dict.fromkeys(map(tuple, cores_of)))
            print(f"running {w} rank(s){over}{where} ...", flush=True)
            t = time.perf_counter()
            ranks = launch("dist", w, root / f"work-{w}",
                           {**task, "partitions": str(parts), "cores": cores_of},
                           args.timeout, threads)
            res["dist"][str(w)] = {**summarize(ranks), "launch_s": time.perf_counter() - t,
                                   "oversubscribed": bool(over)}
    single = res["single"] = one.result()
    for s in res["dist"].values():
        s["per_rank_vs_single"] = s["mean_edges_per_s_per_rank"] / single["per_s"]
        s["total_vs_single"] = s["total_edges_per_s"] / single["per_s"]
        s["cpu_vs_single"] = s["cpu_s_per_m_edges"] / single["cpu_s_per_m_edges"]
    print_table(res)
    if args.plot:
        plot(res, args.plot)
    write_json(args.json, res)
    return 0


def print_table(res: dict) -> None:
    single = res["single"]
    print(f"\n{'':14}{'edges/s per rank':>26}{'total':>12}{'x single':>9}{'per rank x':>11}"
          f"{'CPU s/M edges':>14}{'x single':>9}{'id B/edge':>14}{'feat B/edge':>16}\n{'':72}"
          f"{'(all ranks)':>14}{'':>9}{'self/others':>14}{'self/others':>16}")
    one = f"{single['per_s'] / 1e6:,.2f} M/s"
    print(f"{'single process':14}{one:>26}{one:>12}"
          f"{'1.00x':>9}{'1.00x':>11}{single['cpu_s_per_m_edges']:>14.3f}{'1.00x':>9}"
          f"{'-':>14}{'-':>16}")
    for w, s in res["dist"].items():
        each = ", ".join(f"{v / 1e6:.2f}" for v in s["edges_per_s_per_rank"]) + " M/s"
        name = f"{w} rank(s)" + ("*" if s["oversubscribed"] else "")
        ids = f"{s['id_bytes_per_edge_self']:.2f}/{s['id_bytes_per_edge_remote']:.2f}"
        feat = (f"{s['feature_bytes_per_edge_self']:.1f}/"
                f"{s['feature_bytes_per_edge_remote']:.1f}")
        print(f"{name:14}{each:>26}{s['total_edges_per_s'] / 1e6:>8.2f} M/s"
              f"{s['total_vs_single']:>8.2f}x{s['per_rank_vs_single']:>10.2f}x"
              f"{s['cpu_s_per_m_edges']:>14.3f}{s['cpu_vs_single']:>8.2f}x{ids:>14}{feat:>16}")
    if any(s["oversubscribed"] for s in res["dist"].values()):
        print("* more rank threads than cores: ranks share cores, so per-rank edges/s drops; "
              "CPU s per edge stays comparable")
    for w, s in res["dist"].items():
        _print_world(res, w, s)
    print(f"{single['edges_per_batch']:,.0f} edges/batch; id bytes: sampling traffic; feature "
          "bytes: ids and rows of the feature fetch; self: what a rank hands its own collective")


def _print_world(res: dict, w: str, s: dict) -> None:
    """One world size's lines below the table: rounds, seeds, features, hops."""
    print(f"W={w}: {s['requests_per_round']:.1f} requests, {s['rounds_in_flight']} in flight, "
          f"{s['collectives_per_round']:.1f} collectives ({s['exchanges_per_round']:.1f} "
          f"exchanges) and {s['bytes_per_round'] / 1024:.1f} KiB to others per round (per "
          f"rank); crossing hosts per sampled edge: {s['cross_host_id_bytes_per_edge']:.2f} id "
          f"B, {s['cross_host_feature_bytes_per_edge']:.2f} feature B"
          + (f"; a batch waited {s['step_wait_s'] * 1e3:.1f} ms, "
             f"{s['step_wait_for_rows_s'] * 1e3:.1f} ms of it for rows" if s["step_wait_s"]
             else ""))
    print(f"W={w}: seeds " + (
        "looked up in every timed round" if res.get("seed_lookup") == "per-round" else
        f"translated once before the timed rounds (as a loader does): {s['seed_setup_s'] * 1e3:.1f}"
        f" ms (slowest rank), {s['seed_setup_cpu_s'] * 1e3:.1f} ms CPU (all ranks), "
        f"{s['seed_setup_remote_bytes']:,} B to others"))
    p = s.get("per_round_seed_lookup")
    if p:
        print(f"W={w}, alternate repeats, seeds looked up in every round: "
              + ", ".join(f"{v / 1e6:.2f}" for v in p["edges_per_s_per_rank"])
              + f" M/s per rank, {p['cpu_s_per_m_edges']:.3f} CPU s/M edges, collectives per "
              f"rank per repeat {p['exchange_calls_per_rank']} (translated once: "
              f"{[r['exchange_calls'] for r in s['ranks']]}, "
              f"{p['once_per_rank_edges_per_s_ratio']:.2f}x edges/s per rank, "
              f"{p['once_cpu_ratio']:.2f}x CPU per edge)")
    if res["features"]:
        print(f"W={w} features: " + (
            f"{s['feature_rows_mapped']:,} rows of other ranks' parts read in place, none "
            "fetched" if not s["feature_rows_fetched"] else
            f"duplicate rows fetched {s['duplicate_rows_fetched_fraction']:.0%} (avoided "
            f"{s['duplicate_rows_avoided_fraction']:.0%} of remote rows), wire bytes "
            f"{s['feature_wire_vs_distinct_rows']:.3f}x distinct remote rows x row size, "
            f"cache hit rate {s['cache_hit_rate']:.0%} (rows chosen by "
            f"{s['feature_cache_choice']}), {s['recent_row_hit_rate']:.0%} read again from "
            f"the last round; fetch CPU {s['fetch_cpu_s_per_m_edges']:.3f} s per "
            f"M edges ({s['fetch_exchange_cpu_s_per_m_edges']:.3f} in collectives)"))
    if not s.get("hops") or int(w) < 2:
        return
    p = s["id_bytes_per_edge_remote_parts"]
    hops = ", ".join(f"hop {i + 1} {h['id_bytes_per_edge_remote']:.2f} "
                     f"({h['remote_fraction']:.0%} of {h['frontier_nodes']:,} frontier nodes "
                     f"remote" + (f", {h['mapped_fraction']:.0%} sampled from mapped parts"
                                  if h.get("mapped_fraction") else "") + ")"
                     for i, h in enumerate(s["hops"]))
    owned = ("; owned seeds per rank " + ", ".join(f"{v:,}" for v in s["owned_seeds_per_rank"])
             if res["split"] == "owner" else "")
    print(f"W={w} id B/edge to others by hop: {hops}; by kind: {p['per_remote_node']:.2f} ids "
          f"and counts (per remote node), {p['per_remote_edge']:.2f} neighbors (per remote "
          f"edge), {p['headers_and_sizes']:.3f} the rest (headers, sizes, reply padding, "
          f"original ids){owned}")


def plot(res: dict, path: str) -> None:
    """Per-rank edges/s and CPU s per million edges against W, single process as W=0 line."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: pip install 'mnmg-sampler[plot]'; no plot written")
        return
    ws, ss = [int(w) for w in res["dist"]], list(res["dist"].values())
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for ax, lines, one, label in (
            (axes[0], [("mean_edges_per_s_per_rank", "o-", "per rank"),
                       ("total_edges_per_s", "s--", "total")], "per_s", "sampled edges/s (M)"),
            (axes[1], [("cpu_s_per_m_edges", "o-", "all ranks")], "cpu_s_per_m_edges",
             "CPU s per M sampled edges")):
        scale = 1e6 if one == "per_s" else 1.0
        for key, style, name in lines:
            ax.plot(ws, [s[key] / scale for s in ss], style, label=name)
        ax.axhline(res["single"][one] / scale, color="gray", ls=":", label="single process")
        ax.set(xlabel="ranks (W)", ylabel=label, xticks=ws)
        ax.legend()
    fig.suptitle(f"{Path(res['graph']).name}, fanouts {res['fanouts']}, "
                 f"{res['partition_method']}, split {res['split']}", fontsize=9)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")
