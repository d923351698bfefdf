"""The DGL peer of the one-process modes (``single``, ``link``): its venv, its input, its runs.

The peer runs as a subprocess of another venv (``../shared/peers/setup.sh``) on the graph saved
as an ``.npz``; its runs are interleaved with ours (``before_each``) so both see the same
machine state, and the median run is reported.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["repo_root", "add_peer_options", "peer_python", "save_graph", "peer_runs",
           "median_run", "run_peer"]


def repo_root() -> Path:
    """The root of this checkout (where `.peers-venv` may be)."""
    return Path(__file__).resolve().parents[2]


def add_peer_options(p, dgl_bench: bool = False) -> None:
    """``--peers-venv``, (``--dgl-bench``,) ``--peer-repeats`` and ``--no-peers``."""
    from ..commands.sample import positive_int

    p.add_argument("--peers-venv", metavar="DIR",
                   help="venv made by ../shared/peers/setup.sh (default: .peers-venv if present)")
    if dgl_bench:
        p.add_argument("--dgl-bench", metavar="FILE",
                       help="path of dgl_bench.py (default: ../shared/peers/dgl_bench.py)")
    p.add_argument("--peer-repeats", type=positive_int, default=3,
                   help="DGL subprocess runs, median reported; each reloads the graph "
                        "(default: 3)")
    p.add_argument("--no-peers", action="store_true", help="skip the DGL comparison")


def peer_python(venv: str | None) -> Path | None:
    """The Python of the DGL peer venv (``--peers-venv``, else ``.peers-venv`` here or at the
    repository root), or ``None``."""
    venvs = [Path(venv)] if venv else [Path(".peers-venv"), repo_root() / ".peers-venv"]
    return next((v / "bin" / "python" for v in venvs if (v / "bin" / "python").exists()), None)


def save_graph(graph, path: Path, **extra) -> None:
    """Write ``graph`` for the peer: ``src``, ``dst``, ``num_nodes`` (and ``extra`` arrays).

    Our CSR row ``v`` lists the sources of the edges into ``v`` and DGL samples in-edges the
    same way; edge ``i`` of DGL's graph is CSR entry ``i``, so edge ids are the same edges.
    """
    import numpy as np

    dst = np.repeat(np.arange(graph.num_nodes, dtype=np.int64), graph.degrees())
    np.savez(path, src=graph.indices, dst=dst, num_nodes=np.int64(graph.num_nodes), **extra)


def peer_runs(cmd: list[str], threads: int, repeats: int,
              before_each: Callable[[], None] | None = None,
              wall: bool = False) -> tuple[list[dict], str | None]:
    """``repeats`` runs of the peer command, each after ``before_each()``: the JSON of each run
    (its last ``{...}`` line; with ``wall``, plus its wall time ``wall_s``), or the runs so far
    and ``"exit N: <output tail>"`` of the first that failed."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), DGLBACKEND="pytorch")
    runs = []
    for _ in range(repeats):
        if before_each is not None:
            before_each()
        t = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
        dt = time.perf_counter() - t
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if proc.returncode != 0 or not lines:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
            return runs, f"exit {proc.returncode}: " + " | ".join(tail)
        res = json.loads(lines[-1])
        if wall:
            res["wall_s"] = dt
        runs.append(res)
    return runs, None


def median_run(runs: list[dict], **extra) -> dict:
    """The run of median sampled edges/s, with every run's rate, the best rate and ``extra``."""
    rates = [r["sampled_edges_per_s"] for r in runs]
    med = sorted(runs, key=lambda r: r["sampled_edges_per_s"])[len(runs) // 2]
    med.update(available=True, sampled_edges_per_s_runs=rates, best_per_s=max(rates), **extra)
    return med


def run_peer(exe, script, save: Callable[[Path], None], fanouts, /, *, threads: int,
             batch_size: int, replace: bool, repeats: int,
             before_each: Callable[[], None] | None = None, options: tuple = (),
             wall: bool = False, **extra) -> dict:
    """``repeats`` runs of the DGL peer ``script`` by the Python ``exe`` on the graph that
    ``save(path)`` writes, with the options all peers share and ``options``: :func:`median_run`
    with ``extra``, or ``{"available": False, "error": ..., "command": ...}``."""
    with tempfile.TemporaryDirectory(prefix="mnmg-bench-") as tmp:
        path = Path(tmp) / "graph.npz"
        save(path)
        cmd = [str(exe), str(script), "--graph", str(path),
               "--fanouts", ",".join(str(f) for f in fanouts), "--batch-size", str(batch_size),
               "--threads", str(threads), *map(str, options)] + (["--replace"] if replace else [])
        runs, error = peer_runs(cmd, threads, repeats, before_each, wall)
    if error is not None:
        return {"available": False, "error": error, "command": cmd}
    return median_run(runs, **extra)
