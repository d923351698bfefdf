"""MiniBatch: exact equality, device moves, and the PyG conversion."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from mnmg_sampler.errors import SamplingInputError
from mnmg_sampler.graph.csr import CSRGraph
from mnmg_sampler.sampling.sampler import sample


def _batch():
    rng = np.random.default_rng(1)
    g = CSRGraph.from_edges(rng.integers(0, 50, 300), rng.integers(0, 50, 300), 50)
    b = sample(g, np.array([3, 7, 9]), [4, 2], seed=2, key=5)
    b.x = torch.arange(b.num_nodes * 2, dtype=torch.float32).reshape(-1, 2)
    b.y = torch.arange(b.num_nodes) % 3
    return b


def test_equal_and_to():
    a, b = _batch(), _batch()
    assert a.equal(b)
    b.edge_index = b.edge_index.clone()
    b.edge_index[0, 0] += 1
    assert not a.equal(b)
    c = a.to("cpu")
    assert c.equal(a) and c is not a


def test_to_pyg_keeps_every_field():
    pytest.importorskip("torch_geometric")
    b = _batch()
    d = b.to_pyg()
    assert torch.equal(d.edge_index, b.edge_index) and torch.equal(d.n_id, b.n_id)
    assert torch.equal(d.x, b.x) and torch.equal(d.y, b.y) and torch.equal(d.e_id, b.e_id)
    assert d.batch_size == b.batch_size == 3 and d.num_nodes == b.num_nodes
    assert list(d.num_sampled_nodes) == b.num_sampled_nodes
    assert int(d.edge_index.max()) < d.num_nodes


def test_to_pyg_is_a_data_a_pyg_model_accepts():
    pytest.importorskip("torch_geometric")
    from torch_geometric.data import Data
    from torch_geometric.nn import GraphSAGE

    d = _batch().to_pyg()
    assert isinstance(d, Data)
    out = GraphSAGE(2, 8, num_layers=2, out_channels=3)(d.x, d.edge_index)
    assert out.shape == (d.num_nodes, 3)


def test_repr_shows_shapes_not_contents():
    b = _batch()
    b.meta["part"] = 1
    r = repr(b)
    e = b.edge_index.shape[1]
    assert r.startswith(f"MiniBatch(n_id=[{b.num_nodes}], edge_index=[2, {e}], e_id=[{e}]")
    assert f"x=[{b.num_nodes}, 2]" in r and f"y=[{b.num_nodes}]" in r
    assert f"num_sampled_nodes={b.num_sampled_nodes}" in r and "meta={part}" in r
    assert "tensor(" not in r and len(r) < 300
    b.x = b.y = None
    assert ", x=" not in repr(b) and ", y=" not in repr(b)


def test_one_type_typed_batch_reads_as_homogeneous():
    """One batch type (issue 30): a one-type typed batch is the homogeneous batch of the same
    graph (the same draws), and a PyG ``Data`` with edge time, sampled in time through the typed
    path, gives a ``Data`` from ``to_homogeneous().to_pyg()`` with ``batch`` and ``seed_time``."""
    from mnmg_sampler.graph.temporal import load_temporal_graph
    from mnmg_sampler.graph.typed import typed_graph
    from mnmg_sampler.sampling.sampler import sample_hetero

    rng = np.random.default_rng(1)
    src, dst = rng.integers(0, 50, 300), rng.integers(0, 50, 300)
    seeds = np.array([3, 7, 9])
    homo = sample(CSRGraph.from_edges(src, dst, 50), seeds, [4, 2], seed=2, key=5)
    et = ("node", "to", "node")
    one = typed_graph({"num_nodes": {"node": 50}, "edge_index": {et: np.stack([src, dst])}})
    typed = sample_hetero(one, ("node", seeds), [4, 2], seed=2, key=5)
    flat = typed.to_homogeneous()
    assert typed.typed and not flat.typed and flat.input_type is None and flat.x is None
    moved = typed.to("cpu")  # dicts of tensors move too
    assert moved.equal(typed) and moved.n_id is not typed.n_id
    assert homo.e_id.numel() > 0 and flat.equal(homo)
    with pytest.raises(SamplingInputError, match="one-type"):
        replace(typed, n_id={"a": homo.n_id, "b": homo.n_id}).to_homogeneous()
    pyg = pytest.importorskip("torch_geometric.data")
    t = rng.integers(0, 100, 300)
    data = pyg.Data(edge_index=torch.from_numpy(np.stack([src, dst])), num_nodes=50,
                    time=torch.from_numpy(t))
    b = sample_hetero(load_temporal_graph(data), ("node", seeds), [4, 2], seed=2, key=5,
                      time_attr="time", input_time=[30, 60, 90])
    d = b.to_homogeneous().to_pyg()
    assert isinstance(d, pyg.Data) and d.seed_time.tolist() == [30, 60, 90]
    assert torch.equal(d.batch, b.batch["node"]) and d.batch.numel() == d.num_nodes
    row, col = d.edge_index
    assert row.numel() > 0
    assert torch.equal(d.n_id[row], torch.from_numpy(src)[d.e_id])  # an edge of the Data
    assert torch.equal(d.n_id[col], torch.from_numpy(dst)[d.e_id])
    assert torch.equal(d.batch[row], d.batch[col])  # trees stay disjoint
    assert bool((torch.from_numpy(t)[d.e_id] <= d.seed_time[d.batch[col]]).all())
