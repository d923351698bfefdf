"""`train --resume` on 2 real ranks (pooled; torchrun's own restart is test_train_job's): a
damaged newest checkpoint falls back to the previous one, another model size is a typed error
on every rank, foreign files in the checkpoint directory are never read or pruned."""

from __future__ import annotations

import json
import os
import shutil

import torch

from .test_train_job import _train_ranks


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
        return _train_ranks(tmp_path, "run", extra=list(extra), parts=parts)[0]

    def errors(runs, text: str) -> None:
        """Every rank exits 2 with the typed error's line, no traceback."""
        for r in runs:
            assert r.returncode == 2, r.stderr[-3000:]
            lines = [ln for ln in r.stderr.splitlines() if "mnmg-sampler train: error:" in ln]
            assert len(lines) == 1 and text in lines[0], r.stderr[-3000:]
            assert "mnmg_sampler/" not in r.stderr  # typed errors, no traceback

    bigger = train("training.epochs=3", "model.hidden=16", "--resume")
    errors(bigger, "written for another model")
    assert all("model.hidden" in r.stderr for r in bigger)

    # a crafted newest checkpoint: refused on every rank, no fallback, its payload never runs
    marker = tmp_path / "payload-ran"
    evil = ck / "checkpoint-epoch00009.pt"
    torch.save({"model": Payload(marker), "epoch": 9}, evil)
    crafted = train("training.epochs=3", "--resume")
    assert not marker.exists()
    errors(crafted, "other than tensors and plain types")
    evil.unlink()

    resumed = train("training.epochs=3", "--resume")
    for r in resumed:
        assert r.returncode == 0, r.stderr[-3000:]
    text = resumed[0].stdout + resumed[0].stderr
    assert "checkpoint-epoch00002.pt is damaged" in text
    assert "resumed from" in text and "checkpoint-epoch00001.pt" in text
    recs = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines()]
    # epochs 0-2 of the first run, then 2 again (from the epoch-1 checkpoint)
    assert [r["epoch"] for r in recs if r["event"] == "epoch"] == [0, 1, 2, 2]
    assert sorted(p.name for p in ck.iterdir()) == [
        "checkpoint-epoch-notes.pt", "checkpoint-epoch00001.pt", "checkpoint-epoch00002.pt"]
    assert (ck / "checkpoint-epoch-notes.pt").read_text() == "the user's own file"
