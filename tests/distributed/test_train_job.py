"""The YAML training job end to end under torchrun: config errors on every rank, resume after a
crash (by hand and by torchrun restart) equals an uninterrupted run, two loopback nodes."""

from __future__ import annotations

import os
import subprocess

import pytest

from .cli_ranks import cli_ranks
from .torchrun import REPO, env, free_port, metrics, torchrun

QUICK = ["training.epochs=3", "training.eval_every=1", "output.checkpoint_every=1",
         "model.hidden=32", "sampler.batch_size=256", "sampler.fanouts=[5,5]"]


def _final(outdir) -> dict:
    recs = metrics(outdir)
    finals = [r for r in recs if r["event"] == "final"]
    assert len(finals) == 1, recs
    return finals[0]


def _epochs(outdir) -> list[dict]:
    return [r for r in metrics(outdir) if r["event"] == "epoch"]


def _args(tmp, name, extra=(), parts=None) -> list[str]:
    """``train`` of the quickstart job with ``QUICK``, output in ``tmp/name``, partitions in
    ``parts`` (default ``tmp/parts``)."""
    return ["train", "--config", "configs/quickstart.yaml", "--no-progress", *QUICK,
            f"output.dir={tmp / name}", f"partition.dir={parts or tmp / 'parts'}", *extra]


def _train(tmp, name, extra=(), nproc=2, fault=None, torchrun_args=(), timeout=300, parts=None):
    """``_args``'s job under torchrun (``fault``: the epoch after which rank 0 is killed)."""
    fault_env = None if fault is None else {"MNMG_FAULT_AFTER_EPOCH": str(fault)}
    r = torchrun(_args(tmp, name, extra, parts), nproc, timeout, launcher_args=torchrun_args,
                 extra_env=fault_env)
    return r, tmp / name


def _train_ranks(tmp, name, extra=(), timeout=300, parts=None):
    """``_args``'s job on 2 pooled ranks (a job whose launch is not the point): each rank's
    :class:`RankRun` and the output directory."""
    return cli_ranks(_args(tmp, name, extra, parts), timeout=timeout), tmp / name


# a config error (parsed before any collective) and a dataset error (found when loading);
# the other messages are the same path as the first, each checked in tests/unit/test_config.py
# and sampler.batch_size=-3 under torchrun below
@pytest.mark.parametrize("override, key, text", [
    ("sampler.batch_sise=3", "sampler.batch_sise", "did you mean sampler.batch_size?"),
    pytest.param("sampler.batch_size=abc", "sampler.batch_size", "integer",
                 marks=pytest.mark.slow),
    pytest.param("sampler.batch_size=-3", "sampler.batch_size", "positive",
                 marks=pytest.mark.slow),
    ("dataset.name=/nonexistent/graph.txt", "dataset.name", "not found"),
])
def test_config_errors_every_rank_exit_2(tmp_path, override, key, text):
    # Each rank's own exit is seen (torchrun's agent would stop the slower rank as soon as the
    # first one exits, hiding whether it failed cleanly too; the launch is checked below)
    runs = cli_ranks(["train", "--config", "configs/quickstart.yaml", override,
                      f"output.dir={tmp_path}"], timeout=120)
    for rank, r in enumerate(runs):
        assert r.returncode == 2, r.stderr[-2000:]
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1, r.stderr  # one clear line, no traceback
        assert lines[0].startswith(f"[rank{rank}] mnmg-sampler train: error: {key}")
        assert text in lines[0]


