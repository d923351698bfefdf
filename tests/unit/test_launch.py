"""The launch scripts' argument handling, with a stub in place of torchrun (no ranks start).

The captured command line is also parsed by the installed torchrun's own argument parser, so a
flag torch does not know fails here rather than on a cluster.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LAUNCH = REPO / "launch"
SCRIPTS = ["run.sh", "multinode.sh", "slurm.sbatch"]

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


@pytest.fixture
def stub(tmp_path):
    """An executable that records its arguments (one per line) and some environment."""
    log = tmp_path / "args.txt"
    script = tmp_path / "fake_launcher"
    script.write_text(
        "#!/usr/bin/env bash\n"
        f'printf "%s\\n" "$@" > {log}\n'
        f'echo "OMP=${{OMP_NUM_THREADS:-}} NCCL=${{NCCL_DEBUG:-}}" > {log}.env\n')
    script.chmod(0o755)
    return script, log


def launch(script: str, env: dict, args: list[str], cwd: Path = REPO):
    full = {k: v for k, v in os.environ.items()
            if k not in ("NPROC", "CONFIG", "LOG_RANK", "LOG_DIR", "OMP_NUM_THREADS",
                         "NCCL_DEBUG", "NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT")}
    full.update(env)
    return subprocess.run(["bash", str(LAUNCH / script), *args], env=full, cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def torchrun_args(argv: list[str]):
    """Parse with the installed torchrun's parser (raises SystemExit on an unknown flag)."""
    from torch.distributed.run import get_args_parser

    return get_args_parser().parse_args(argv)


@pytest.mark.parametrize("script", SCRIPTS)
def test_scripts_parse_and_are_executable(script):
    path = LAUNCH / script
    assert os.access(path, os.X_OK)
    subprocess.run(["bash", "-n", str(path)], check=True)


def test_run_sh_defaults_and_forwarded_overrides(stub):
    fake, log = stub
    proc = launch("run.sh", {"TORCHRUN": str(fake)}, ["sampler.batch_size=64", "name=a b"])
    assert proc.returncode == 0, proc.stderr
    argv = log.read_text().splitlines()
    args = torchrun_args(argv)
    assert args.nproc_per_node == "2"
    assert (args.rdzv_backend, args.rdzv_endpoint) == ("c10d", "127.0.0.1:0")  # loopback
    assert (args.local_ranks_filter, args.role, args.tee) == ("0", "rank", "3")
    assert args.module and args.training_script == "mnmg_sampler"
    assert args.training_script_args == [
        "train", "--config", str(REPO / "configs" / "quickstart.yaml"),
        "sampler.batch_size=64", "name=a b"]
    cores = os.cpu_count() or 1
    assert (log.with_suffix(".txt.env").read_text().split()
            == [f"OMP={max(1, cores // 2)}", "NCCL=WARN"])


def test_run_sh_environment_knobs(stub, tmp_path):
    fake, log = stub
    env = {"TORCHRUN": str(fake), "NPROC": "3", "CONFIG": "configs/cora.yaml", "LOG_RANK": "0,1",
           "LOG_DIR": str(tmp_path / "logs dir"), "OMP_NUM_THREADS": "5", "NCCL_DEBUG": "INFO"}
    proc = launch("run.sh", env, [])
    assert proc.returncode == 0, proc.stderr
    args = torchrun_args(log.read_text().splitlines())
    assert (args.nproc_per_node, args.local_ranks_filter) == ("3", "0,1")
    assert args.log_dir == str(tmp_path / "logs dir")
    assert args.training_script_args == ["train", "--config", "configs/cora.yaml"]
    assert log.with_suffix(".txt.env").read_text().split() == ["OMP=5", "NCCL=INFO"]


