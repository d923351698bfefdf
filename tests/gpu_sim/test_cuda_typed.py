"""The typed CUDA kernel under Numba's CUDA simulator: bit-identical to the typed CPU kernel
(fresh interpreter with NUMBA_ENABLE_CUDASIM=1, as test_cuda_kernels.py explains)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("typed_worker.py")
ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 300


@pytest.fixture(scope="module")
def sim_results() -> dict:
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PYTHONPATH=str(ROOT))
    try:
        proc = subprocess.run([sys.executable, str(WORKER)], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"simulator worker timed out after {TIMEOUT_S}s; stderr:\n{exc.stderr}")
    if proc.returncode != 0:
        pytest.fail(f"simulator worker failed ({proc.returncode}); stderr:\n{proc.stderr}")
    return json.loads(proc.stdout)


CASES = [f"{g}/{f}/r{r}" for g in ("three_types", "weighted", "one_type")
         for f in ("f3", "all", "mixed") for r in (0, 1)] + [
    f"{g}/two_requests" for g in ("three_types", "weighted", "one_type")] + ["empty_call"]


@pytest.mark.parametrize("case", CASES)
def test_typed_cuda_equals_cpu(sim_results, case):
    res = sim_results[case]
    assert res["equal"], f"{case}: typed CUDA kernel output differs from the CPU kernel"
    if case != "empty_call":
        assert res["n_out"] > 0
    if case.startswith("three_types/f3"):
        assert res["relations"] == 5  # every relation sampled in the one call


def test_wrong_typed_kernel_is_caught(sim_results):
    assert sim_results["WRONG"]["equal"] is False