# slow: under torchrun, a config error's exit code 2 and no traceback are CI's
# test_launch_errors.test_run_sh_user_error_is_one_line_and_exit_2 (this override, torchrun's
# agent under our launcher) and test_offline_sample.test_world_size_mismatch_exits_2_on_every_rank
# (plain torchrun's summary); every rank's line is test_config_errors_every_rank_exit_2
@pytest.mark.slow
def test_config_error_under_torchrun_exit_2(tmp_path):
    r = torchrun(["train", "--config", "configs/quickstart.yaml", "sampler.batch_size=-3",
                  f"output.dir={tmp_path}"], nproc=2, timeout=120)
    lines = [ln for ln in r.stderr.splitlines() if "mnmg-sampler train: error:" in ln]
    assert lines and all("sampler.batch_size" in ln for ln in lines), r.stderr[-3000:]
    assert "exitcode  : 2" in r.stderr
    assert "mnmg_sampler/" not in r.stderr  # no traceback from our code


def test_missing_config_file_exit_2(tmp_path):
    (r,) = cli_ranks(["train", "--config", str(tmp_path / "nope.yaml")], world=1, timeout=120)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "nope.yaml" in lines[0], r.stderr


def test_resume_after_crash_equals_uninterrupted(tmp_path, quickstart_run):
    full_out, parts = quickstart_run  # the uninterrupted run, on the same partitions
    want = _final(full_out)
    assert want["test_acc"] > 0.5

    crashed, out = _train(tmp_path, "resumed", fault=0, parts=parts)
    assert crashed.returncode != 0
    ckpts = sorted(os.listdir(out / "checkpoints"))
    assert ckpts == ["checkpoint-epoch00000.pt"], ckpts
    assert not (out / "metrics.jsonl").read_text().count('"final"')

    # resumed by hand: a new `train --resume` (on pooled ranks; torchrun's own restart is the
    # next test)
    runs, out = _train_ranks(tmp_path, "resumed", extra=["--resume"], parts=parts)
    for resumed in runs:
        assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in runs[0].stdout + runs[0].stderr
    got = _final(out)
    for k in ("test_acc", "test_loss", "val_acc"):
        assert got[k] == want[k], (k, got[k], want[k])
    # epoch 0 ran once before the crash, epochs 1-2 after: every epoch exactly once, same loss
    ep = _epochs(out)
    assert [r["epoch"] for r in ep] == [0, 1, 2]
    assert [r["train_loss"] for r in ep] == [r["train_loss"] for r in _epochs(full_out)]


def test_torchrun_restart_resumes_by_itself(tmp_path, quickstart_run):
    full_out, parts = quickstart_run
    r, out = _train(tmp_path, "restarted", fault=1, torchrun_args=["--max-restarts", "1"],
                    parts=parts)
    assert r.returncode == 0, r.stderr[-3000:]
    assert [e["epoch"] for e in _epochs(out)] == [0, 1, 2]
    assert _final(out)["test_acc"] == _final(full_out)["test_acc"]


def test_multinode_script_two_loopback_nodes(tmp_path):
    port = free_port()
    procs = []
    for node in range(2):
        e = env()
        e.update(NNODES="2", NODE_RANK=str(node), MASTER_ADDR="127.0.0.1",
                 MASTER_PORT=str(port), NPROC="1", CONFIG="configs/quickstart.yaml",
                 RDZV_TIMEOUT="120")
        procs.append(subprocess.Popen(
            ["bash", "launch/multinode.sh", "--no-progress", "training.epochs=2",
             "model.hidden=32", f"output.dir={tmp_path / 'mn'}"],
            cwd=REPO, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=300)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert all(p.returncode == 0 for p in procs), "\n".join(o[-2000:] for o in outs)
    assert sum("test accuracy" in o for o in outs) == 1  # printed once, by global rank 0
    assert _final(tmp_path / "mn")["world_size"] == 2


@pytest.mark.parametrize("metric, value", [("val_loss", "100"), ("val_acc", "0.01")])
def test_early_stop_on_target_metric(tmp_path, metric, value):
    # a target every first epoch reaches: both ranks stop after it of the 3 epochs asked for
    # (the node job ignored val_loss before)
    runs, out = _train_ranks(tmp_path, metric, [f"training.target_metric={metric}",
                                                f"training.target_value={value}"])
    for r in runs:
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert [e["epoch"] for e in _epochs(out)] == [0]
