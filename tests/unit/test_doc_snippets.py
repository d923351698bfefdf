"""Every Python snippet in README.md and docs/*.md runs as written, on the embedded Cora.

The blocks of one page run in order in one fresh interpreter, in a temporary directory, sharing
their names as a reader would. A hidden preamble before each block gives the names the prose
says are "yours" (``rank``, ``world``, ``train_ids``, ``epochs``, ``model``...), a world of one
gloo rank (``init_distributed``), a one-part partition of Cora in ``parts`` and, when a block
uses one without making it, a ``service`` and a sampled ``batch``. Everything a block starts is
shut down after it.

A block that quotes source code rather than runs it is marked on the line before its fence with
``<!-- snippet: excerpt of FILE [FILE...] -->``; each of its code lines must then occur in those
files, so the quote stays true.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
_BLOCK = re.compile(r"(?:^(<!--[^\n]*-->)\n)?^```python[^\n]*\n(.*?)^```", re.M | re.S)
_EXCERPT = re.compile(r"<!--\s*snippet:\s*excerpt of\s+(.*?)\s*-->")

PREAMBLE = r'''
import os, re
import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from pathlib import Path
from mnmg_sampler import (DistNeighborLoader, GraphSAGE, SamplingService, init_distributed,
                          load_graph, load_partition, partition)
from mnmg_sampler.system.runtime import free_port

os.environ["MASTER_ADDR"] = "127.0.0.1"
os.environ["MASTER_PORT"] = str(free_port())
for _k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
    os.environ.pop(_k, None)
init_distributed("gloo", "cpu")
rank, world, world_size = 0, 1, 1
epochs, epoch, batch_no, seed, num_classes = 1, 0, 0, 0, 7
if not Path("parts").exists():
    partition(load_graph("cora"), 1, "random", "parts", seed=0)
part = load_partition("parts", 0, 1)
train_ids = np.arange(0, part.num_nodes, 4)
val_ids = np.arange(1, part.num_nodes, 9)
input_nodes, num_neighbors, batch_size = train_ids, [10, 5], 128
seeds = np.arange(16)
ids = torch.tensor([0, 5, part.num_nodes - 1])
model = GraphSAGE(part.x.shape[1], 16, num_classes, layers=2)
if _NEEDS_SERVICE or _NEEDS_BATCH:
    service = SamplingService(part, seed=0)
if _NEEDS_BATCH:
    batch = next(iter(DistNeighborLoader(service, train_ids[:64], [5, 5], batch_size=64)))
'''

DRIVER = r'''
import json, os, sys, traceback
pages = json.load(open(sys.argv[1]))
root = os.getcwd()
failed = 0
for page, blocks in pages:
    os.chdir(root)
    os.makedirs(page, exist_ok=True)
    os.chdir(page)  # each page in its own directory, with its own names
    carry = {}
    for name, code, needs_service, needs_batch, preamble in blocks:
        ns = dict(carry)
        ns["_NEEDS_SERVICE"], ns["_NEEDS_BATCH"] = needs_service, needs_batch
        try:
            exec(compile(preamble, "<preamble>", "exec"), ns)
            exec(compile(code, name, "exec"), ns)
        except BaseException:
            failed += 1
            print(f"FAILED {name}\n{traceback.format_exc()}", flush=True)
            break
        finally:
            from mnmg_sampler.distributed.service import SamplingService
            for v in list(ns.values()):
                if isinstance(v, SamplingService) and not v._closed:
                    v.shutdown()
            import torch.distributed as dist
            if dist.is_initialized():
                dist.destroy_process_group()
        carry = {k: v for k, v in ns.items() if not k.startswith("_")}
        print("ran", name, flush=True)
sys.exit(1 if failed else 0)
'''


def _blocks(page: Path) -> list[tuple[str, str, str | None]]:
    text = page.read_text(encoding="utf-8")
    out = []
    for m in _BLOCK.finditer(text):
        line = text.count("\n", 0, m.start(2)) + 1
        out.append((f"{page.relative_to(REPO)}:{line}", m.group(2), m.group(1)))
    return out


def _uses_unassigned(code: str, name: str) -> bool:
    used = re.search(rf"\b{name}\b", code) is not None
    made = re.search(rf"^\s*(?:for\s+)?{name}\s*(?:=|in\b)", code, re.M) is not None
    return used and not made


def _runnable(page: Path) -> list[tuple[str, str]]:
    return [(n, c) for n, c, marker in _blocks(page)
            if not (marker and _EXCERPT.search(marker))]


RUN_PAGES = [p for p in PAGES if _runnable(p)]


def test_pages_have_snippets():
    names = {p.name for p in RUN_PAGES}
    assert {"README.md", "api.md", "quickstart.md", "formats.md"} <= names, names


def test_snippets_run(tmp_path):
    # One interpreter for all pages (torch and the kernels load once); each page in its own
    # directory and namespace, and a failure names the page, the line and the traceback.
    pages = [(page.stem, [(name, code, _uses_unassigned(code, "service"),
                           _uses_unassigned(code, "batch"), PREAMBLE)
                          for name, code in _runnable(page)]) for page in RUN_PAGES]
    spec = tmp_path / "pages.json"
    spec.write_text(json.dumps(pages))
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1",
           "NUMBA_NUM_THREADS": "1", "HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, str(driver), str(spec)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=900)
    failures = [chunk for chunk in proc.stdout.split("FAILED ")[1:]]
    assert proc.returncode == 0 and not failures, "\n".join(failures) + proc.stderr[-3000:]
    ran = re.findall(r"^ran (\S+)$", proc.stdout, re.M)
    assert ran == [name for _, blocks in pages for name, *_ in blocks]


def test_excerpts_are_in_the_source():
    found = 0
    for page in PAGES:
        for name, code, marker in _blocks(page):
            m = _EXCERPT.search(marker or "")
            if not m:
                continue
            found += 1
            source = "\n".join((REPO / f).read_text() for f in m.group(1).split())
            lines = {ln.split("  #")[0].strip() for ln in source.splitlines()}
            for ln in code.splitlines():
                code_part = ln.split("  #")[0].strip()
                if code_part and not code_part.startswith("#"):
                    assert code_part in lines, f"{name}: {code_part!r} not in {m.group(1)}"
    assert found >= 1
