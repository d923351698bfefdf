"""Fixtures several distributed test modules share: one expensive run each, made once."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def quickstart_run(tmp_path_factory):
    """``(output dir, partition dir)`` of one uninterrupted 2-rank quickstart job under torchrun
    (``test_train_job.QUICK``: 3 epochs, a checkpoint each, the newest two kept). Read only:
    a test that changes its files copies them first."""
    from .test_train_job import _train

    d = tmp_path_factory.mktemp("quickstart")
    r, out = _train(d, "full")
    assert r.returncode == 0, r.stderr[-3000:]
    return out, d / "parts"
