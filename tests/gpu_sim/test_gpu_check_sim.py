"""``launch/gpu_check.sh --simulate``: the GPU machine's one prepared run, at tiny sizes under
Numba's CUDA simulator, gives the report of a GPU run (same keys, statuses), and a step that
fails or hangs is recorded while the others still run.

The selfcheck step is made to fail on purpose (``MNMG_GPU_CHECK_INJECT``): selfcheck under the
simulator is ``test_selfcheck_sim.py``'s, and the failure is what this test needs to show.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mnmg_sampler.commands.selfcheck import gpu_check
from mnmg_sampler.commands.selfcheck.gpu_check import (
    CLAIMS,
    NOT_COVERED,
    REPORT_KEYS,
    STATUSES,
    STEP_KEYS,
)
from mnmg_sampler.commands.selfcheck.gpu_steps import INJECT_ENV

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_check")
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                        "MASTER_PORT", "NUMBA_ENABLE_CUDASIM")}
    env[INJECT_ENV] = "selfcheck"
    env.setdefault("PY", sys.executable)  # this interpreter, in a checkout without .venv too
    proc = subprocess.run(["bash", "launch/gpu_check.sh", "--out", str(out), "--simulate"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    return proc, json.loads((out / "gpu_check.json").read_text()), out


def test_report_shape(run):
    proc, r, out = run
    assert tuple(r) == REPORT_KEYS
    assert r["mode"] == "simulate" and r["format"] == gpu_check.FORMAT_NAME
    assert list(r["steps"]) == [name for name, _ in gpu_check.STEPS]
    for name, step in r["steps"].items():
        assert tuple(step) == STEP_KEYS, name
        assert step["status"] in STATUSES, name
    assert r["versions"]["torch"] and r["versions"]["numba"]
    assert r["never_run_on_gpu"] == list(CLAIMS) + list(NOT_COVERED)  # no GPU: nothing shown
    md = (out / "gpu_check.md").read_text()
    assert "| selfcheck | fail |" in md and "## Never run on a GPU" in md


def test_a_failed_step_is_recorded_and_the_others_still_run(run):
    proc, r, _ = run
    assert proc.returncode == 1, proc.stdout + proc.stderr
    sc = r["steps"]["selfcheck"]
    assert sc["status"] == "fail" and "injected failure" in sc["error"]
    for name in ("versions", "gpu_tests", "bench", "train"):
        assert r["steps"][name]["status"] == "pass", r["steps"][name]
    bench = r["steps"]["bench"]
    assert all(o["equal_to_cpu"] for o in bench["figures"]["one_hop"].values())
    assert bench["figures"]["multi_hop"]["equal_to_cpu"] is True  # the CUDA hop, simulated
    assert "no CUDA device" in bench["skipped_parts"]["one_hop_rates"]
    (host,) = r["steps"]["train"]["figures"]["placements"].values()
    assert host["features_equal"] and host["steps"] > 0
    assert "nccl" in r["steps"]["train"]["skipped_parts"]


def test_a_hung_step_is_stopped_at_its_limit(tmp_path, monkeypatch):
    monkeypatch.setenv(INJECT_ENV, "versions:hang")
    (tmp_path / "steps").mkdir()
    rec = gpu_check._step("versions", tmp_path, True, 2)
    assert rec["status"] == "timeout" and "stopped after 2s" in rec["error"]
    assert rec["seconds"] < 15


def test_claims_leave_the_list_when_their_steps_pass_on_a_gpu():
    steps = {name: {"status": "pass"} for name, _ in gpu_check.STEPS}
    assert gpu_check.never_run(steps, simulate=False) == list(NOT_COVERED)
    steps["train"]["status"] = "timeout"
    left = gpu_check.never_run(steps, simulate=False)
    assert left[:-len(NOT_COVERED)] == [c for c, need in CLAIMS.items() if "train" in need]
