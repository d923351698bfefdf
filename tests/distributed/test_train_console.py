"""The training job's console and metrics on real ranks: launch/run.sh (torchrun) prints each
rank-0 line once with a single ``[rank0]:`` prefix; ``training.log_every`` and
``training.max_steps_per_epoch`` work in train and sample mode (sample mode on pooled ranks),
and both write metrics.jsonl."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from .cli_ranks import cli_ranks
from .torchrun import REPO, env

SMALL = ["model.hidden=16", "sampler.batch_size=64", "sampler.fanouts=[4,4]",
         "output.checkpoint_every=0"]


def _records(out_dir) -> list[dict]:
    return [json.loads(ln) for ln in (out_dir / "metrics.jsonl").read_text().splitlines()]


def test_run_sh_console_one_prefix_epoch_and_step_lines(tmp_path):
    e = env()
    e["TORCHRUN"] = f"{sys.executable} -m torch.distributed.run"
    out = tmp_path / "run"
    r = subprocess.run(
        ["bash", "launch/run.sh", "training.epochs=2", "training.eval_every=1",
         "training.max_steps_per_epoch=3", "training.log_every=2", *SMALL,
         f"output.dir={out}", f"partition.dir={tmp_path / 'parts'}"],
        cwd=REPO, env=e, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    assert lines and all(ln.startswith("[rank0]:") for ln in lines), r.stdout
    both = r.stdout + r.stderr
    assert "[rank0]:[rank0]" not in both and "[rank1]" not in both  # LOG_RANK=0, one prefix
    body = [ln.removeprefix("[rank0]:") for ln in lines]
    epochs = [ln for ln in body if re.match(r"epoch \d/2  loss ", ln)]
    steps = [ln for ln in body if re.match(r"epoch \d/2  step 2/3  loss ", ln)]
    assert len(epochs) == 2 and len(steps) == 2, body
    assert all(re.search(r"val_acc 0\.\d{4}  [\d.]+ batches/s  [\d.]+k? edges/s  [\d.]+s$", ln)
               for ln in epochs), epochs
    assert re.match(r"val accuracy 0\.\d{4}  test accuracy 0\.\d{4}  \(2 rank\(s\), [\d.]+s\)$",
                    body[-1]), body  # the last line, as the README shows it
    assert "%|" not in both  # no tqdm bar: stderr is not a terminal
    # jobs use the shared topology where they can: both ranks run here, so they share the topology
    svc = [ln for ln in body if ln.startswith("sampling service (rank 0)")]
    assert len(svc) == 1 and "shared topology (host sockets agreement)" in svc[0], body
    recs = _records(out)
    ep = [x for x in recs if x["event"] == "epoch"]
    assert [x["batches"] for x in ep] == [6, 6]  # 3 steps x 2 ranks
    assert all(x["sampled_edges"] > 0 and x["edges_per_s"] > 0 for x in ep)
    assert [x["step"] for x in recs if x["event"] == "step"] == [2, 2]
    assert [x["event"] for x in recs].count("final") == 1


def test_sample_mode_caps_steps_and_writes_metrics(tmp_path):
    out = tmp_path / "run"
    r, other = cli_ranks(["train", "--config", "configs/quickstart.yaml", "training.mode=sample",
                          "training.epochs=2", "training.max_steps_per_epoch=2",
                          "training.log_every=1", *SMALL, f"output.dir={out}",
                          f"partition.dir={tmp_path / 'parts'}"], timeout=300)
    assert r.returncode == other.returncode == 0, r.stderr[-3000:] + other.stderr[-3000:]
    assert not other.stdout  # rank 0 prints
    recs = _records(out)
    assert recs[0]["event"] == "start" and recs[0]["mode"] == "sample"
    ep = [x for x in recs if x["event"] == "epoch"]
    assert [x["batches"] for x in ep] == [4, 4]  # 2 steps x 2 ranks, not the whole epoch
    assert [(x["epoch"], x["step"]) for x in recs if x["event"] == "step"] == [(0, 1), (1, 1)]
    (final,) = [x for x in recs if x["event"] == "final"]
    assert final["batches"] == 8 and final["sampled_edges"] == sum(x["sampled_edges"] for x in ep)
    assert any(x["event"] == "service" and x["requests"] > 0 for x in recs)
    lines = r.stdout.splitlines()
    assert sum(bool(re.match(r"epoch \d/2  4 batches ", ln)) for ln in lines) == 2, r.stdout
    assert lines[-1].startswith("sampled 8 batches, ") and "on 2 rank(s)" in lines[-1]
