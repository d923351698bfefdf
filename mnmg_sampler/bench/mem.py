"""``mnmg-sampler bench mem``: memory per rank and the distributed partitioner.

``--what`` (comma-separated; default ``rss``) picks the measurements:

``rss``
    For each world size in ``--world-sizes`` the graph (with ``--feature-dim`` synthetic float32
    features) is partitioned and that many ranks sample ``--batches`` minibatches each, features
    included, through the sampling service and loader. Each rank reports its peak RSS
    (``ru_maxrss``), its steady RSS (median over the second half of its batches), the bytes of
    its part's files, of its feature rows and labels and of its id-map shard (no rank maps the
    global maps), and the time from process start to its first batch (start-up verification
    ``auto``). The first world size starts twice: the second start finds the verified stamp.
``partition``
    ``--partition-graph`` (default ``rmat:22``, undirected; or a typed input: an OGB hetero
    directory or a saved ``HeteroData``) partitioned by one process and by ``--partition-ranks``
    ranks (:mod:`mnmg_sampler.distributed.ingest`), each reporting its own peak RSS; the two
    output directories are compared file by file.

Sampling cost against graph size is ``bench dist --graph rmat:S`` (``cpu_s_per_m_edges``).
Absolute figures drift on a shared machine; compare the ratios printed beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time
from pathlib import Path

from ._launch import TASK, command_line, launch, write_json, write_result

HELP = "memory: RSS per rank vs its part, distributed vs single partitioner peak"
WHATS = ("rss", "partition")
MB = 2**20


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("mem", help=HELP, description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--what", default="rss", help="comma-separated: rss, partition (default: rss)")
    p.add_argument("--graph", default="rmat:18", help="graph of the rss runs (default rmat:18)")
    p.add_argument("--undirected", action="store_true", help="add reverse edges (rss runs)")
    p.add_argument("--feature-dim", type=int, default=64,
                   help="synthetic float32 feature width of the rss runs (default 64)")
    p.add_argument("--world-sizes", default="1,2,4", help="rss runs (default 1,2,4)")
    p.add_argument("--fanouts", default="10,10", help="(default 10,10)")
    p.add_argument("--batch-size", type=int, default=1024, help="(default 1024)")
    p.add_argument("--batches", type=int, default=20,
                   help="minibatches per rank in rss runs (default 20)")
    p.add_argument("--partition-graph", default="rmat:22",
                   help="graph of the partition comparison, undirected, or a typed input "
                   "(OGB hetero directory, saved HeteroData) (default rmat:22)")
    p.add_argument("--partition-ranks", type=int, default=4, help="(default 4)")
    p.add_argument("--partition-method", default="random", choices=["random", "range", "hash"],
                   help="(default random)")
    p.add_argument("--timeout", type=float, default=3600.0, help="per launch (default 3600)")
    p.add_argument("--json", metavar="OUT", help="also write the results as JSON to OUT")
    p.add_argument("--worker", metavar="DIR", help=argparse.SUPPRESS)
    p.set_defaults(bench_run=run)
    return p


# -- inside a process ---------------------------------------------------------------------------
def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def _since_start() -> float:
    """Seconds since this process started (from /proc, clock ticks since boot)."""
    with open("/proc/self/stat") as f:
        start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return uptime - start_ticks / os.sysconf("SC_CLK_TCK")


def _part_bytes(path: str, rank: int) -> dict:
    from ..graph.partition_io import read_manifest

    m = read_manifest(path)
    files = m["parts"][rank]["files"]
    size = {k: m["files"][rel]["bytes"] for k, rel in files.items()}
    feats = size.pop("x", 0) + size.pop("y", 0)
    return {"part": sum(size.values()), "features": feats}


def _rss_worker(work: str, task: dict) -> None:
    import numpy as np
    import torch.distributed as dist

    from ..distributed.service import SamplingService
    from ..graph.partition_io import load_partition
    from ..graph.permute import permute
    from ..loaders.neighbor import DistNeighborLoader
    from ..system.runtime import init_distributed, set_threads

    env, _ = init_distributed("gloo", "cpu")
    set_threads(1)
    rank, world = env.rank, env.world_size
    base = _rss()
    t0 = time.perf_counter()
    part = load_partition(task["partitions"], rank, world, verify=task["verify"])
    t_load = time.perf_counter() - t0
    n, b = part.num_nodes, task["batch_size"]
    k = min(n, task["batches"] * b * world)
    seeds = permute(np.arange(k, dtype=np.int64), n, 1)  # k distinct ids, no n-sized array
    # the wire path: with the shared topology a rank's RSS also counts the pages of other
    # parts it touched (shared with their owners, not copied)
    svc = SamplingService(part, seed=0, features=True, shared_topology=False)
    loader = DistNeighborLoader(svc, seeds, task["fanouts"], b, prefetch=2)
    samples, first, edges = [], None, 0
    for batch in loader:
        if first is None:
            first = _since_start()
        edges += int(batch.edge_index.shape[1])
        samples.append(_rss())
    svc.shutdown()
    dist.barrier()
    half = samples[len(samples) // 2:] or [_rss()]
    write_result(work, rank, {"rank": rank, "base": base, "steady": float(np.median(half)),
                         "peak": max(_peak(), max(half)), "load_s": t_load, "first_batch_s": first,
                         "batches": len(samples), "edges": edges,
                         "maps": svc.sampler.ids.nbytes, **_part_bytes(task["partitions"], rank)})
    dist.destroy_process_group()


def _dist_partition_worker(work: str, task: dict) -> None:
    import torch.distributed as dist

    from ..distributed.ingest import partition_distributed, partition_typed_distributed
    from ..graph.typed_io import sliceable_typed_input
    from ..system.runtime import init_distributed

    env, _ = init_distributed("gloo", "cpu")
    base = _rss()
    t0 = time.perf_counter()
    if sliceable_typed_input(task["graph"]):
        partition_typed_distributed(task["graph"], task["out"], task["method"], 0)
    else:
        partition_distributed(task["graph"], task["out"], task["method"], 0, undirected=True)
    write_result(work, env.rank, {"rank": env.rank, "base": base, "peak": _peak(),
                             "seconds": time.perf_counter() - t0})
    dist.barrier()
    dist.destroy_process_group()


def _single_partition_worker(work: str, task: dict) -> None:
    from ..graph.datasets import load_graph
    from ..graph.partition import partition
    from ..graph.typed_io import load_typed_graph, sliceable_typed_input

    base = _rss()
    t0 = time.perf_counter()
    name = task["graph"]
    g = load_typed_graph(name) if sliceable_typed_input(name) else load_graph(name, undirected=True)
    partition(g, task["parts"], task["method"], task["out"], 0)
    write_result(work, 0, {"rank": 0, "base": base, "peak": _peak(),
                      "seconds": time.perf_counter() - t0})


WORKERS = {"rss": _rss_worker, "dist_partition": _dist_partition_worker,
           "single_partition": _single_partition_worker}


def _worker(work: str) -> int:
    task = json.loads((Path(work) / TASK).read_text())
    WORKERS[task["kind"]](work, task)
    return 0


# -- parent -------------------------------------------------------------------------------------
def _ints(text: str) -> list[int]:
    return [int(t) for t in str(text).split(",") if t.strip()]


def _rss_runs(args, root: Path) -> dict:
    from ..graph.datasets import load_graph
    from ..graph.partition import partition
    from ..graph.permute import node_features

    g = load_graph(args.graph, undirected=args.undirected or None)
    if g.x is None and args.feature_dim > 0:
        import numpy as np

        g.x = node_features(np.arange(g.num_nodes), args.feature_dim, 0)
    out: dict = {"graph": args.graph, "num_nodes": g.num_nodes, "num_edges": g.num_edges,
                 "feature_dim": args.feature_dim, "worlds": {}}
    worlds = _ints(args.world_sizes)
    for i, w in enumerate(worlds):
        parts = root / f"parts-{w}"
        partition(g, w, "random", parts, 0)
        task = {"kind": "rss", "partitions": str(parts), "verify": "auto",
                "fanouts": _ints(args.fanouts), "batch_size": args.batch_size,
                "batches": args.batches}
        print(f"rss: {w} rank(s) ...", flush=True)
        out["worlds"][str(w)] = launch("mem", w, root / f"work-{w}", task, args.timeout, 1)
        if i == 0:  # the same ranks again: the verified stamp skips the checksums
            again = launch("mem", w, root / f"work-{w}b", task, args.timeout, 1)
            out["restart"] = {"world": w, "first": out["worlds"][str(w)], "second": again}
    del g
    return out


def _print_rss(res: dict) -> None:
    print(f"\nrss: {res['graph']} ({res['num_nodes']:,} nodes, {res['num_edges']:,} edges, "
          f"{res['feature_dim']} float32 features); MB per rank")
    print(f"{'W':>3}{'rank':>5}{'part':>8}{'feat':>8}{'maps':>8}{'base':>8}{'steady':>8}"
          f"{'peak':>8}{'steady/(part+feat)':>20}{'bound':>8}{'ok':>4}")
    for w, ranks in res["worlds"].items():
        for r in ranks:
            data = r["part"] + r["features"]
            bound = 1.2 * data + 400 * MB
            print(f"{w:>3}{r['rank']:>5}{r['part'] / MB:>8.0f}{r['features'] / MB:>8.0f}"
                  f"{r['maps'] / MB:>8.0f}{r['base'] / MB:>8.0f}{r['steady'] / MB:>8.0f}"
                  f"{r['peak'] / MB:>8.0f}{r['steady'] / max(data, 1):>20.2f}"
                  f"{bound / MB:>8.0f}{'yes' if r['steady'] <= bound else 'NO':>4}")
    rs = res["restart"]
    f = max(r["first_batch_s"] for r in rs["first"])
    s = max(r["first_batch_s"] for r in rs["second"])
    lf = max(r["load_s"] for r in rs["first"])
    ls = max(r["load_s"] for r in rs["second"])
    print(f"time to first batch (W={rs['world']}, slowest rank, from process start): first start "
          f"{f:.2f}s (load + verify {lf:.2f}s), second start with the verified stamp {s:.2f}s "
          f"(load {ls:.2f}s)")


def _partition_runs(args, root: Path) -> dict:
    import filecmp

    w = args.partition_ranks
    base = {"graph": args.partition_graph, "method": args.partition_method}
    print(f"partition: {args.partition_graph}, one process ...", flush=True)
    single, = launch("mem", 1, root / "work-single", {**base, "kind": "single_partition",
                                                      "parts": w, "out": str(root / "single")},
                     args.timeout, 1)
    print(f"partition: {w} ranks ...", flush=True)
    ranks = launch("mem", w, root / "work-dist", {**base, "kind": "dist_partition",
                                                  "out": str(root / "dist")}, args.timeout, 1)
    a, b = root / "single", root / "dist"
    rels = sorted(str(p.relative_to(a)) for p in a.rglob("*") if p.is_file())
    same = rels == sorted(str(p.relative_to(b)) for p in b.rglob("*") if p.is_file()) and \
        all(filecmp.cmp(a / r, b / r, shallow=False) for r in rels)
    return {**base, "parts": w, "single": single, "ranks": ranks, "identical": same,
            "files": len(rels)}


def _print_partition(res: dict) -> None:
    s = res["single"]
    print(f"\npartition: {res['graph']}, method {res['method']}, {res['parts']} parts")
    print(f"{'':18}{'peak RSS MB':>12}{'x single':>10}{'seconds':>9}")
    print(f"{'one process':18}{s['peak'] / MB:>12.0f}{1:>10.2f}{s['seconds']:>9.1f}")
    for r in res["ranks"]:
        print(f"{'rank ' + str(r['rank']) + ' of ' + str(res['parts']):18}"
              f"{r['peak'] / MB:>12.0f}{r['peak'] / s['peak']:>10.2f}{r['seconds']:>9.1f}")
    print(f"parts identical: {'yes' if res['identical'] else 'NO'} ({res['files']} files compared "
          "byte for byte)")


def run(args: argparse.Namespace) -> int:
    if args.worker:
        return _worker(args.worker)
    from ..errors import ConfigError

    whats = [w.strip() for w in args.what.split(",") if w.strip()]
    bad = [w for w in whats if w not in WHATS]
    if bad or not whats:
        raise ConfigError(f"--what {args.what!r}", "nothing to measure",
                          f"use a comma-separated subset of {', '.join(WHATS)}")
    res: dict = {"mode": "mem", "command": command_line("mem")}
    with tempfile.TemporaryDirectory(prefix="mnmg-bench-mem-") as tmp:
        root = Path(tmp)
        if "rss" in whats:
            res["rss"] = _rss_runs(args, root / "rss")
            _print_rss(res["rss"])
        if "partition" in whats:
            res["partition"] = _partition_runs(args, root / "partition")
            _print_partition(res["partition"])
    write_json(args.json, res)
    return 0
