"""Shared plumbing of the distributed bench modes (``dist``, ``merge``, ``overlap``).

The mode (the *parent*) partitions the graph, writes the ranks' work to ``WORK/task.json`` and
starts them under torchrun, re-entering the mode with the hidden ``--worker WORK``; each rank
writes ``WORK/rank{r}.json``. Every launch has a hard timeout, and a failed launch raises with
the tail of the ranks' output. How they run:
benchmarks/README.md#distributed-modes-bench-dist-bench-merge-bench-overlap.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from ..commands.sample import add_graph_arguments, positive_int
from ..system.console import JSON_OUT_HELP
from .cores import pin, usable_cores

log = logging.getLogger(__name__)

TASK = "task.json"


class LaunchError(RuntimeError):
    """A benchmark launch failed or timed out; the message carries the ranks' output tail."""


def add_graph_option(p: argparse.ArgumentParser, default: str) -> None:
    """``--graph`` (default ``default``) and the graph and sampling options of ``sample``."""
    p.add_argument("--graph", default=default,
                   help=f"cora, rmat:SCALE[:EDGE_FACTOR] or a graph file (default: {default})")
    add_graph_arguments(p)


def add_common_arguments(p: argparse.ArgumentParser, graph_default: str, fanouts: str,
                         batch_size: int) -> None:
    """Options every distributed mode shares; ``--threads`` defaults to 1 per rank."""
    add_graph_option(p, graph_default)
    for a in p._actions:  # this mode's own defaults, and help that states them
        new = {"threads": 1, "fanouts": fanouts, "batch_size": batch_size}.get(a.dest)
        if new is not None:
            a.default = new
            a.help = (a.help or "").split(" (default")[0] + f" (default: {new})"
    p.add_argument("--partition-method", default="random", choices=["random", "range", "metis"],
                   help="how the graph is split across ranks (default: random)")
    p.add_argument("--repeats", type=positive_int, default=3,
                   help="repeats of each timed measurement; the median is reported (default: 3)")
    p.add_argument("--timeout", type=float, default=900.0,
                   help="hard limit in seconds for each torchrun launch (default: 900)")
    p.add_argument("--json", metavar="OUT", nargs="?", const="-", help=JSON_OUT_HELP)
    p.add_argument("--worker", metavar="DIR", help=argparse.SUPPRESS)


def command_line(mode: str) -> str | None:
    """The user's command, when this process was started as ``mnmg-sampler bench MODE``."""
    argv = sys.argv[1:]
    return "mnmg-sampler " + " ".join(argv) if argv[:2] == ["bench", mode] else None


def partition_for(graph, world: int, method: str, seed: int, root: Path) -> Path:
    """Partition ``graph`` into ``world`` parts under ``root`` (written once, reused)."""
    from ..graph.partition import partition

    out = root / f"parts-{world}"
    if not out.exists():
        t = time.perf_counter()
        partition(graph, world, method if world > 1 else "range", out, seed)
        log.info("partitioned into %d parts in %.1fs", world, time.perf_counter() - t)
    return out


def _env(threads: int) -> dict:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    env.update(OMP_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1")
    # never more numba threads than asked: a pool of idle threads still costs barriers
    env["NUMBA_NUM_THREADS"] = str(max(threads, 1))
    return env


def launch(mode: str, world: int, work: Path, task: dict, timeout: float,
           threads: int) -> list[dict]:
    """Run ``world`` ranks of ``bench MODE --worker WORK`` under torchrun; results by rank."""
    from ..system.runtime import free_port

    work.mkdir(parents=True, exist_ok=True)
    for old in work.glob("rank*.json"):
        old.unlink()
    (work / TASK).write_text(json.dumps(task))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(world),
           "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}",
           "-m", "mnmg_sampler", "bench", mode, "--worker", str(work)]
    log.debug("launching %d rank(s): %s", world, " ".join(cmd))
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(threads),
                              timeout=timeout)
    except subprocess.TimeoutExpired as e:
        tail = _tail((e.stderr or b"").decode() if isinstance(e.stderr, bytes) else e.stderr)
        raise LaunchError(f"bench {mode} with {world} rank(s) did not finish within "
                          f"{timeout:.0f}s (raise --timeout for large graphs)\n{tail}") from None
    paths = [work / f"rank{r}.json" for r in range(world)]
    if proc.returncode != 0 or not all(p.is_file() for p in paths):
        raise LaunchError(f"bench {mode} with {world} rank(s) failed (exit {proc.returncode})\n"
                          + _tail(proc.stderr or proc.stdout))
    return [json.loads(p.read_text()) for p in paths]


def _tail(text: str | None, n: int = 25) -> str:
    return "\n".join((text or "").strip().splitlines()[-n:])


# -- inside a rank -------------------------------------------------------------------------------
def worker_start(work: str) -> tuple[dict, object, int, int, object]:
    """Init gloo from torchrun's environment, set threads, load this rank's part (no checksums:
    the parent has just written it). Returns ``(task, part, rank, world, seeds)``, ``seeds``
    being every non-isolated node in the seed order ``mnmg-sampler sample`` uses."""
    import numpy as np

    from ..commands.sample import seed_order
    from ..distributed.offline import global_nonisolated
    from ..graph.partition_io import load_partition
    from ..system.runtime import init_distributed, set_threads

    task = json.loads((Path(work) / TASK).read_text())
    if task.get("cores"):  # an emulated host's cores, before gloo and numba start threads
        pin(task["cores"][int(os.environ["RANK"])])
    env, _ = init_distributed("gloo", "cpu")
    set_threads(int(task.get("threads", 1)))
    part = load_partition(task["partitions"], env.rank, env.world_size, verify=False)
    seeds = (np.asarray(task["seeds"], np.int64) if "seeds" in task  # (a typed part's)
             else seed_order(global_nonisolated(part), task["seed"]))
    return task, part, env.rank, env.world_size, seeds


