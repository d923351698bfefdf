"""What the console shows when a rank fails under ``python -m mnmg_sampler.system.runtime``
(torchrun,
what ``launch/run.sh`` and ``launch/multinode.sh``, hence ``launch/slurm.sbatch``, run): a typed
error gives the rank's one line, one line of the launcher naming the rank and the code, and that
exit code; a real crash keeps torchrun's summary."""

from __future__ import annotations

import subprocess
import sys

import pytest

from .torchrun import REPO, env, torchrun_nodes

TRACE_MARKS = ("Traceback", "ChildFailedError", "Sending process", "Root Cause")


def _launch(*worker: str, nproc: int = 2, filt: str | None = None, tee: bool = False
            ) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "mnmg_sampler.system.runtime", "--nproc-per-node", str(nproc),
           "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0",
           *(["--local-ranks-filter", filt] if filt else []),
           *(["--tee", "3"] if tee else []), *worker]
    return subprocess.run(cmd, cwd=REPO, env=env(), capture_output=True, text=True, timeout=180)


def test_run_sh_user_error_is_one_line_and_exit_2(tmp_path):
    e = env()
    e.update(TORCHRUN=f"{sys.executable} -m mnmg_sampler.system.runtime", PYTHONPATH=str(REPO))
    r = subprocess.run(["bash", str(REPO / "launch" / "run.sh"), "sampler.batch_size=-3",
                        f"output.dir={tmp_path}"], cwd=REPO, env=e, capture_output=True,
                       text=True, timeout=180)
    assert r.returncode == 2, r.stderr[-3000:]
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    # rank 0's own line, or (rank 1 exited first, before rank 0 printed) rank 1's line read
    # from its log by the launcher, since the console filter shows rank 0 only
    assert lines[0].startswith(("[rank0]:", "[rank1]:")), r.stderr
    assert lines[0][len("[rankN]:"):].startswith(
        "mnmg-sampler train: error: sampler.batch_size: expected a positive integer, got -3"), \
        r.stderr
    assert lines[-1].startswith("mnmg-sampler: rank ") and "exited with code 2" in lines[-1]
    assert not any(m in r.stderr for m in TRACE_MARKS), r.stderr
    assert len(lines) <= 3, r.stderr  # rank 0's line, maybe rank 1's, the launcher's


def test_multinode_sh_user_error_is_one_line_per_node(monkeypatch):
    # two "nodes" on loopback, as launch/multinode.sh runs on each (slurm.sbatch runs it too)
    monkeypatch.setenv("CONFIG", "configs/quickstart.yaml")
    monkeypatch.setenv("RDZV_TIMEOUT", "120")
    monkeypatch.delenv("TORCHRUN", raising=False)
    rs = torchrun_nodes(["sampler.batchsize=3"], 2, timeout=240,
                        script=["bash", "launch/multinode.sh"])
    for node, r in enumerate(rs):
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert not any(m in r.stderr for m in (*TRACE_MARKS, "frame #")), r.stderr[-3000:]
        assert len(lines) <= 2, r.stderr[-3000:]
        if node == 0 or r.returncode == 2:  # its rank's line, then the launcher's
            assert r.returncode == 2, r.stderr[-3000:]
            assert lines[0].startswith("[rank") and (
                "]:mnmg-sampler train: error: sampler.batchsize: unknown key (did you mean "
                "sampler.batch_size?)") in lines[0], lines
            assert lines[1].startswith("mnmg-sampler: rank ") and "exited with code 2" in lines[1]
        else:  # the host node ended the job (and its store) before this node's rank reported
            assert r.returncode == 3 and "the rendezvous store at 127.0.0.1:" in lines[-1], \
                r.stderr[-3000:]


# code 2 takes the path of code 3 (any code a rank reports); its rule is in
# test_reported_failure_rules, the launches run for code 3 in CI
@pytest.mark.parametrize("code", [pytest.param(2, marks=pytest.mark.slow), 3])
def test_reported_error_of_another_rank_names_it(code):
    worker = ["tests/distributed/launch_victim.py", f"exit{code}"]
    r = _launch(*worker)
    assert r.returncode == code, r.stderr[-3000:]
    assert f"victim exit{code}" in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith(f"mnmg-sampler: rank 1 exited with code {code}"), r.stderr
    assert "torchrun stopped the other ranks" in last and "error line is above" in last
    assert not any(m in r.stderr for m in TRACE_MARKS), r.stderr
    # rank 1's output hidden by the console filter: the launcher shows its line once, from
    # rank 1's log file, and says so
    r = _launch(*worker, filt="0", tee=True)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == code, r.stderr[-3000:]
    assert lines[-2] == f"[rank1]:mnmg-sampler train: error: victim exit{code}", r.stderr
    assert "from rank 1's log: the console filter" in lines[-1], r.stderr
    assert r.stderr.count("victim") == 1, r.stderr


@pytest.mark.parametrize("mode, mark", [("kill", "Signal 9 (SIGKILL)"),
                                        ("raise", "exitcode  : 1")])
def test_real_crash_keeps_torchruns_summary(mode, mark):
    r = _launch("tests/distributed/launch_victim.py", mode)
    assert r.returncode == 1, r.stderr[-3000:]
    assert "ChildFailedError" in r.stderr and mark in r.stderr, r.stderr[-3000:]
    assert "Sending process" in r.stderr  # torchrun's own lines are kept as well
    assert "mnmg-sampler: rank" not in r.stderr


def test_reported_failure_rules():
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    from mnmg_sampler.system.runtime import reported_failure

    def f(rank, code, pid):
        return ProcessFailure(local_rank=rank, pid=pid, exitcode=code, error_file="<N/A>")

    assert reported_failure({1: f(1, 2, 11), 0: f(0, -15, 10)}, {10}) == (1, 2)
    assert reported_failure({0: f(0, 3, 10), 1: f(1, 3, 11)}, set()) == (0, 3)
    # SIGTERM from outside (torchrun did not send it), SIGKILL, a traceback: a real crash
    assert reported_failure({1: f(1, 3, 11), 0: f(0, -15, 10)}, set()) is None
    assert reported_failure({1: f(1, 3, 11), 0: f(0, -9, 10)}, set()) is None
    assert reported_failure({1: f(1, 1, 11), 0: f(0, -15, 10)}, {10}) is None
    assert reported_failure({0: f(0, -15, 10)}, {10}) is None
