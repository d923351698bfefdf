"""CUDA kernels under Numba's CUDA simulator: bit-identical to the CPU kernels.

The simulator must be switched on before numba.cuda is first imported, and the test suite runs
in one pytest process where other tests import numba.cuda normally; so the comparison runs in a
fresh interpreter (``sim_worker.py``) with ``NUMBA_ENABLE_CUDASIM=1`` and a hard timeout, and
reports per-case results as JSON.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .sim_run import ON_DEVICE

WORKER = Path(__file__).with_name("sim_worker.py")


@pytest.fixture(scope="module")
def sim_results(sim_runs) -> dict:
    return sim_runs[WORKER.name]


def test_worker_really_used_the_simulator(sim_results):
    meta = sim_results["_meta"]
    if ON_DEVICE:  # launch/gpu_check.sh on a GPU machine: the real device, not the simulator
        assert meta["simulator"] is False and meta["kernel_type"] != "FakeCUDAKernel"
        return
    assert meta["simulator"] is True
    assert meta["kernel_type"] == "FakeCUDAKernel"
    assert meta["numba_cuda_module"].startswith("numba.cuda.simulator")


GRAPHS = ("random", "power_law", "degree0", "wide")
CASES = [f"{g}/f{f}/r{r}" for g in GRAPHS for f in (1, 3, 10, -1) for r in (0, 1)] + [
    f"{g}/{c}" for g in GRAPHS
    for c in ("mixed", "remapped_no_eids", "no_edge_ids", "repeated_rows")
] + ["empty_call"]


@pytest.mark.parametrize("case", CASES)
def test_cuda_equals_cpu(sim_results, case):
    res = sim_results[case]
    assert res["equal"], f"{case}: CUDA kernel output differs from the CPU kernel"
    if case != "empty_call":
        assert res["n_out"] > 0  # the case sampled something: the comparison is not vacuous


WEIGHTED_CASES = [f"W/{g}/f{f}/r{r}" for g in GRAPHS for f in (1, 3, 10, -1) for r in (0, 1)] + [
    f"W/{g}/{c}" for g in GRAPHS
    for c in ("mixed", "remapped_no_eids", "no_edge_ids", "skewed", "unvalidated")
] + ["W/empty_call"]


@pytest.mark.parametrize("case", WEIGHTED_CASES)
def test_weighted_cuda_equals_cpu(sim_results, case):
    res = sim_results[case]
    assert res["equal"], f"{case}: weighted CUDA kernel output differs from the CPU kernel"
    if case != "W/empty_call":
        assert res["n_out"] > 0


def test_wrong_weighted_kernel_variant_is_caught(sim_results):
    assert sim_results["WRONG_W/r0"]["equal"] is False
    assert sim_results["WRONG_W/r1"]["equal"] is False


def test_graphs_cover_degree_zero_nodes(sim_results):
    assert sim_results["degree0/f3/r0"]["n_zero_deg"] > 0
    assert sim_results["power_law/f3/r0"]["n_zero_deg"] > 0


def test_wrong_kernel_variant_is_caught(sim_results):
    # An off-by-one RNG slot in the device function must make the same comparison fail.
    assert sim_results["WRONG/r0"]["equal"] is False
    assert sim_results["WRONG/r1"]["equal"] is False
