"""Runs under NUMBA_ENABLE_CUDASIM=1 (started by test_selfcheck_sim.py): ``mnmg-sampler
selfcheck`` twice in this interpreter, clean and with a wrong CUDA result injected (the injection
is read when a line runs).

Prints one JSON document: ``{"clean": [exit code, checks], "injected": [...], "table": what the
two runs printed}``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import tempfile
from pathlib import Path

from mnmg_sampler.commands.cli import _main
from mnmg_sampler.commands.selfcheck.result import INJECT_ENV

# a world of one, nothing injected unless asked: put back afterwards for the next worker
CLEARED = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", INJECT_ENV)


def main() -> None:
    saved = {k: os.environ.pop(k) for k in CLEARED if k in os.environ}
    out, table = {}, io.StringIO()
    try:
        with tempfile.TemporaryDirectory() as d, contextlib.redirect_stdout(table):
            for name, inject in (("clean", None),
                                 ("injected", "kernel.cuda.uniform,kernel.cuda.typed")):
                if inject:
                    os.environ[INJECT_ENV] = inject
                code = _main(["selfcheck", "--repeats", "1", "--json", f"{d}/{name}.json"])
                out[name] = [code, json.loads(Path(d, f"{name}.json").read_text())["checks"]]
    finally:
        os.environ.pop(INJECT_ENV, None)
        os.environ.update(saved)
    out["table"] = table.getvalue()
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
