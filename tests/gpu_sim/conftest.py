"""The simulator workers' results, made once for the test files that read them."""

from __future__ import annotations

import pytest

from .sim_run import run_workers


@pytest.fixture(scope="session")
def sim_runs(request) -> dict[str, dict]:
    """``{worker file name: its results}`` of every worker a collected test module names as its
    ``WORKER``, all run in one interpreter."""
    workers = {item.module.WORKER for item in request.session.items
               if getattr(item.module, "WORKER", None) is not None}
    return run_workers(sorted(workers))
