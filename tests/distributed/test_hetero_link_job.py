"""The typed link-prediction job end to end: configs/hetero_link.yaml's keys on a small generated
user-item graph, ``mnmg-sampler train`` on 2 real ranks (pooled; the launch itself is
test_train_job's), ranking held-out edges well above chance."""

from __future__ import annotations

import pytest

from .cli_ranks import train_job
from .torchrun import metrics, torchrun

SMALL = ["dataset.name=typed-useritem:600:200", "training.epochs=4", "model.hidden=32",
         "sampler.batch_size=128", "training.eval_every=2"]


def test_hetero_link_job_learns_on_two_ranks(tmp_path):
    r, records = train_job("configs/hetero_link.yaml", SMALL, tmp_path)
    finals = [x for x in records if x["event"] == "final"]
    assert len(finals) == 1
    final = finals[0]
    assert final["task"] == "link" and final["edge_type"] == ["user", "rates", "item"]
    assert final["world_size"] == 2
    # chance: AUC 0.5, MRR of one positive among 50 random negatives about 0.09
    assert final["test_auc"] > 0.7 and final["val_auc"] > 0.7, final
    assert final["test_mrr"] > 0.15, final
    lines = [ln for ln in r.stdout.splitlines() if "test AUC" in ln]
    assert len(lines) == 1 and f"test AUC {final['test_auc']:.4f}" in lines[0], r.stdout
    epochs = [x for x in records if x["event"] == "epoch"]
    assert [e["epoch"] for e in epochs] == [0, 1, 2, 3]
    assert all(e["sampled_edges"] > 0 for e in epochs)
    assert [e["epoch"] for e in epochs if "val_auc" in e] == [1, 3]


def _final(outdir) -> dict:
    return [x for x in metrics(outdir) if x["event"] == "final"][-1]


@pytest.mark.slow  # three 2-rank runs; the resume path is the homogeneous job's
def test_hetero_link_job_resumes_to_the_same_metrics(tmp_path):
    parts = f"partition.dir={tmp_path / 'parts'}"
    base = ["train", "--config", "configs/hetero_link.yaml", "--no-progress", *SMALL, parts,
            "output.checkpoint_every=2"]
    whole = tmp_path / "whole"
    r = torchrun([*base, f"output.dir={whole}"], nproc=2, timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    cut = tmp_path / "cut"
    r = torchrun([*base, f"output.dir={cut}", "training.epochs=2"], nproc=2, timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    r = torchrun([*base, f"output.dir={cut}", "--resume"], nproc=2, timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    assert "resumed from" in r.stdout
    a, b = _final(whole), _final(cut)
    assert [a[k] for k in ("test_auc", "test_mrr", "val_auc")] == \
        [b[k] for k in ("test_auc", "test_mrr", "val_auc")]
