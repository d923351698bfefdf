"""Imports run one way: graph -> ops -> sampling -> distributed -> loaders -> train/commands.

Every ``import`` and ``from ... import`` of the package is read from the source (those inside
functions too, since a lazy import is still a dependency); a module may import its own layer or
lower ones only. ``rng``, ``errors`` and ``system.host_malloc`` sit below every layer and import
nothing of the package.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "mnmg_sampler"
LAYERS = {"graph": 0, "ops": 1, "sampling": 2, "distributed": 3, "loaders": 4, "pyg": 5,
          "train": 5, "commands": 5}
LEAVES = ("rng", "errors", "system.host_malloc")


def _modules() -> dict[str, Path]:
    out = {}
    for p in sorted(PKG.rglob("*.py")):
        parts = p.relative_to(PKG.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def _imports(name: str, path: Path) -> list[tuple[str, int]]:
    """Absolute names of the package's modules (or their members) ``name`` imports."""
    pkg = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(pkg[:len(pkg) - node.level + 1] + [node.module or ""]) \
                if node.level else node.module or ""
            base = base.rstrip(".")
            found += [(f"{base}.{a.name}", node.lineno) for a in node.names]
    return [(t, line) for t, line in found if t.startswith("mnmg_sampler")]


def _layer(name: str) -> int | None:
    parts = name.split(".")
    return LAYERS.get(parts[1]) if len(parts) > 1 else None


def test_the_scanner_sees_relative_and_lazy_imports():
    mods = _modules()
    got = {t for t, _ in _imports("mnmg_sampler.graph.rmat", mods["mnmg_sampler.graph.rmat"])}
    assert "mnmg_sampler.graph.generate.rmat_levels" in got  # inside a function
    assert "mnmg_sampler.rng._mix64_int" in got


@pytest.mark.parametrize("name", sorted(n for n in _modules() if _layer(n) is not None))
def test_no_module_imports_a_higher_layer(name):
    mine = _layer(name)
    up = [f"line {line}: {t}" for t, line in _imports(name, _modules()[name])
          if (_layer(t) or 0) > mine]
    assert not up, f"{name} (layer {mine}) imports from higher layers: {up}"


@pytest.mark.parametrize("leaf", LEAVES)
def test_leaves_import_nothing_of_the_package(leaf):
    name = f"mnmg_sampler.{leaf}"
    assert _imports(name, _modules()[name]) == []
