"""Run ``python -m mnmg_sampler ...`` under real torchrun processes with a hard timeout."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env() -> dict:
    e = dict(os.environ)
    e.update(OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    return e


def torchrun(args: list[str], nproc: int, timeout: float = 240, cwd=None, *,
             launcher_args: Sequence[str] = (), extra_env: dict | None = None
             ) -> subprocess.CompletedProcess:
    """One node, ``nproc`` ranks, c10d rendezvous on a free loopback port; ``launcher_args`` go
    to torchrun, ``extra_env`` into the ranks' environment."""
    cmd = [*TORCHRUN, "--nproc-per-node", str(nproc), "--rdzv-backend", "c10d",
           "--rdzv-endpoint", f"127.0.0.1:{free_port()}", *launcher_args, "-m", "mnmg_sampler",
           *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env={**env(), **(extra_env or {})}, cwd=cwd or REPO)


def metrics(outdir: Path) -> list[dict]:
    """The records of a job's ``metrics.jsonl`` in ``outdir``."""
    return [json.loads(ln) for ln in (outdir / "metrics.jsonl").read_text().splitlines()]


def torchrun_nodes(args: list[str], nnodes: int, timeout: float = 240, cwd=None,
                   script: list[str] | None = None) -> list[subprocess.CompletedProcess]:
    """``nnodes`` torchrun "nodes" on loopback, one process each (c10d rendezvous)."""
    port = free_port()
    procs = []
    for i in range(nnodes):
        cmd = script or [*TORCHRUN, "--nnodes", str(nnodes), "--node-rank", str(i),
                         "--nproc-per-node", "1", "--rdzv-backend", "c10d",
                         "--rdzv-endpoint", f"127.0.0.1:{port}", "-m", "mnmg_sampler"]
        e = env()
        e.update(NNODES=str(nnodes), NODE_RANK=str(i), MASTER_ADDR="127.0.0.1",
                 MASTER_PORT=str(port), NPROC="1")
        procs.append(subprocess.Popen([*cmd, *args], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, env=e, cwd=cwd or REPO))
    out = []
    try:
        for p in procs:
            so, se = p.communicate(timeout=timeout)
            out.append(subprocess.CompletedProcess(p.args, p.returncode, so, se))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return out
