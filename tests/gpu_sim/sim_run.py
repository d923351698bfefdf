"""Run a simulator worker script in a fresh interpreter with ``NUMBA_ENABLE_CUDASIM=1``.

The simulator must be on before numba.cuda is first imported, and the test suite runs in one
pytest process where other tests import numba.cuda normally; so each comparison runs in its own
interpreter with a hard timeout and reports per-case results as JSON on stdout.

On a GPU machine, ``MNMG_GPU_TESTS_ON_DEVICE=1`` (set by ``launch/gpu_check.sh``) runs the same
workers and tests on the CUDA device instead: the simulator stays off.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 300
#: the same tests on the CUDA device instead of the simulator (``launch/gpu_check.sh``)
ON_DEVICE = os.environ.get("MNMG_GPU_TESTS_ON_DEVICE") == "1"


def worker_env() -> dict:
    """A worker's environment: the simulator on, or off with :data:`ON_DEVICE`."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if ON_DEVICE:
        env.pop("NUMBA_ENABLE_CUDASIM", None)
    else:
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    return env


def run_worker(worker: Path) -> dict:
    """The JSON a worker prints; the test fails with its stderr if it fails or times out."""
    env = worker_env()
    try:
        proc = subprocess.run([sys.executable, str(worker)], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"simulator worker timed out after {TIMEOUT_S}s; stderr:\n{exc.stderr}")
    if proc.returncode != 0:  # the exception first: warnings can fill the head of stderr
        last = ([ln for ln in proc.stderr.splitlines() if ln.strip()] or ["no stderr"])[-1]
        pytest.fail(f"simulator worker failed ({proc.returncode}): {last.strip()}; "
                    f"stderr:\n{proc.stderr}")
    return json.loads(proc.stdout)
