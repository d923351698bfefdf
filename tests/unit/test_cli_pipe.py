"""`mnmg-sampler ... | head`: a reader that goes away ends the command quietly, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("argv", [["info", "cora"], ["--help"]])
def test_closed_stdout_gives_no_traceback(argv):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r, w = os.pipe()
    os.close(r)  # the reader is gone before the command writes a byte
    try:
        proc = subprocess.run([sys.executable, "-m", "mnmg_sampler", *argv], stdout=w,
                              stderr=subprocess.PIPE, text=True, env=env, timeout=120)
    finally:
        os.close(w)
    assert proc.returncode == (141 if argv[0] == "info" else 0), proc.stderr  # argparse: 0
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
    assert proc.stderr.strip() == ""


def test_head_reads_the_first_line():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(f"{sys.executable} -m mnmg_sampler info cora | head -n 1", shell=True,
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0 and proc.stdout.count("\n") == 1
    assert "Traceback" not in proc.stderr, proc.stderr
