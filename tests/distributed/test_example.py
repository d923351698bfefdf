"""examples/ddp_graphsage.py runs under torchrun with 2 CPU ranks and learns Cora."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TORCHRUN = Path(sys.executable).with_name("torchrun")


def test_ddp_graphsage_example_runs_and_learns(tmp_path):
    cmd = [str(TORCHRUN), "--nproc-per-node", "2", "--rdzv-backend", "c10d",
           "--rdzv-endpoint", "localhost:0", str(ROOT / "examples" / "ddp_graphsage.py"),
           "--epochs", "2", "--parts-dir", str(tmp_path / "parts")]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    try:
        proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=300)
    except subprocess.TimeoutExpired as e:  # a hang: show what the ranks had printed
        raise AssertionError(f"example did not finish in 300 s\nstdout:\n{e.stdout}\n"
                             f"stderr:\n{e.stderr}") from None
    out = proc.stdout
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{out}\nstderr:\n{proc.stderr}"
    assert len(re.findall(r"^epoch +\d+ +loss [0-9.]+ +val_acc [0-9.]+", out, re.M)) == 2, out
    m = re.search(r"^final +val_acc ([0-9.]+) +test_acc ([0-9.]+)", out, re.M)
    assert m, out
    # Cora has 7 classes, the largest ~30% of nodes: a working loop is far above that
    assert float(m.group(1)) > 0.5 and float(m.group(2)) > 0.5, out
    # rank 0 partitioned Cora into one part per rank, once, for later runs to reuse
    assert (tmp_path / "parts" / "cora-2parts" / "manifest.json").is_file()
