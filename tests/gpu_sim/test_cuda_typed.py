"""The typed CUDA kernel under Numba's CUDA simulator: bit-identical to the typed CPU kernel
(the worker runs in a fresh interpreter, see ``sim_run.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("typed_worker.py")


@pytest.fixture(scope="module")
def sim_results(sim_runs) -> dict:
    return sim_runs[WORKER.name]


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
