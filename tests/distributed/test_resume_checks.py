"""`train --resume` under torchrun: a damaged newest checkpoint falls back to the previous one,
another model size is a typed error on every rank, foreign files in the checkpoint directory
are never read or pruned."""

from __future__ import annotations

import json
import os
import shutil

import torch

from .test_train_job import _train


class Payload:
    """Unpickling this would create ``marker``: what a crafted checkpoint would do."""

    def __init__(self, marker) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_resume_falls_back_checks_the_model_and_keeps_foreign_files(tmp_path, quickstart_run):
    # a copy of the shared uninterrupted 3-epoch run (the newest two checkpoints kept)
    done, parts = quickstart_run
    out = tmp_path / "run"
    shutil.copytree(done, out)
    ck = out / "checkpoints"
    assert sorted(p.name for p in ck.iterdir()) == ["checkpoint-epoch00001.pt",
                                                    "checkpoint-epoch00002.pt"]
    newest = ck / "checkpoint-epoch00002.pt"
    newest.write_bytes(newest.read_bytes()[:1000])  # a copy cut short
    (ck / "checkpoint-epoch-notes.pt").write_text("the user's own file")

    def train(*extra: str):
        return _train(tmp_path, "run", extra=list(extra), parts=parts)[0]

    bigger = train("training.epochs=3", "model.hidden=16", "--resume")
    assert bigger.returncode != 0
    errors = [ln for ln in bigger.stderr.splitlines() if "mnmg-sampler train: error:" in ln]
    # (torchrun stops the other worker once one has failed, so not every rank's line is
    # always in the log; every line there is the typed error, and every exit code is 2)
    assert errors, bigger.stderr[-3000:]
    assert all("written for another model" in ln and "model.hidden" in ln for ln in errors)
    assert "exitcode  : 2" in bigger.stderr and "exitcode  : 1" not in bigger.stderr
    assert "mnmg_sampler/" not in bigger.stderr  # typed errors, no traceback

    # a crafted newest checkpoint: refused on every rank, no fallback, its payload never runs
    marker = tmp_path / "payload-ran"
    evil = ck / "checkpoint-epoch00009.pt"
    torch.save({"model": Payload(marker), "epoch": 9}, evil)
    crafted = train("training.epochs=3", "--resume")
    assert crafted.returncode != 0 and not marker.exists()
    errors = [ln for ln in crafted.stderr.splitlines() if "mnmg-sampler train: error:" in ln]
    assert errors and all("other than tensors and plain types" in ln for ln in errors), \
        crafted.stderr[-3000:]
    evil.unlink()

    resumed = train("training.epochs=3", "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    text = resumed.stdout + resumed.stderr
    assert "checkpoint-epoch00002.pt is damaged" in text
    assert "resumed from" in text and "checkpoint-epoch00001.pt" in text
    recs = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines()]
    # epochs 0-2 of the first run, then 2 again (from the epoch-1 checkpoint)
    assert [r["epoch"] for r in recs if r["event"] == "epoch"] == [0, 1, 2, 2]
    assert sorted(p.name for p in ck.iterdir()) == [
        "checkpoint-epoch-notes.pt", "checkpoint-epoch00001.pt", "checkpoint-epoch00002.pt"]
    assert (ck / "checkpoint-epoch-notes.pt").read_text() == "the user's own file"
