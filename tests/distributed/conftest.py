"""Fixtures several distributed test modules share: one expensive run each, made once."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def quickstart_run(tmp_path_factory):
    """``(output dir, partition dir)`` of one uninterrupted 2-rank quickstart job
    (``test_train_job.QUICK``: 3 epochs, a checkpoint each, the newest two kept) on pooled ranks;
    the tests that use it run their crashed, restarted and resumed jobs under torchrun. Read
    only: a test that changes its files copies them first."""
    from .test_train_job import _train_ranks

    d = tmp_path_factory.mktemp("quickstart")
    runs, out = _train_ranks(d, "full")
    for r in runs:
        assert r.returncode == 0, r.stderr[-3000:]
    return out, d / "parts"
