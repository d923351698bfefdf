"""``mnmg-sampler selfcheck`` under Numba's CUDA simulator: every kernel line runs and passes, and
a deliberately wrong CUDA result (the test-only injection) fails its line and the exit code.

The simulator must be on before numba.cuda is first imported, so the runs are in a fresh
interpreter with ``NUMBA_ENABLE_CUDASIM=1`` and a hard timeout.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mnmg_sampler.commands.selfcheck.result import FAIL, PASS, SKIPPED

from .sim_run import ON_DEVICE

# selfcheck on a GPU is launch/gpu_check.sh's selfcheck step; this file describes the simulator
pytestmark = pytest.mark.skipif(ON_DEVICE, reason="describes selfcheck under the simulator")
# both runs in one interpreter (one torch import), the other simulator workers' (conftest.py)
WORKER = None if ON_DEVICE else Path(__file__).with_name("selfcheck_worker.py")
KERNELS = ("kernel.cpu.uniform", "kernel.cpu.weighted", "kernel.cpu.negative",
           "kernel.cuda.uniform", "kernel.cuda.weighted", "kernel.cpu.typed",
           "kernel.cuda.typed")


@pytest.fixture(scope="module")
def runs(sim_runs) -> dict:
    """``{"clean": (exit code, lines by name), "injected": ..., "table": what they printed}``
    of the two simulator runs."""
    got = sim_runs[WORKER.name]
    res = {name: (got[name][0], {c["name"]: c for c in got[name][1]})
           for name in ("clean", "injected")}
    res["table"] = got["table"]
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