def distinct_seeds(seeds, start: int, count: int):
    """``count`` seeds of the epoch order from position ``start``, wrapping around the end, but
    never one twice (the loader refuses repeated seeds): at most every seed once."""
    import numpy as np

    n = min(int(count), int(seeds.size))
    return seeds.take(np.arange(start, start + n), mode="wrap")


def write_result(work: str, rank: int, result: dict) -> None:
    """Write this rank's result atomically (the parent reads ``rank{r}.json``)."""
    path = Path(work) / f"rank{rank}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    os.replace(tmp, path)


def worker_finish(work: str, rank: int, result: dict) -> None:
    """:func:`write_result` with the cores this rank ran on, then leave the process group."""
    import torch.distributed as dist

    cores = usable_cores()
    write_result(work, rank, result if cores is None else {**result, "cores": cores})
    dist.barrier()
    dist.destroy_process_group()


# -- reporting ---------------------------------------------------------------------------------
def machine_info(threads: int) -> dict:
    """What ran the benchmark: CPU model, cores, versions and the load average at the start."""
    import platform

    import numba
    import numpy as np
    import torch

    from ..system.host_malloc import malloc_state

    model = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": model, "cpu_count": os.cpu_count(), "threads": threads,
            "torch_threads": torch.get_num_threads(),  # pinned too (set_bench_threads)
            "python": platform.python_version(), "numba": numba.__version__,
            "numpy": np.__version__, "malloc": malloc_state(),
            # other processes compete for the cores: a load above the core count skews timings
            "loadavg_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None}


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def write_json(path: str | None, res: dict) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(res, indent=2) + "\n")
        print(f"\nwrote {path}")


def set_bench_threads(threads: int | None) -> int:
    """Numba *and* torch threads of this process, and its malloc
    (:mod:`~mnmg_sampler.system.host_malloc`), as each rank sets them, so a single-process
    figure runs under a rank's settings (a kernel timed before any sampler tuned malloc paid
    page faults on its outputs: 0.40x the gather instead of 0.51x on rmat:20)."""

    from ..commands.sample import set_threads
    from ..system.host_malloc import tune_host_malloc

    tune_host_malloc()
    return set_threads(threads)


def load_for_bench(args) -> tuple[object, object, float]:
    """Load ``args.graph``; returns ``(graph, seeds in epoch order, load seconds)``."""
    from ..commands.sample import seed_order
    from ..graph.datasets import load_graph, nonisolated_nodes

    t0 = time.perf_counter()
    graph = load_graph(args.graph, undirected=args.undirected)
    load_s = time.perf_counter() - t0
    return graph, seed_order(nonisolated_nodes(graph), args.seed), load_s


def graph_line(args, graph, seeds, load_s: float) -> str:
    und = " (undirected)" if args.undirected else ""
    return (f"graph {args.graph}{und}: {graph.num_nodes:,} nodes ({seeds.size:,} non-isolated), "
            f"{graph.num_edges:,} edges, loaded in {load_s:.1f}s")


HEAD_OPTIONS = ("batch_size", "batches", "prefetch", "ranks", "replace", "seed", "repeats",
                "partition_method")


def base_result(mode: str, args, graph, seeds, load_s: float, fanouts, threads: int,
                target: float | None, **extra) -> dict:
    """The JSON head every mode reports: what ran, on what, on which machine (the options of
    ``args`` among :data:`HEAD_OPTIONS` that the mode has)."""
    return {
        "mode": mode, "command": command_line(mode), "graph": args.graph, "name": graph.name,
        "undirected": args.undirected, "num_nodes": graph.num_nodes,
        "num_edges": graph.num_edges, "nonisolated_nodes": int(seeds.size), "load_s": load_s,
        "fanouts": fanouts, **{k: getattr(args, k) for k in HEAD_OPTIONS if hasattr(args, k)},
        "target": target, "machine": machine_info(threads), **extra,
    }


def start_run(mode: str, args, target: float, **extra) -> tuple[list[int], int, object, dict]:
    """The parent's first steps in a mode: fanouts, threads, the graph (its line printed)
    and the JSON head; returns ``(fanouts, threads, graph, result)``."""
    from ..commands.sample import parse_fanouts

    fanouts = parse_fanouts(args.fanouts)
    threads = set_bench_threads(args.threads)
    graph, seeds, load_s = load_for_bench(args)
    res = base_result(mode, args, graph, seeds, load_s, fanouts, threads, target, **extra)
    print(graph_line(args, graph, seeds, load_s))
    return fanouts, threads, graph, res


def launch_on_partitions(mode: str, args, graph, fanouts, threads: int, **task) -> list[dict]:
    """Partition ``graph`` into ``args.ranks`` parts in a temporary directory and run the mode's
    workers on them, their task ``task`` and the options every service mode has; returns each
    rank's result."""
    import tempfile

    task.update(fanouts=fanouts, threads=threads, **{k: getattr(args, k) for k in (
        "batch_size", "batches", "prefetch", "seed", "repeats")})
    with tempfile.TemporaryDirectory(prefix=f"mnmg-bench-{mode}-") as tmp:
        root = Path(tmp)
        parts = partition_for(graph, args.ranks, args.partition_method, args.seed, root)
        print(f"running {args.ranks} rank(s) ...", flush=True)
        return launch(mode, args.ranks, root / "work", {**task, "partitions": str(parts)},
                      args.timeout, threads)