def test_multinode_sh_defaults_to_the_one_line_launcher(tmp_path):
    # without TORCHRUN: python -m mnmg_sampler.system.runtime (torchrun ending a typed error in one
    # line), not torchrun itself; a stand-in python records what it was asked to run
    venv = tmp_path / "repo"
    (venv / "launch").mkdir(parents=True)
    shutil.copy(LAUNCH / "multinode.sh", venv / "launch" / "multinode.sh")
    (venv / ".venv" / "bin").mkdir(parents=True)
    py = venv / ".venv" / "bin" / "python"
    py.write_text(f'#!/usr/bin/env bash\nprintf "%s\\n" "$@" > {tmp_path / "py.txt"}\n'
                  f'echo "$TORCH_CPP_LOG_LEVEL/$MNMG_WORKER_CPP_LOG_LEVEL" > {tmp_path / "lvl"}\n')
    py.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("TORCHRUN", "TORCH_CPP_LOG_LEVEL")}
    env.update(NNODES="2", NODE_RANK="1", MASTER_ADDR="10.0.0.1", MASTER_PORT="4321", NPROC="1",
               TORCH_CPP_LOG_LEVEL="INFO")
    proc = subprocess.run(["bash", str(venv / "launch" / "multinode.sh")], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    argv = (tmp_path / "py.txt").read_text().splitlines()
    assert argv[:2] == ["-m", "mnmg_sampler.system.runtime"]
    assert torchrun_args(argv[2:]).rdzv_conf == "is_host=0,join_timeout=900"
    # the launcher is quiet, the ranks get the user's level back (runtime.launch_local)
    assert (tmp_path / "lvl").read_text().strip() == "ERROR/INFO"


@pytest.mark.parametrize("node_rank, is_host", [("0", "1"), ("1", "0")])
def test_multinode_sh(stub, node_rank, is_host):
    fake, log = stub
    env = {"TORCHRUN": str(fake), "NNODES": "2", "NODE_RANK": node_rank,
           "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "4321", "NPROC": "1"}
    proc = launch("multinode.sh", env, ["training.epochs=1"])
    assert proc.returncode == 0, proc.stderr
    args = torchrun_args(log.read_text().splitlines())
    assert (args.nnodes, args.nproc_per_node) == ("2", "1")
    assert (args.rdzv_backend, args.rdzv_endpoint, args.rdzv_id) == (
        "c10d", "10.0.0.1:4321", "mnmg-4321")
    assert args.rdzv_conf == f"is_host={is_host},join_timeout=900"
    assert args.training_script_args == [
        "train", "--config", str(REPO / "configs" / "multinode_gpu.yaml"), "training.epochs=1"]


def _slurm_env(tmp_path: Path, fake: Path) -> dict:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scontrol = bin_dir / "scontrol"
    scontrol.write_text("#!/usr/bin/env bash\necho nodeA\necho nodeB\n")
    scontrol.chmod(0o755)
    # srun on "node 1" of the allocation: records its own flags, then runs the task there
    srun = bin_dir / "fake_srun"
    srun.write_text("#!/usr/bin/env bash\n"
                    f'echo "$1" > {tmp_path / "srun_flags.txt"}\n'
                    'shift\nSLURM_NODEID=1 exec "$@"\n')
    srun.chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "4242",
            "SLURM_NNODES": "2", "SLURM_JOB_NODELIST": "node[A-B]", "SLURM_SUBMIT_DIR": str(REPO),
            "SLURM_CPUS_PER_TASK": "8", "NPROC": "1", "CONFIG": "configs/quickstart.yaml",
            "SRUN": str(srun), "TORCHRUN": str(fake), "PY": sys.executable, "NODE_RANK": "7"}


def test_slurm_sbatch_validates_then_runs_multinode_sh_under_srun(stub, tmp_path):
    # the launch is multinode.sh's code path (the one tested on loopback), per SLURM node
    fake, log = stub
    proc = launch("slurm.sbatch", _slurm_env(tmp_path, fake), ["training.epochs=1"],
                  cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"  # the pre-flight validate
    assert (tmp_path / "srun_flags.txt").read_text().split() == ["--kill-on-bad-exit=1"]
    args = torchrun_args(log.read_text().splitlines())
    assert (args.nnodes, args.nproc_per_node, args.rdzv_id) == ("2", "1", "4242")
    assert args.rdzv_endpoint == "nodeA:24242"
    assert args.rdzv_conf == "is_host=0,join_timeout=900"  # SLURM_NODEID 1, not NODE_RANK
    assert (args.local_ranks_filter, args.role, args.tee) == ("0", "rank", "3")
    assert args.training_script_args == [
        "train", "--config", "configs/quickstart.yaml", "training.epochs=1"]
    assert log.with_suffix(".txt.env").read_text().split() == ["OMP=8", "NCCL=WARN"]


def test_slurm_sbatch_stops_on_a_bad_config_before_srun(stub, tmp_path):
    fake, log = stub
    proc = launch("slurm.sbatch", _slurm_env(tmp_path, fake), ["sampler.batch_size=-1"],
                  cwd=tmp_path)
    assert proc.returncode == 2
    assert "sampler.batch_size: expected a positive integer" in proc.stderr
    assert not log.exists()


def test_slurm_sbatch_outside_slurm_says_so():
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    proc = subprocess.run(["bash", str(LAUNCH / "slurm.sbatch")], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "not inside a SLURM allocation" in proc.stderr


def test_launcher_leaves_several_nodes_to_torchrun(monkeypatch):
    # one node on loopback: a store bound to 127.0.0.1 here; several nodes share an endpoint
    # only the host node's torchrun serves, so their arguments pass through unchanged
    from mnmg_sampler.system.runtime import (
        _arg_value,
        _loopback_args,
        _restore_worker_cpp_log_level,
    )

    argv = ["--nnodes", "2", "--rdzv-endpoint", "127.0.0.1:4321", "-m", "mnmg_sampler"]
    assert _loopback_args(list(argv)) == argv
    assert _loopback_args(["--nnodes=1:2", "--rdzv_endpoint=127.0.0.1:9"]) == [
        "--nnodes=1:2", "--rdzv_endpoint=127.0.0.1:9"]
    assert _arg_value(["--rdzv_endpoint=h:1"], "--rdzv-endpoint") == "h:1"
    assert _arg_value(["--rdzv-endpoint", "h:2"], "--rdzv-endpoint") == "h:2"
    for user, want in (("", None), ("INFO", "INFO")):
        monkeypatch.setenv("TORCH_CPP_LOG_LEVEL", "ERROR")
        monkeypatch.setenv("MNMG_WORKER_CPP_LOG_LEVEL", user)
        _restore_worker_cpp_log_level()
        assert os.environ.get("TORCH_CPP_LOG_LEVEL") == want
        assert "MNMG_WORKER_CPP_LOG_LEVEL" not in os.environ


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs CPU affinity and at least 2 cores")
def test_default_threads_follow_the_cores_a_pinned_rank_may_use():
    """A rank pinned to one core (``taskset``, a node of a loopback rehearsal) runs one torch
    and one numba thread, not one per core of the machine."""
    code = ("import os; os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]}); "
            "import torch, numba; from mnmg_sampler.system.runtime import set_threads; "
            "set_threads(None); print(torch.get_num_threads(), numba.get_num_threads())")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS",
                                                             "LOCAL_WORLD_SIZE")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=120, check=True).stdout.split()
    assert out == ["1", "1"]
