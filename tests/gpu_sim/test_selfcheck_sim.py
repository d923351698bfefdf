"""``mnmg-sampler selfcheck`` under Numba's CUDA simulator: every kernel line runs and passes, and
a deliberately wrong CUDA result (the test-only injection) fails its line and the exit code.

The simulator must be on before numba.cuda is first imported, so the runs are in a fresh
interpreter with ``NUMBA_ENABLE_CUDASIM=1`` and a hard timeout.
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
           "kernel.cuda.uniform", "kernel.cuda.weighted", "kernel.dedup", "kernel.cpu.typed",
           "kernel.cuda.typed")


# Both runs in one interpreter (one torch import): the injection is read when a line runs.
RUNS = """
import json, os, sys
from mnmg_sampler.commands.cli import _main
from mnmg_sampler.commands.selfcheck.result import INJECT_ENV
out, codes = sys.argv[1], []
for name, inject in (("clean", None), ("injected", "kernel.cuda.uniform,kernel.cuda.typed")):
    if inject:
        os.environ[INJECT_ENV] = inject
    codes.append(_main(["selfcheck", "--repeats", "1", "--json", f"{out}/{name}.json"]))
print(json.dumps(codes))
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """``{"clean": (exit code, lines by name), "injected": ...}`` of two simulator runs."""
    out = tmp_path_factory.mktemp("selfcheck")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PYTHONPATH=str(ROOT))
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", INJECT_ENV):
        env.pop(var, None)
    try:
        proc = subprocess.run([sys.executable, "-c", RUNS, str(out)], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"selfcheck timed out after {TIMEOUT_S}s; stderr:\n{exc.stderr}")
    assert proc.returncode == 0, proc.stderr
    codes = json.loads(proc.stdout.strip().splitlines()[-1])
    res = {}
    for name, code in zip(("clean", "injected"), codes, strict=True):
        checks = json.loads((out / f"{name}.json").read_text())["checks"]
        res[name] = (code, {c["name"]: c for c in checks})
    res["table"] = proc.stdout
    return res


def test_every_kernel_line_runs_in_the_simulator_and_passes(runs):
    rc, checks = runs["clean"]
    assert rc == 0, runs["table"]
    for name in KERNELS:
        assert checks[name]["verdict"] == PASS, checks[name]
    for name in ("kernel.cuda.uniform", "kernel.cuda.weighted"):
        data = checks[name]["ranks"][0]["data"]
        assert data["device"] == "Numba's CUDA simulator" and data["cases"] >= 6
    # no device memory in the simulator: said so, not failed
    assert checks["memory.pool"]["verdict"] == SKIPPED
    assert "simulator" in checks["memory.pool"]["detail"]
    assert "Numba's simulator" in runs["table"]


def test_a_wrong_cuda_kernel_fails_its_line_and_the_exit_code(runs):
    rc, checks = runs["injected"]
    assert rc == 1
    assert checks["kernel.cuda.uniform"]["verdict"] == FAIL
    assert "neighbors differs" in checks["kernel.cuda.uniform"]["detail"]
    assert checks["kernel.cuda.typed"]["verdict"] == FAIL
    assert "neighbors differs" in checks["kernel.cuda.typed"]["detail"]
    for name in ("kernel.cuda.weighted", "kernel.cpu.typed"):  # only the injected lines fail
        assert checks[name]["verdict"] == PASS, checks[name]
    assert "verdict: fail" in runs["table"]
