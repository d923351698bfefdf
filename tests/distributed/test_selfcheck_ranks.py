"""``mnmg-sampler selfcheck`` on 2 ranks over gloo (pooled ranks for the passing run: the launch is
test_train_job's; torchrun for the failing one): the exchange lines run on both ranks and pass;
a line failing on one rank fails the run on every rank."""

from __future__ import annotations

import json

import pytest

from mnmg_sampler.commands.selfcheck.result import FAIL, INJECT_ENV, PASS

from .cli_ranks import cli_ranks
from .torchrun import torchrun

ARGS = ["selfcheck", "--scale", "8", "--repeats", "1", "--exchange-mib", "0.25",
        "--timeout", "60"]
EXCHANGE = ("exchange.all_to_all", "exchange.sampling")


def _checks(path) -> dict:
    return {c["name"]: c for c in json.loads(path.read_text())["checks"]}


def test_two_ranks_exchange_and_sample_and_pass(tmp_path):
    out = tmp_path / "report.json"
    r, other = cli_ranks([*ARGS, "--json", str(out)], timeout=240)
    assert r.returncode == other.returncode == 0, r.stderr[-3000:] + other.stderr[-3000:]
    checks = _checks(out)
    for name in EXCHANGE:
        ranks = checks[name]["ranks"]
        assert [x["rank"] for x in ranks] == [0, 1]
        assert all(x["verdict"] == PASS for x in ranks), ranks
    a2a = checks["exchange.all_to_all"]["ranks"][0]["data"]
    assert a2a["backend"] == "gloo" and a2a["transport"] == "all_to_all_single"
    assert a2a["latency_s"] > 0 and a2a["bytes_per_s_sent"] > 0
    assert checks["exchange.sampling"]["ranks"][1]["data"]["bytes_sent"] > 0
    assert "[rank0] exchange.sampling" in r.stdout and "[rank1]" not in r.stdout + other.stdout


@pytest.mark.slow  # a second torchrun job; the agreement itself is covered by test_selfcheck.py
def test_a_line_failing_on_one_rank_fails_every_rank(tmp_path):
    out = tmp_path / "report.json"
    r = torchrun([*ARGS, "--json", str(out)], nproc=2, timeout=240,
                 extra_env={INJECT_ENV: "exchange.sampling@1"})
    assert r.returncode == 1, r.stderr[-3000:]
    line = _checks(out)["exchange.sampling"]
    assert line["verdict"] == FAIL and line["detail"].startswith("rank 1 failed")
    assert [x["verdict"] for x in line["ranks"]] == [PASS, FAIL]
