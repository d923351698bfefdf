"""The package's imports run one way (STYLE.md, issue 30): no module imports, directly or through
others, a module that imports it back. Every ``import`` counts, the lazy ones inside functions
too (a lazy import hides a circle from the interpreter, not from the design)."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "mnmg_sampler"


def _modules() -> dict[str, Path]:
    out = {}
    for p in PKG.rglob("*.py"):
        parts = p.relative_to(PKG.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def _targets(mod: str, is_pkg: bool, node, mods) -> list[str]:
    """The package modules one import statement of ``mod`` names."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        if node.module == "__future__":
            return []
        base = mod.split(".")[: len(mod.split(".")) - (0 if is_pkg else 1)]
        if node.level:
            base = base[: len(base) - (node.level - 1)]
            src = ".".join(base + ([node.module] if node.module else []))
        else:
            src = node.module or ""
        names = [f"{src}.{a.name}" if f"{src}.{a.name}" in mods else src for a in node.names]
    out = []
    for n in names:
        while n not in mods and "." in n:
            n = n.rsplit(".", 1)[0]
        # importing a module runs its packages' __init__s: not an edge back to them
        if n in mods and n != mod and not mod.startswith(n + "."):
            out.append(n)
    return out


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    graph = {}
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        graph[mod] = {t for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                      for t in _targets(mod, path.name == "__init__.py", node, mods)}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_circles_finds_a_planted_circle():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert circles(g) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_package_has_no_import_circle():
    graph = import_graph()
    assert len(graph) > 100 and "mnmg_sampler.graph.typed" in graph
    assert "mnmg_sampler.graph.typed" in graph["mnmg_sampler.graph.temporal"]  # edges are read
    assert circles(graph) == []


def test_graph_knows_no_job():
    """The graph layer (readers, partitions, typed graphs) imports nothing of the job layers:
    config, train, commands, bench, distributed, pyg (DESIGN.md's nevers)."""
    above = ("config", "train", "commands", "bench", "distributed", "pyg")
    bad = {m: sorted(d for d in deps if d.split(".")[1] in above)
           for m, deps in import_graph().items() if m.startswith("mnmg_sampler.graph")}
    assert {m: d for m, d in bad.items() if d} == {}
