"""The typed node-classification job end to end: configs/hetero.yaml's keys on a small generated
typed graph, ``mnmg-sampler train`` on 2 real ranks (pooled: the launch itself is
test_train_job's), learning well above chance; resumed from its checkpoint."""

from __future__ import annotations

import json

import pytest

from .cli_ranks import cli_ranks
from .torchrun import torchrun

SMALL = ["dataset.name=typed-sbm:600:4", "training.epochs=4", "model.hidden=32",
         "sampler.batch_size=64", "sampler.eval_fanouts=[5,5]", "output.checkpoint_every=2"]


def _records(outdir) -> list[dict]:
    return [json.loads(ln) for ln in (outdir / "metrics.jsonl").read_text().splitlines()]


def test_hetero_job_learns_on_two_ranks(tmp_path):
    out = tmp_path / "run"
    args = ["train", "--config", "configs/hetero.yaml", "--no-progress", *SMALL,
            f"output.dir={out}"]
    r, other = cli_ranks(args, timeout=300)
    assert r.returncode == other.returncode == 0, r.stderr[-4000:] + other.stderr[-4000:]
    finals = [x for x in _records(out) if x["event"] == "final"]
    assert len(finals) == 1
    final = finals[0]
    assert final["input_type"] == "paper" and final["world_size"] == 2
    assert final["test_acc"] > 0.6, final  # 4 planted classes: chance is 0.25
    lines = [ln for ln in r.stdout.splitlines() if "test accuracy" in ln]
    assert len(lines) == 1 and f"test accuracy {final['test_acc']:.4f}" in lines[0], r.stdout
    assert "test accuracy" not in other.stdout  # printed once, by rank 0
    epochs = [x for x in _records(out) if x["event"] == "epoch"]
    assert [e["epoch"] for e in epochs] == [0, 1, 2, 3]
    assert all(e["sampled_edges"] > 0 and "val_acc" in e for e in epochs)


def test_typed_job_splits_seeds_by_owner(tmp_path):
    out = tmp_path / "run"
    args = ["train", "--config", "configs/hetero.yaml", "--no-progress", *SMALL,
            "training.epochs=1", "sampler.split=owner", f"output.dir={out}"]
    r, other = cli_ranks(args, timeout=300)
    assert r.returncode == other.returncode == 0, r.stderr[-4000:] + other.stderr[-4000:]
    (final,) = [x for x in _records(out) if x["event"] == "final"]
    assert final["input_type"] == "paper" and final["world_size"] == 2
    (epoch,) = [x for x in _records(out) if x["event"] == "epoch"]
    assert epoch["sampled_edges"] > 0


@pytest.mark.slow  # the resume path is the homogeneous job's (test_train_job.py)
def test_hetero_job_resumes_from_its_checkpoint(tmp_path):
    out = tmp_path / "run"
    args = ["train", "--config", "configs/hetero.yaml", "--no-progress", *SMALL,
            "training.epochs=2", f"output.dir={out}"]
    r = torchrun(args, nproc=2, timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    # --resume with two more epochs continues from the last checkpoint (epoch 2), not epoch 0
    r = torchrun([*args, "training.epochs=4", "--resume"], nproc=2, timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    assert "resumed from" in r.stdout
    epochs = [x for x in _records(out) if x["event"] == "epoch"]
    assert [e["epoch"] for e in epochs] == [0, 1, 2, 3]


def test_bad_typed_key_fails_every_rank_with_one_line(tmp_path):
    # each rank's own exit is seen (as test_train_job.py's plain ranks show it): a typed
    # ConfigError before any collective, exit code 2
    runs = cli_ranks(["train", "--config", "configs/hetero.yaml",
                      "sampler.fanouts.paper__cite__paper=2,2", f"output.dir={tmp_path}"],
                     timeout=180)
    for rank, r in enumerate(runs):
        assert r.returncode == 2, r.stderr[-2000:]
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1, r.stderr
        assert lines[0].startswith(f"[rank{rank}] mnmg-sampler train: error: "
                                   "sampler.fanouts.paper__cite__paper: not a relation")
        assert "did you mean paper__cites__paper?" in lines[0]
