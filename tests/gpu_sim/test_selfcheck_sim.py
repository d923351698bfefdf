"""``mnmg-sampler selfcheck`` under Numba's CUDA simulator: every kernel line runs and passes, and
a deliberately wrong CUDA result (the test-only injection) fails its line and the exit code.

The simulator must be on before numba.cuda is first imported, so each run is a fresh
``python -m mnmg_sampler`` with ``NUMBA_ENABLE_CUDASIM=1`` and a hard timeout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mnmg_sampler.commands.selfcheck.result import FAIL, INJECT_ENV, PASS, SKIPPED

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 300
KERNELS = ("kernel.cpu.uniform", "kernel.cpu.weighted", "kernel.cpu.negative",
           "kernel.cuda.uniform", "kernel.cuda.weighted", "kernel.dedup")


def _selfcheck(tmp_path: Path, inject: str | None = None) -> tuple[int, dict, str]:
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PYTHONPATH=str(ROOT))
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", INJECT_ENV):
        env.pop(var, None)
    if inject:
        env[INJECT_ENV] = inject
    out = tmp_path / "report.json"
    try:
        proc = subprocess.run([sys.executable, "-m", "mnmg_sampler", "selfcheck", "--repeats",
                               "1", "--json", str(out)], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"selfcheck timed out after {TIMEOUT_S}s; stderr:\n{exc.stderr}")
    assert out.is_file(), proc.stderr
    checks = {c["name"]: c for c in json.loads(out.read_text())["checks"]}
    return proc.returncode, checks, proc.stdout


def test_every_kernel_line_runs_in_the_simulator_and_passes(tmp_path):
    rc, checks, table = _selfcheck(tmp_path)
    assert rc == 0, table
    for name in KERNELS:
        assert checks[name]["verdict"] == PASS, checks[name]
    for name in ("kernel.cuda.uniform", "kernel.cuda.weighted"):
        data = checks[name]["ranks"][0]["data"]
        assert data["device"] == "Numba's CUDA simulator" and data["cases"] >= 6
    # no device memory in the simulator: said so, not failed
    assert checks["memory.pool"]["verdict"] == SKIPPED
    assert "simulator" in checks["memory.pool"]["detail"]
    assert "Numba's simulator" in table


def test_a_wrong_cuda_kernel_fails_its_line_and_the_exit_code(tmp_path):
    rc, checks, table = _selfcheck(tmp_path, inject="kernel.cuda.uniform")
    assert rc == 1, table
    assert checks["kernel.cuda.uniform"]["verdict"] == FAIL
    assert "neighbors differs" in checks["kernel.cuda.uniform"]["detail"]
    assert checks["kernel.cuda.weighted"]["verdict"] == PASS  # only the injected line fails
    assert "verdict: fail" in table
