"""The temporal CUDA kernel under Numba's CUDA simulator: bit-identical to the temporal CPU kernel
(the worker runs in a fresh interpreter, see ``sim_run.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("temporal_worker.py")


@pytest.fixture(scope="module")
def sim_results(sim_runs) -> dict:
    return sim_runs[WORKER.name]


CASES = [f"{g}/{f}/r{r}/last{last}" for g in ("edge", "node", "weighted")
         for f in ("f2", "all") for r in (0, 1) for last in (0, 1)]


@pytest.mark.parametrize("case", CASES)
def test_temporal_cuda_equals_cpu(sim_results, case):
    res = sim_results[case]
    assert res["equal"], f"{case}: temporal CUDA kernel output differs from the CPU kernel"
    assert res["n_out"] > 0
