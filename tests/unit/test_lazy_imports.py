"""`import mnmg_sampler` stays light; the GPU path without extras fails with one clear error."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mnmg_sampler.errors import MissingDependencyError
from mnmg_sampler.system.gpu import GPU_EXTRA

ROOT = Path(__file__).resolve().parents[2]
GPU_MODULES = ("cupy", "pylibraft", "numba.cuda")


def _run(code: str, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *flags, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def _imported(importtime_stderr: str) -> list[str]:
    # lines look like "import time:       123 |        456 |   numba.cuda.api"
    names = []
    for line in importtime_stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.append(line.rsplit("|", 1)[1].strip())
    return names


def test_importtime_shows_no_gpu_module():
    proc = _run("import mnmg_sampler", "-X", "importtime")
    assert proc.returncode == 0, proc.stderr
    names = _imported(proc.stderr)
    assert "mnmg_sampler" in names  # the check really read the import log
    bad = [n for n in names if n.split(".")[0] in ("cupy", "pylibraft") or
           n == "numba.cuda" or n.startswith("numba.cuda.")]
    assert bad == []


LIGHT_MODULES = ("mnmg_sampler", "mnmg_sampler.system.gpu", "mnmg_sampler.system.memory")


# Checks of a fresh interpreter, run in turn in one (an interpreter each would cost a torch
# import each): each starts from what the ones before it left, and none of them imports what a
# later one checks is not imported yet (the later one would fail, not pass).
_LIGHT = ("import importlib, json, sys\n"
          "out = {}\n"
          f"for name in {LIGHT_MODULES!r}:\n"
          "    importlib.import_module(name)\n"
          "    out[name] = [m for m in sys.modules if m.split('.')[0] in ('cupy', 'pylibraft')"
          " or m == 'numba.cuda' or m.startswith('numba.cuda.')]\n"
          "print(json.dumps(out))")
_SEEDS = ("import sys, mnmg_sampler as m\n"
          "assert 'mnmg_sampler.loaders.seeds' not in sys.modules\n"
          "from mnmg_sampler.loaders import seeds\n"
          "for n in ('SeedSet', 'AllNodes', 'NodeIds', 'NodeSplit', 'NodeBits',\n"
          "          'random_node_split'):\n"
          "    assert getattr(m, n) is getattr(seeds, n) and n in m.__all__, n\n"
          "s = m.random_node_split(10, [0.6, 0.2, 0.2], seed=1)\n"
          "assert isinstance(s['train'], m.NodeSplit) and len(s['train']) == 6\n"
          "print('ok')")
_TOP_LEVEL = ("import sys, mnmg_sampler as m\n"
              "assert 'mnmg_sampler.graph.partition' not in sys.modules\n"
              "from mnmg_sampler.graph.partition import partition_graph, PartitionPlan\n"
              "from mnmg_sampler.distributed.partition_book import PartitionBook\n"
              "assert m.plan_partitions is partition_graph and m.PartitionPlan is PartitionPlan\n"
              "assert m.PartitionBook is PartitionBook\n"
              "assert m.partition_graph is not partition_graph  # the one-call form (graph.api)\n"
              "print('ok')")
_IN_TURN = """
import contextlib, io, json, sys, traceback
out = {}
for name, code in json.loads(sys.argv[1]):
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            exec(compile(code, name, "exec"), {})
        out[name] = [0, buf.getvalue(), ""]
    except BaseException:
        out[name] = [1, buf.getvalue(), traceback.format_exc()]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def fresh() -> dict[str, tuple[int, str, str]]:
    """``{check: (1 if it raised, its stdout, its traceback)}`` of the checks above."""
    checks = [("light", _LIGHT), ("seeds", _SEEDS), ("top_level", _TOP_LEVEL)]
    proc = subprocess.run([sys.executable, "-c", _IN_TURN, json.dumps(checks)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_sys_modules_after_import(fresh):
    failed, out, err = fresh["light"]
    assert not failed, err
    assert json.loads(out) == {name: [] for name in LIGHT_MODULES}


@pytest.mark.parametrize("loader,module", [("require_cupy", "cupy")])
def test_missing_extra_names_the_pip_extra(monkeypatch, loader, module):
    import mnmg_sampler.system.gpu as gpu

    monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    with pytest.raises(MissingDependencyError) as info:
        getattr(gpu, loader)()
    assert GPU_EXTRA in str(info.value)
    assert "pip install 'mnmg-sampler[gpu]'" in str(info.value)
    assert isinstance(info.value, ImportError)


def test_cuda_kernels_without_a_device_raise_actionable_error(monkeypatch):
    from numba import cuda

    from mnmg_sampler.ops import cuda as ocuda

    monkeypatch.setattr(cuda, "is_available", lambda: False)
    monkeypatch.setattr("mnmg_sampler.ops.cuda.simulator_enabled", lambda: False)
    monkeypatch.setattr("mnmg_sampler.system.gpu.simulator_enabled", lambda: False)
    z = np.zeros(2, np.int64)
    with pytest.raises(MissingDependencyError, match=r"no usable CUDA device.*device='cpu'"):
        ocuda.sample_neighbors_cuda(z, z[:0], None, z[:1], z[:1], z[:1], 0, 0, 3, False)


def test_cuda_kernels_module_restores_row_stack_for_numba_cuda():
    """numba-cuda <= 0.30 overloads ``np.row_stack``, gone in NumPy 2.5: on the GPU machine no
    kernel compiled. Importing the kernels gives it back (a NumPy without it stands in here)."""
    code = ("import numpy as np\n"
            "if hasattr(np, 'row_stack'): del np.row_stack\n"
            "assert not hasattr(np, 'row_stack')\n"
            "import mnmg_sampler.ops.cuda\n"
            "a = np.arange(4).reshape(2, 2)\n"
            "assert np.row_stack is not np.vstack\n"
            "assert (np.row_stack([a, a]) == np.vstack([a, a])).all()\n"
            "print('ok')")
    proc = _run(code, "-W", "error::DeprecationWarning")
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


# Internal modules a page may import on purpose: the PyG integration is its own documented
# subpackage; docs/rng.md reproduces a draw with the CPU kernel itself.
DEEP_IMPORTS_ALLOWED = {"mnmg_sampler.pyg", "mnmg_sampler.ops"}


def _imports(tree) -> list[tuple[str, list[str]]]:
    import ast

    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out.extend((a.name, []) for a in node.names)
    return out


def test_examples_and_docs_import_the_public_api_from_the_top():
    # README: "Everything public imports from `mnmg_sampler`"; the examples show how
    import ast
    import re

    import mnmg_sampler

    sources = {p: p.read_text() for p in sorted((ROOT / "examples").glob("*.py"))}
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        blocks = re.findall(r"^```python[^\n]*\n(.*?)^```", page.read_text(), re.M | re.S)
        sources.update({f"{page.name} block {i}": b for i, b in enumerate(blocks)})
    assert any(str(k).endswith("ddp_graphsage.py") for k in sources)
    for where, text in sources.items():
        for module, names in _imports(ast.parse(text)):
            if not module.startswith("mnmg_sampler"):
                continue
            if module == "mnmg_sampler":
                missing = [n for n in names if n not in mnmg_sampler.__all__]
                assert not missing, f"{where}: {missing} not in mnmg_sampler.__all__"
            elif not isinstance(where, str):  # an example file: the top-level API only
                raise AssertionError(f"{where} imports {module}: use `from mnmg_sampler import`")
            else:
                assert module in DEEP_IMPORTS_ALLOWED, f"{where} imports {module}"


def test_new_top_level_names_are_the_documented_objects(fresh):
    failed, out, err = fresh["top_level"]
    assert not failed and out.strip() == "ok", err


def test_seed_sets_are_exported_lazily(fresh):
    # the seed sets load with mnmg_sampler.loaders.seeds on first use, and are its objects
    failed, out, err = fresh["seeds"]
    assert not failed and out.strip() == "ok", err
