"""The two job modules share their common steps through train/setup.py: no import circle in
train/ (the node job hands `task: link` to the link job; the link job never imports it)."""

from __future__ import annotations

import ast
from pathlib import Path

TRAIN = Path(__file__).resolve().parents[2] / "mnmg_sampler" / "train"


def _train_imports(path: Path) -> set[str]:
    """Sibling modules of mnmg_sampler.train that ``path`` imports, at the top or lazily."""
    return {node.module for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module}


def test_no_import_circle_inside_train():
    graph = {p.stem: _train_imports(p) for p in TRAIN.glob("*.py")}
    assert "job" not in graph["link"] and {"job", "link"}.isdisjoint(graph["setup"])

    def reach(a: str, seen: set[str]) -> set[str]:
        for b in graph.get(a, ()):
            if b not in seen:
                seen.add(b)
                reach(b, seen)
        return seen

    assert [m for m in graph if m in reach(m, set())] == []
