"""``mnmg-sampler selfcheck`` on this CPU machine: CPU lines pass, GPU lines skipped with why.

The simulator run is in ``tests/gpu_sim/test_selfcheck_sim.py``, the 2-rank run in
``tests/distributed/test_selfcheck_ranks.py``.
"""

from __future__ import annotations

import json

import pytest

from mnmg_sampler.commands.cli import main
from mnmg_sampler.commands.selfcheck.result import (
    FAIL,
    INJECT_ENV,
    PASS,
    SKIPPED,
    VERDICTS,
    inject,
    injected,
    merge,
)

ARGS = ["selfcheck", "--scale", "8", "--repeats", "1"]
LINES = ["env.versions", "env.gpus", "env.topology", "env.backends", "kernel.cpu.uniform",
         "kernel.cpu.weighted", "kernel.cpu.negative", "kernel.cuda.uniform",
         "kernel.cuda.weighted", "kernel.cpu.typed", "kernel.cuda.typed",
         "memory.pool", "memory.expandable_segments",
         "exchange.all_to_all", "exchange.sampling"]


def _run(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as e:
        main(argv)
    return e.value.code


@pytest.fixture
def cpu_only(monkeypatch):
    import torch

    from mnmg_sampler.system.gpu import simulator_enabled

    if torch.cuda.is_available() or simulator_enabled():
        pytest.skip("this test describes a machine without CUDA and without the simulator")
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", INJECT_ENV):
        monkeypatch.delenv(var, raising=False)


def test_cpu_machine_exits_0_with_a_valid_report(cpu_only, tmp_path, capsys):
    out = tmp_path / "report.json"
    assert _run([*ARGS, "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    checks = {c["name"]: c for c in report["checks"]}
    assert list(checks) == LINES  # every check listed, in report order
    assert all(c["verdict"] in VERDICTS for c in checks.values())
    assert report["verdict"] == PASS and report["world_size"] == 1
    assert report["format"] == "mnmg-sampler-selfcheck/1"
    for name in ("kernel.cpu.uniform", "kernel.cpu.weighted", "kernel.cpu.negative",
                 "kernel.cpu.typed", "env.versions", "env.backends"):
        assert checks[name]["verdict"] == PASS, checks[name]
    for name in ("kernel.cuda.uniform", "kernel.cuda.weighted"):
        assert checks[name]["verdict"] == SKIPPED
        assert "NUMBA_ENABLE_CUDASIM=1" in checks[name]["detail"]
    for name in ("env.gpus", "memory.pool", "memory.expandable_segments"):
        assert checks[name]["verdict"] == SKIPPED and "no CUDA device" in checks[name]["detail"]
    for name in ("exchange.all_to_all", "exchange.sampling"):
        assert checks[name]["verdict"] == SKIPPED and "torchrun" in checks[name]["detail"]
    # a skipped line always says why; rates are reported beside the gather baseline
    assert all(c["detail"] for c in checks.values())
    cpu = checks["kernel.cpu.uniform"]["ranks"][0]["data"]
    assert cpu["edges_per_s"] > 0 and cpu["ratio_vs_gather"] > 0
    table = capsys.readouterr().out
    assert all(name in table for name in LINES) and "verdict: pass" in table


def test_json_without_out_is_one_document_on_stdout(cpu_only, capsys):
    assert _run([*ARGS, "--json"]) == 0
    cap = capsys.readouterr()
    report = json.loads(cap.out)
    assert [c["name"] for c in report["checks"]] == LINES
    assert "kernel.cpu.uniform" in cap.err  # the table went to stderr


@pytest.mark.parametrize("line", ["kernel.cpu.uniform", "kernel.cpu.negative"])
def test_injected_fault_fails_its_line_and_the_exit_code(cpu_only, monkeypatch, tmp_path, line):
    monkeypatch.setenv(INJECT_ENV, line)
    out = tmp_path / "report.json"
    assert _run([*ARGS, "--json", str(out)]) == 1
    checks = {c["name"]: c for c in json.loads(out.read_text())["checks"]}
    assert checks[line]["verdict"] == FAIL and "differs" in checks[line]["detail"]
    assert [n for n, c in checks.items() if c["verdict"] == FAIL] == [line]


def test_bad_options_are_user_errors(cpu_only, capsys):
    assert _run(["selfcheck", "--scale", "40"]) == 2
    assert "--scale 40" in capsys.readouterr().err


def test_injection_targets_a_name_and_optionally_a_rank(monkeypatch):
    import numpy as np

    monkeypatch.setenv(INJECT_ENV, "a.b@1, c.d")
    assert injected("a.b", 1) and not injected("a.b", 0) and injected("c.d", 0)
    assert not injected("a", 1)
    x = np.arange(3)
    assert inject("e.f", x, 0) is x
    assert inject("c.d", x, 0).tolist() == [1, 1, 2] and x.tolist() == [0, 1, 2]


def test_merge_fails_a_line_when_any_rank_fails():
    r0 = [{"name": "x", "verdict": PASS, "detail": "ok", "seconds": 1.0, "data": {}},
          {"name": "y", "verdict": SKIPPED, "detail": "why", "seconds": None, "data": {}}]
    r1 = [{"name": "x", "verdict": FAIL, "detail": "bad", "seconds": 2.0, "data": {}},
          {"name": "y", "verdict": SKIPPED, "detail": "why", "seconds": None, "data": {}}]
    x, y = merge([r0, r1])
    assert x["verdict"] == FAIL and x["detail"] == "rank 1 failed; rank 1: bad"
    assert x["seconds"] == 2.0 and [r["rank"] for r in x["ranks"]] == [0, 1]
    assert y["verdict"] == SKIPPED and y["seconds"] is None


class _FakeNumbaCuda:
    """numba.cuda with one fake device whose arrays are (or are not) counted by the pool."""

    def __init__(self, pool: dict, routed: bool) -> None:
        self.pool, self.routed = pool, routed
        self.gpus = {0: self}
        done = type("Q", (), {"clear": lambda q: pool.update(allocated=0)})()
        self._ctx = type("C", (), {"deallocations": done})()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def current_context(self):
        return self._ctx

    def device_array(self, n, dtype):
        if self.routed:
            self.pool["allocated"] += n
        return object()


@pytest.mark.parametrize("routed", [True, False])
def test_memory_pool_line_reads_the_allocator(monkeypatch, routed):
    # No GPU here: torch.cuda's statistics and numba.cuda are faked, so this checks the line's
    # logic (a Numba allocation must show up in torch's pool), not a device.
    import numba
    import torch

    from mnmg_sampler.commands.selfcheck import pool

    state = {"allocated": 0}
    monkeypatch.setattr(numba, "cuda", _FakeNumbaCuda(state, routed), raising=False)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda d=None: None)
    monkeypatch.setattr(torch.cuda, "memory_stats",
                        lambda d=None: {"allocated_bytes.all.current": state["allocated"]})
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda d=None: (1 << 30, 1 << 31))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda d=None: 0)
    line = pool.pool(torch.device("cuda", 0), False, {"numba": True, "cupy": False})
    assert line.verdict == (PASS if routed else FAIL), line
    assert line.data["numba_bytes_in_pool"] == (pool.MIB if routed else 0)


@pytest.mark.parametrize("want", [True, False])
def test_expandable_segments_line_compares_segments_with_the_setting(monkeypatch, want):
    import torch

    from mnmg_sampler.commands.selfcheck import pool

    monkeypatch.setattr(torch, "empty", lambda *a, **k: None)
    monkeypatch.setattr(torch.cuda.memory, "_snapshot",
                        lambda: {"segments": [{"device": 0, "is_expandable": True}]})
    line = pool.expandable(torch.device("cuda", 0), False,
                           {"expandable_segments_wanted": want, "warnings": []})
    assert line.verdict == (PASS if want else FAIL), line
