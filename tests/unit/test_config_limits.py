"""`validate` refuses values that cannot work: sizes that overflow or cannot fit in memory,
timeouts no timer can hold, thread counts no machine runs, job names that leave runs/, YAML keys
that are not names. Each is one typed line with a `Fix:` through the CLI (exit code 2)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from mnmg_sampler.commands import cli
from mnmg_sampler.config import load_config
from mnmg_sampler.errors import ConfigError, MemoryBudgetError

REPO = Path(__file__).resolve().parents[2]
QUICK = str(REPO / "configs" / "quickstart.yaml")


def validate(capsys, *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        cli.main(["validate", "-q", *argv])
    out, err = capsys.readouterr()
    return exc.value.code or 0, out, err


def refused(capsys, *argv: str, config: str = QUICK) -> str:
    """The one error line of `validate` (exit 2, no traceback, a Fix)."""
    code, out, err = validate(capsys, config, *argv)
    assert code == 2 and out == "", (code, out, err)
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert "Fix: " in err, err
    return err.removeprefix("mnmg-sampler validate: error: ")


@pytest.mark.parametrize("override, start", [
    # threads: a hard cap whatever the machine, and 0 / negatives with a Fix
    ("runtime.threads_per_rank=1000000", "runtime.threads_per_rank: expected at most 1024"),
    ("runtime.threads_per_rank=0", "runtime.threads_per_rank: expected a positive integer"),
    ("runtime.threads_per_rank=-4", "runtime.threads_per_rank: expected a positive integer"),
    ("partition.parts=0", "partition.parts: expected a positive integer, got 0"),
    ("partition.parts=100000000", "partition.parts: expected at most 65536"),
    # timeouts become a timedelta (and a C++ chrono duration): finite, bounded
    ("runtime.collective_timeout_s=1e300", "runtime.collective_timeout_s: expected at most"),
    ("runtime.collective_timeout_s=1.0e+300", "runtime.collective_timeout_s: expected at most"),
    (f"runtime.collective_timeout_s={10**400}", "runtime.collective_timeout_s: expected a num"),
    ("runtime.collective_timeout_s=.inf", "runtime.collective_timeout_s: expected a positive"),
    ("runtime.collective_timeout_s=.nan", "runtime.collective_timeout_s: expected a positive"),
    ("runtime.collective_timeout_s=-1", "runtime.collective_timeout_s: expected a positive"),
    ("runtime.collective_timeout_s=0", "runtime.collective_timeout_s: expected a positive"),
    # sizes that overflow int64 on their way into numpy, or allocate absurdly
    ("sampler.fanouts=[1000000000000000,5]", "sampler.fanouts: expected fanouts of at most"),
    (f"sampler.fanouts=[{10**20}]", "sampler.fanouts: expected fanouts of at most"),
    (f"sampler.eval_fanouts=[-1,{2**31}]", "sampler.eval_fanouts: expected fanouts of at most"),
    (f"sampler.batch_size={10**23}", "sampler.batch_size: expected at most 2**31 - 1"),
    (f"sampler.eval_batch_size={2**31}", "sampler.eval_batch_size: expected at most"),
    (f"training.epochs={10**12}", "training.epochs: expected at most 2**31 - 1"),
    (f"dataset.seed={10**27}", "dataset.seed: expected an integer in [0, 2**63)"),
    (f"dataset.feature_dim={10**9}", "dataset.feature_dim: expected at most 2**20"),
    (f"dataset.num_classes={10**9}", "dataset.num_classes: expected at most 2**20"),
    (f"dataset.max_node_id={2**64}", "dataset.max_node_id: expected at most 2**63 - 1"),
    (f"link.neg_amount={10**9}", "link.neg_amount: expected at most 2**20"),
    (f"link.eval_negatives={10**9}", "link.eval_negatives: expected at most 2**20"),
    (f"model.hidden={10**12}", "model.hidden: expected at most 2**20"),
    (f"model.hidden={2**40}", "model.hidden: expected at most 2**20"),
])
def test_values_that_cannot_work_are_one_line_with_a_fix(capsys, override, start):
    err = refused(capsys, override)
    assert err.startswith(start), err


@pytest.mark.parametrize("overrides, start, unit", [
    (["dataset.name=rmat:40"], "dataset.name: rmat:40:16 (1,099,511,627,776 nodes", "TiB"),
    (["dataset.name=rmat:40:1"], "dataset.name: rmat:40:1 ", "TiB"),
    (["dataset.name=rmat:24:1000000000"], "dataset.name: rmat:24:1000000000 ", "PiB"),
    (["dataset.name=rmat:40", "--world-size", "1024"], "dataset.name: rmat:40:16 ", "GiB"),
    # the model: parameters, gradients and optimizer state estimated from its shapes
    (["model.hidden=1048576", "sampler.fanouts=[5,5,5]"], "model.hidden: a GraphSAGE of "
     "widths [1, 1048576, 1048576, 1]", "TiB"),
    (["model.hidden=65536", "dataset.feature_dim=1048576"], "model.hidden: a GraphSAGE", "TiB"),
])
def test_what_cannot_fit_is_refused_before_allocating(capsys, overrides, start, unit):
    err = refused(capsys, *overrides)
    assert err.startswith(start), err
    assert f" {unit}, above the " in err and "Nothing was allocated" in err, err


@pytest.mark.parametrize("overrides", [
    ["runtime.threads_per_rank=1024"], ["runtime.collective_timeout_s=2592000"],
    ["partition.parts=null"], ["dataset.name=rmat:12:8"], ["model.hidden=1048576"],
    ["sampler.fanouts=[2147483647,-1]"], ["name=cora.v2-sage_1"],
    ["training.mode=sample", "model.hidden=1048576", "sampler.fanouts=[5,5,5]"],
])
def test_neighbours_of_the_limits_still_validate(capsys, overrides):
    code, out, err = validate(capsys, QUICK, *overrides)
    assert (code, out.strip(), err) == (0, "ok", "")


@pytest.mark.parametrize("name", ["../../escape", "/tmp/abs", "..", ".", "a/b", "a\\b",
                                  "runs/../x", "x\0y"])
def test_job_names_that_leave_runs_are_refused(tmp_path, capsys, name):
    p = tmp_path / "job.yaml"
    p.write_text(f"name: {name!r}\n".replace("'", '"').replace("\0", "\\0"))
    err = refused(capsys, config=str(p))
    assert err.startswith(f"name: {name!r} is not a plain file name"), err
    assert "set output.dir" in err


def test_empty_name_is_refused_too(tmp_path):
    with pytest.raises(ConfigError, match="name: '' is not a plain file name"):
        load_config(None, ["name="])


@pytest.mark.parametrize("text, line, kind", [
    ("sampler:\n  ? [a, b]\n  : 3\n", 2, "list"),
    ("sampler:\n  {x: 1}: 2\n", 2, "mapping"),
    ("name: j\n[1, 2]: 3\n", 2, "list"),
    ("dataset: {name: cora, [x]: 1}\n", 1, "list"),
])
def test_yaml_keys_that_are_lists_or_mappings(tmp_path, capsys, text, line, kind):
    p = tmp_path / "job.yaml"
    p.write_text(text)
    err = refused(capsys, config=str(p))
    assert err.startswith(f"{p}: invalid YAML at line {line}, column "), err
    assert f"a {kind} cannot be a key" in err


def test_override_with_a_list_key_is_a_config_error():
    with pytest.raises(ConfigError, match="sampler: cannot parse the override value"):
        load_config(None, ["sampler={[1]: 2}"])


def test_timeouts_become_a_timedelta_or_a_config_error():
    from mnmg_sampler.system.runtime import timeout_delta

    assert timeout_delta(600).total_seconds() == 600
    for bad in (1e300, math.inf, math.nan, -1.0, 0, "soon", None):
        with pytest.raises(ConfigError, match="Fix: give a number of seconds"):
            timeout_delta(bad)


def test_the_model_and_the_generator_check_before_allocating():
    from mnmg_sampler.graph.rmat import rmat_bytes, rmat_edge_range, rmat_graph
    from mnmg_sampler.train.budget import sage_dims, sage_param_count
    from mnmg_sampler.train.model import GraphSAGE

    with pytest.raises(MemoryBudgetError, match=r"widths \[16, 1000000000000, 4\]"):
        GraphSAGE(16, 10**12, 4, 2, use_pyg=False)
    small = GraphSAGE(16, 32, 4, 3, use_pyg=False)  # the estimate counts what torch allocates
    assert sum(p.numel() for p in small.parameters()) == sage_param_count(sage_dims(16, 32, 4, 3))
    with pytest.raises(MemoryBudgetError, match="rmat:40:16"):
        rmat_graph(40)
    with pytest.raises(MemoryBudgetError, match="edges 0..17,592,186,044,416"):
        rmat_edge_range(40, 16, 0, 16 << 40)
    assert rmat_bytes(40, 16, parts=2) < rmat_bytes(40, 16) and rmat_graph(6).num_nodes == 64


def test_job_start_refuses_on_every_rank_before_allocating(monkeypatch):
    # `train` without `validate`: each rank checks the estimate once the group exists (agree:
    # all ranks fail alike); here a world of one, in this process
    import torch
    import torch.distributed as dist

    from mnmg_sampler.train.setup import start_rank

    for k in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK",
              "LOCAL_WORLD_SIZE", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(k, raising=False)
    cfg = load_config(None, ["dataset.name=rmat:40", "runtime.backend=gloo",
                             "runtime.device=cpu",
                             f"runtime.threads_per_rank={torch.get_num_threads()}"])
    try:
        with pytest.raises(MemoryBudgetError, match=r"^dataset.name: rmat:40:16 .* TiB"):
            start_rank(cfg)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


@pytest.mark.parametrize("argv, start", [
    (["sample", "cora", "--fanouts", f"{10**20},5"], "invalid fanouts [100000000000000000000, 5]"),
    (["sample", "cora", "--fanouts", f"{2**31},5"], "invalid fanouts [2147483648, 5]"),
    (["sample", "--partitions", "p", "--collective-timeout", "1e300"],
     "--collective-timeout is 1e+300"),
    (["sample", "--partitions", "p", "--collective-timeout", "nan"], "--collective-timeout is nan"),
    (["sample", "rmat:40"], "rmat:40:16 (1,099,511,627,776 nodes"),
    (["partition", "rmat:40", "--parts", "2", "--method", "range", "--out", "x"], "rmat:40:16 "),
])
def test_command_line_neighbours(capsys, tmp_path, monkeypatch, argv, start):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1 and "Fix: " in err, err
    assert err.split(": error: ", 1)[1].startswith(start), err
    assert not (tmp_path / "x").exists()
