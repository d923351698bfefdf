"""Run simulator worker scripts in a fresh interpreter with ``NUMBA_ENABLE_CUDASIM=1``.

The simulator must be on before numba.cuda is first imported, and the test suite runs in one
pytest process where other tests import numba.cuda normally; so the comparisons run in another
interpreter with a hard timeout, each worker reporting per-case results as JSON on stdout. The
workers of one pytest run share that interpreter (``conftest.py``): torch, numba and the
simulator load once, not once per worker.

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


# runs each worker as ``__main__`` in turn, its stdout captured: ``{path: its JSON}``
_DRIVER = """
import contextlib, io, json, runpy, sys
out = {}
for path in sys.argv[1:]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        runpy.run_path(path, run_name="__main__")
    out[path] = json.loads(buf.getvalue())
print(json.dumps(out))
"""


def run_workers(workers: list[Path]) -> dict[str, dict]:
    """The JSON each worker prints, by file name; the test fails with the interpreter's stderr
    if a worker fails or they time out."""
    env = worker_env()
    try:
        proc = subprocess.run([sys.executable, "-c", _DRIVER, *map(str, workers)], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"simulator worker timed out after {TIMEOUT_S}s; stderr:\n{exc.stderr}")
    if proc.returncode != 0:  # the exception first: warnings can fill the head of stderr
        last = ([ln for ln in proc.stderr.splitlines() if ln.strip()] or ["no stderr"])[-1]
        pytest.fail(f"simulator worker failed ({proc.returncode}): {last.strip()}; "
                    f"stderr:\n{proc.stderr}")
    return {Path(k).name: v for k, v in json.loads(proc.stdout).items()}
