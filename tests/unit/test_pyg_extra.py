"""Without torch_geometric, the PyG paths fail with one clear error naming the extra."""

from __future__ import annotations

import importlib
import sys

import pytest

from mnmg_sampler import MissingDependencyError


def test_pyg_package_without_torch_geometric(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_geometric", None)
    for name in [m for m in sys.modules if m.startswith("mnmg_sampler.pyg")]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(MissingDependencyError, match=r"pip install 'mnmg-sampler\[pyg\]'"):
        importlib.import_module("mnmg_sampler.pyg")


def test_to_pyg_without_torch_geometric(monkeypatch):
    import numpy as np

    from mnmg_sampler import CSRGraph, sample

    g = CSRGraph.from_edges(np.array([0, 1]), np.array([1, 0]), 2)
    b = sample(g, np.array([0]), [1])
    monkeypatch.setitem(sys.modules, "torch_geometric", None)
    monkeypatch.setitem(sys.modules, "torch_geometric.data", None)
    with pytest.raises(MissingDependencyError, match="pyg"):
        b.to_pyg()
