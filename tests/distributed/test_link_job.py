"""The link-prediction job (``task: link``) on 2 real ranks: it learns, and ``--resume`` after a
kill under torchrun continues to the same metrics as an uninterrupted run (the runs that are
not killed are on pooled ranks: the launch is not their point)."""

from __future__ import annotations

import json
import os

from .cli_ranks import cli_ranks
from .torchrun import torchrun

QUICK = ["training.epochs=3", "training.eval_every=1", "output.checkpoint_every=1",
         "model.hidden=32", "sampler.batch_size=512", "sampler.fanouts=[5,5]",
         "link.eval_negatives=10", "sampler.eval_batch_size=1024"]


def _records(outdir, event: str) -> list[dict]:
    recs = [json.loads(ln) for ln in (outdir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in recs if r["event"] == event]


def _args(tmp, name, extra=()) -> list[str]:
    return ["train", "--config", "configs/cora_link.yaml", "--no-progress", *QUICK,
            f"output.dir={tmp / name}", f"partition.dir={tmp / 'parts'}", *extra]


def _killed(tmp, name, fault):
    """The job under torchrun, rank 0 killed after epoch ``fault``."""
    return torchrun(_args(tmp, name), 2, 400,
                    extra_env={"MNMG_FAULT_AFTER_EPOCH": str(fault)}), tmp / name


def _train(tmp, name, extra=()):
    """The job on 2 pooled ranks: rank 0's run (both checked to succeed), the output dir."""
    runs = cli_ranks(_args(tmp, name, extra), timeout=400)
    for r in runs:
        assert r.returncode == 0, r.stderr[-3000:]
    return runs[0], tmp / name


def test_link_job_resume_after_kill_equals_uninterrupted(tmp_path):
    full, full_out = _train(tmp_path, "full")
    (want,) = _records(full_out, "final")
    assert want["test_auc"] > 0.75 and 0 < want["test_mrr"] <= 1  # it learned something
    assert "test AUC" in full.stdout + full.stderr

    crashed, out = _killed(tmp_path, "resumed", fault=0)
    assert crashed.returncode != 0
    assert sorted(os.listdir(out / "checkpoints")) == ["checkpoint-epoch00000.pt"]
    assert not _records(out, "final")

    resumed, out = _train(tmp_path, "resumed", extra=["--resume"])
    assert "resumed from" in resumed.stdout + resumed.stderr
    (got,) = _records(out, "final")
    for k in ("test_auc", "test_mrr", "test_hits", "test_loss", "val_auc", "val_mrr"):
        assert got[k] == want[k], (k, got[k], want[k])
    ep = _records(out, "epoch")
    assert [r["epoch"] for r in ep] == [0, 1, 2]
    assert [r["train_loss"] for r in ep] == [r["train_loss"] for r in _records(full_out,
                                                                                "epoch")]


def test_link_job_with_edge_weights(tmp_path):
    """sampler.weights on the link job: the training graph's partitions carry weights mapped
    from Cora's adjacency values, and the job trains on them."""
    _, out = _train(tmp_path, "weighted", extra=["sampler.weights=adj_data", "training.epochs=1"])
    manifest = json.loads((tmp_path / "parts" / "manifest.json").read_text())
    assert manifest["has_weights"] and manifest["source"]["load"]["weights"] == "adj_data"
    assert manifest["source"]["load"]["task"] == "link"
    (final,) = _records(out, "final")
    assert 0.5 < final["test_auc"] <= 1
