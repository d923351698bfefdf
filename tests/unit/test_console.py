"""What a person sees: plain --help, --version, --json, rank prefixes, a closed pipe, the epoch
and step lines and metrics records of a run, and ``mnmg-sampler plot``."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mnmg_sampler import __version__
from mnmg_sampler.commands.cli import EXIT_BROKEN_PIPE, build_parser, main
from mnmg_sampler.system.console import plain, rank_prefix
from mnmg_sampler.train.report import RunReport, epoch_record

REPO = Path(__file__).resolve().parents[2]
MARKUP = re.compile(r"``|:(?:class|func|meth|mod|attr|data|exc):`|(?<![\w`])`[^`\s][^`]*`")


def _cli(*args: str, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "mnmg_sampler", *args], capture_output=True,
                          text=True, timeout=120, cwd=REPO, env=env, **kw)


def _helps(parser: argparse.ArgumentParser, name: str = "mnmg-sampler"):
    yield name, parser.format_help()
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for sub, child in a.choices.items():
                yield from _helps(child, f"{name} {sub}")


def test_plain_strips_rest_and_markdown_markup():
    text = ("Run ``mnmg-sampler bench`` on :class:`MiniBatch`, :func:`~mnmg_sampler.x.seed_order`"
            " and `mnmg-sampler partition`; keep don't and 'quotes'.")
    assert plain(text) == ("Run mnmg-sampler bench on MiniBatch, seed_order and "
                           "mnmg-sampler partition; keep don't and 'quotes'.")
    assert plain(None) is None


def test_no_help_text_shows_markup():
    helps = dict(_helps(build_parser()))
    assert {"mnmg-sampler sample", "mnmg-sampler bench single", "mnmg-sampler plot"} <= set(helps)
    bad = [f"{name}: {m.group(0)!r}" for name, text in helps.items()
           for m in MARKUP.finditer(text)]
    assert not bad, "\n".join(bad)


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"mnmg-sampler {__version__}"


def test_rank_prefix(monkeypatch):
    for k in ("RANK", "WORLD_SIZE", "MNMG_RANK_PREFIX"):
        monkeypatch.delenv(k, raising=False)
    assert rank_prefix() == ""
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert rank_prefix() == "[rank1] "
    monkeypatch.setenv("MNMG_RANK_PREFIX", "0")  # torchrun --tee already prefixes
    assert rank_prefix() == ""


@pytest.mark.parametrize("script", ["run.sh", "multinode.sh", "slurm.sbatch"])
def test_launch_scripts_leave_the_rank_prefix_to_torchrun(script):
    text = (REPO / "launch" / script).read_text()
    if script == "slurm.sbatch":  # it launches every node through multinode.sh
        assert "launch/multinode.sh" in text
        text = (REPO / "launch" / "multinode.sh").read_text()
    assert "--tee 3" in text and "--role rank" in text
    assert "export MNMG_RANK_PREFIX=0 TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE='[rank${rank}]:'" \
        in text


def test_closed_pipe_exits_quietly():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    p = subprocess.Popen([sys.executable, "-m", "mnmg_sampler", "info", "cora"], cwd=REPO,
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()  # the reader is gone before the first line is written
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == EXIT_BROKEN_PIPE
    assert err == "", err


def test_info_and_partition_json(tmp_path):
    r = _cli("info", "cora", "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert (info["nodes"], info["edges"], info["labels"]["classes"]) == (2708, 10858, 7)
    assert info["features"] == {"shape": [2708, 1433], "dtype": "float32"}
    table = _cli("info", "cora").stdout
    assert re.search(r"^nodes +2,708$", table, re.M) and "{" not in table
    r = _cli("partition", "cora", "--parts", "2", "--method", "range", "--out",
             str(tmp_path / "p"), "--json")
    assert r.returncode == 0, r.stderr
    part = json.loads(r.stdout)
    assert part["parts"] == 2 and sum(part["part_nodes"]) == 2708
    assert part["output"] == str(tmp_path / "p")


def _metrics(path: Path) -> list[dict]:
    return [json.loads(ln) for ln in path.read_text().splitlines()]


def test_run_report_lines_and_records(tmp_path, capsys):
    path = tmp_path / "metrics.jsonl"
    rep = RunReport(0, epochs=2, steps_per_epoch=5, log_every=2, progress=True,
                    metrics_path=path)
    rep.open_bar()  # stderr is not a terminal under pytest: no bar
    assert rep.bar is None
    rep.start(mode="train", world_size=2, first_epoch=0)
    for epoch in range(2):
        rep.epoch_start()
        for step in range(1, 6):
            rep.step(epoch, step, loss=0.5 * step, correct=3, seeds=4)
        rep.epoch(epoch_record(epoch, 2.0, 10, 1000, train_loss=1.0, train_acc=0.75))
    rep.final({"event": "final", "test_acc": 0.5}, "val accuracy 0.5000  test accuracy 0.5000")
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("epoch 1/2  step 2/5  loss 0.7500  acc 0.7500")
    assert out[2] == "epoch 1/2  loss 1.0000  acc 0.7500  5.0 batches/s  500 edges/s  2.0s"
    assert len(out) == 7 and out[-1].startswith("val accuracy")  # 2 x (2 steps + epoch) + final
    recs = _metrics(path)
    assert [r["event"] for r in recs] == ["start", "step", "step", "epoch",
                                          "step", "step", "epoch", "final"]
    steps = [r for r in recs if r["event"] == "step"]
    assert [(r["epoch"], r["step"], r["global_step"]) for r in steps] == [
        (0, 2, 2), (0, 4, 4), (1, 2, 7), (1, 4, 9)]
    assert steps[1]["loss"] == pytest.approx((1.5 * 4 + 2.0 * 4) / 8)  # steps 3-4 of epoch 0


def test_run_report_is_silent_off_rank_0(tmp_path, capsys):
    rep = RunReport(1, epochs=1, steps_per_epoch=2, log_every=1,
                    metrics_path=tmp_path / "m.jsonl")
    rep.start(mode="sample")
    rep.step(0, 1)
    rep.epoch(epoch_record(0, 1.0, 2, 20))
    rep.final({"event": "final"}, "done")
    assert capsys.readouterr().out == ""
    assert not (tmp_path / "m.jsonl").exists()


def test_plot_draws_the_last_run(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from mnmg_sampler.commands.plot import last_run

    path = tmp_path / "metrics.jsonl"
    old = [{"event": "start", "first_epoch": 0}, {"event": "epoch", "epoch": 0, "train_loss": 9}]
    run = [{"event": "start", "first_epoch": 0, "world_size": 2, "config": {"name": "t"}}]
    for e in range(3):
        run.append({"event": "step", "epoch": e, "step": 1, "steps": 2, "loss": 1.0 / (e + 1),
                    "acc": 0.5, "batches_per_s": 1.0})
        run.append(epoch_record(e, 1.0, 4, 400.0 * (e + 1), train_loss=1.0 / (e + 1),
                                train_acc=0.5 + e / 10, val_acc=0.6, val_loss=0.9))
    run += [{"event": "start", "first_epoch": 2}, epoch_record(2, 1.0, 4, 999.0, train_loss=0.2,
                                                               train_acc=0.8),
            {"event": "final", "test_acc": 0.7}]
    path.write_text("".join(json.dumps(r) + "\n" for r in old + run))
    recs = last_run(path)
    epochs = [r for r in recs if r["event"] == "epoch"]
    assert [r["epoch"] for r in epochs] == [0, 1, 2]  # the old run dropped, epoch 2 once
    assert epochs[-1]["sampled_edges"] == 999  # the resumed run's record wins
    with pytest.raises(SystemExit) as e:
        main(["plot", str(tmp_path)])
    assert e.value.code == 0
    png = tmp_path / "curves.png"
    assert capsys.readouterr().out.strip() == f"wrote {png}"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_plot_errors_are_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["plot", str(tmp_path)])
    assert e.value.code == 2
    assert "no metrics file" in capsys.readouterr().err


def test_bench_json_without_out_prints_only_json(capsys):
    """``bench MODE --json``: the mode's table goes to stderr, stdout holds one JSON document."""
    from mnmg_sampler.commands import bench

    def fake_mode(args):
        print("a table for a person")
        Path(args.json).write_text(json.dumps({"edges_per_s": 1.5}) + "\n")
        print(f"\nwrote {args.json}")
        return 0

    args = argparse.Namespace(json=bench.STDOUT, bench_run=fake_mode)
    assert bench.run(args) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == {"edges_per_s": 1.5}
    assert "a table for a person" in err and "wrote" not in err
    parser = build_parser()
    for mode in ("single", "dist", "merge", "overlap"):
        assert parser.parse_args(["bench", mode, "--json"]).json == bench.STDOUT
        assert parser.parse_args(["bench", mode, "--json", "r.json"]).json == "r.json"
