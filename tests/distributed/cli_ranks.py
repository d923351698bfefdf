"""Run ``mnmg-sampler ARGS`` (the CLI's ``main``) in the harness's pooled ranks.

A test of what a command does (a job learns, resumes, refuses bad input on every rank) need not
start torchrun's agent and fresh interpreters each time: the pooled ranks already hold torch,
numba's kernels and DDP's imports. Tests of the launch itself (torchrun, ``launch/*.sh``,
restarts, killed ranks) stay under real torchrun (``torchrun.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .harness import run_ranks
from .torchrun import REPO, metrics


@dataclass
class RankRun:
    """One rank's end of a command: its exit code and what it printed."""

    returncode: int
    stdout: str
    stderr: str


def _cli(rank, world, argv, extra_env) -> RankRun:
    """``main(argv)`` on this rank, stdout and stderr captured; what the command changes in the
    process (threads, signal handlers, log handlers, working directory) is put back after it."""
    import contextlib
    import faulthandler
    import logging
    import os
    import signal
    import tempfile

    import numba
    import torch

    from mnmg_sampler.commands.cli import main

    # the harness restores the environment after the call; "{rank}" in a value is the rank
    os.environ.update({k: v.format(rank=rank) for k, v in extra_env.items()})
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    threads = (torch.get_num_threads(), numba.get_num_threads())
    sigs = {s: signal.getsignal(s) for s in signal.valid_signals()
            if s not in (signal.SIGKILL, signal.SIGSTOP)}
    cwd, faults = os.getcwd(), faulthandler.is_enabled()
    # files, not StringIO: torchrun's error handler enables faulthandler on stderr's descriptor
    out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
    code = 0
    try:
        os.chdir(REPO)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(list(argv))
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        if not faults:
            faulthandler.disable()
        os.chdir(cwd)
        root.handlers[:] = handlers
        root.setLevel(level)
        torch.set_num_threads(threads[0])
        numba.set_num_threads(threads[1])
        for s, h in sigs.items():
            if h is not None and signal.getsignal(s) is not h:
                signal.signal(s, h)
    texts = []
    for f in (out, err):
        f.seek(0)
        texts.append(f.read())
        f.close()
    return RankRun(code, *texts)


def cli_ranks(args: Sequence[str], world: int = 2, timeout: float = 300,
              env: dict[str, str] | None = None) -> list[RankRun]:
    """``mnmg-sampler ARGS`` on ``world`` pooled ranks (one process group, as under torchrun
    with one node); ``env`` is set in the ranks for the call only (``{rank}`` in a value: the
    rank, e.g. ``MNMG_HOST_ID`` to emulate a host per rank). Returns each rank's
    :class:`RankRun`; a rank that raised fails the test with its traceback."""
    return run_ranks(_cli, world, list(args), dict(env or {}), timeout=timeout)


def train_job(config: str, overrides: list[str], tmp_path: Path, timeout: float = 300,
              env: dict[str, str] | None = None) -> tuple[RankRun, list[dict]]:
    """``train --config CONFIG OVERRIDES`` on 2 pooled ranks (``env`` as :func:`cli_ranks`),
    its output and partitions under ``tmp_path``: rank 0's run (both ranks checked to succeed)
    and the metrics records."""
    out = tmp_path / "run"
    args = ["train", "--config", config, "--no-progress", *overrides, f"output.dir={out}",
            f"partition.dir={tmp_path / 'parts'}"]
    runs = cli_ranks(args, timeout=timeout, env=env)
    for r in runs:
        assert r.returncode == 0, r.stderr[-4000:]
    return runs[0], metrics(out)
