"""GraphSAGE model: layer math, shapes, trimming, learning, and parity with PyG's SAGEConv."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mnmg_sampler.errors import ConfigError, MissingDependencyError, SamplingInputError
from mnmg_sampler.graph.csr import CSRGraph
from mnmg_sampler.sampling.sampler import sample
from mnmg_sampler.train.model import (
    GraphSAGE,
    SAGELayer,
    accuracy,
    num_correct,
    pyg_available,
)


def _tiny():
    # 4 nodes; edges src -> dst: 1->0, 2->0, 3->1, 0->1, 0->1 (a repeated edge counts twice)
    x = torch.tensor([[1.0, 0.0], [0.0, 2.0], [4.0, 6.0], [-2.0, 1.0]])
    ei = torch.tensor([[1, 2, 3, 0, 0], [0, 0, 1, 1, 1]])
    return x, ei


@pytest.mark.parametrize("aggr,expect", [
    # node 0 <- {1, 2}; node 1 <- {3, 0, 0}; nodes 2 and 3 have no incoming edge -> 0
    ("mean", [[2.0, 4.0], [0.0, 1.0 / 3.0], [0.0, 0.0], [0.0, 0.0]]),
    ("sum", [[4.0, 8.0], [0.0, 1.0], [0.0, 0.0], [0.0, 0.0]]),
    ("max", [[4.0, 6.0], [1.0, 1.0], [0.0, 0.0], [0.0, 0.0]]),
])
def test_sage_layer_equals_hand_computed_aggregation(aggr, expect):
    x, ei = _tiny()
    layer = SAGELayer(2, 3, aggr)
    agg = torch.tensor(expect)
    assert torch.allclose(layer.aggregate(x, ei), agg)
    with torch.no_grad():
        layer.lin_l.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))
        layer.lin_l.bias.copy_(torch.tensor([0.5, -0.5, 0.0]))
        layer.lin_r.weight.copy_(torch.tensor([[2.0, 0.0], [0.0, 0.0], [0.0, -1.0]]))
    want = agg @ layer.lin_l.weight.T + layer.lin_l.bias + x @ layer.lin_r.weight.T
    assert torch.allclose(layer(x, ei), want)
    # parameter names match PyG's SAGEConv, so checkpoints move between backends
    assert sorted(layer.state_dict()) == ["lin_l.bias", "lin_l.weight", "lin_r.weight"]


def test_sage_layer_gradients_flow_to_messages():
    x, ei = _tiny()
    x.requires_grad_(True)
    SAGELayer(2, 3).forward(x, ei).sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    assert x.grad[3].abs().sum() > 0  # node 3 only reaches the output as a message


@pytest.mark.parametrize("layers", [1, 2, 3])
def test_graphsage_shape_and_backend(layers):
    x, ei = _tiny()
    m = GraphSAGE(2, 8, 5, layers, use_pyg=False)
    assert m.backend == "builtin" and m.num_layers == layers
    m.eval()
    out = m(x, ei)
    assert out.shape == (4, 5)
    y = out.argmax(-1)
    assert accuracy(out, y) == 1.0 and accuracy(out, (y + 1) % 5) == 0.0

    def changed(node: int, row: int) -> bool:
        """Does perturbing the features of ``node`` change the output of ``row``?"""
        x2 = x.clone()
        x2[node] += 10.0
        return not torch.allclose(m(x2, ei)[row], out[row])

    # receptive field: node 0 <- {1, 2} at 1 hop, <- {3, 0} through node 1 at 2 hops; node 2
    # has no in-edge, so only its own features reach it
    assert changed(0, 0) and changed(1, 0) and changed(2, 0)
    assert changed(3, 0) == (layers >= 2)
    assert not changed(0, 2) and not changed(3, 2) and changed(2, 2)


def test_graphsage_rejects_bad_arguments():
    with pytest.raises(ConfigError, match="model.aggr"):
        GraphSAGE(2, 8, 5, 2, aggr="lstm", use_pyg=False)
    with pytest.raises(ConfigError, match="model.layers"):
        GraphSAGE(2, 8, 5, 0, use_pyg=False)
    with pytest.raises(ConfigError, match="model.dropout"):
        GraphSAGE(2, 8, 5, 2, dropout=1.0, use_pyg=False)
    if not pyg_available():
        with pytest.raises(MissingDependencyError):
            GraphSAGE(2, 8, 5, 2, use_pyg=True)
    else:
        assert GraphSAGE(2, 8, 5, 2).backend == "pyg"


def test_accuracy():
    logits = torch.tensor([[2.0, 0.0], [0.0, 1.0], [3.0, 1.0], [0.0, 5.0]])
    y = torch.tensor([0, 1, 1, 0])
    assert num_correct(logits, y) == 2 and accuracy(logits, y) == 0.5
    assert accuracy(torch.empty(0, 2), torch.empty(0, dtype=torch.long)) == 0.0
    with pytest.raises(SamplingInputError):
        accuracy(logits, y[:3])


def _graph(n=300, m=2400, seed=1):
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    x = rng.standard_normal((n, 6)).astype(np.float32)
    return CSRGraph.from_edges(src, dst, n, name="t", x=x)


@pytest.mark.parametrize("hops,layers", [([5, 3], 2), ([4, 3, 2], 3), ([4, 3, 2], 2),
                                         ([6], 2), ([-1, 2], 2)])
@pytest.mark.parametrize("use_pyg", [False, True])
def test_trimmed_equals_untrimmed_for_seeds(hops, layers, use_pyg):
    if use_pyg and not pyg_available():
        pytest.skip("torch_geometric not installed")
    g = _graph()
    seeds = np.array([3, 17, 40, 41, 99, 250])
    b = sample(g, seeds, hops, seed=7, key=3)
    x = torch.from_numpy(np.asarray(g.x)[b.n_id.numpy()])
    torch.manual_seed(0)
    m = GraphSAGE(6, 16, 4, layers, use_pyg=use_pyg).eval()
    full = m(x, b.edge_index)
    trimmed = m(x, b.edge_index, b.num_sampled_nodes, b.num_sampled_edges)
    assert full.shape[0] == b.num_nodes
    assert b.batch_size <= trimmed.shape[0] <= full.shape[0]
    if len(hops) >= layers and b.num_sampled_nodes[-1] > 0:
        assert trimmed.shape[0] < full.shape[0]  # trimming did drop rows
    torch.testing.assert_close(trimmed[: b.batch_size], full[: b.batch_size], rtol=1e-5,
                               atol=1e-6)


def test_trim_rejects_counts_of_another_batch():
    g = _graph()
    b = sample(g, np.array([1, 2, 3]), [3, 3], seed=1)
    x = torch.from_numpy(np.asarray(g.x)[b.n_id.numpy()])
    m = GraphSAGE(6, 8, 3, 2, use_pyg=False)
    with pytest.raises(SamplingInputError, match="num_sampled_nodes"):
        m(x, b.edge_index, [b.num_sampled_nodes[0] + 1, *b.num_sampled_nodes[1:]],
          b.num_sampled_edges)


def test_loss_decreases_on_a_tiny_problem():
    # label = whether the mean of a node's in-neighbors' first feature is positive: needs the
    # aggregation, not only the node's own features
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    n, m = 200, 1600
    ei = torch.from_numpy(np.stack([rng.integers(0, n, m), rng.integers(0, n, m)]))
    x = torch.randn(n, 4)
    agg = SAGELayer(4, 1).aggregate(x, ei)
    y = (agg[:, 0] > 0).long()
    model = GraphSAGE(4, 16, 2, 2, dropout=0.0, use_pyg=False)
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    losses = []
    for _ in range(40):
        loss = F.cross_entropy(model(x, ei), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.6 * losses[0]
    assert accuracy(model(x, ei), y) > 0.8


def test_pyg_and_builtin_agree_when_pyg_is_installed():
    if not pyg_available():
        pytest.skip("torch_geometric not installed")
    x, ei = _tiny()
    for aggr in ("mean", "sum", "max"):
        a = GraphSAGE(2, 8, 3, 2, aggr=aggr, use_pyg=True).eval()
        b = GraphSAGE(2, 8, 3, 2, aggr=aggr, use_pyg=False).eval()
        b.load_state_dict(a.state_dict())
        torch.testing.assert_close(a(x, ei), b(x, ei))


def test_one_type_is_the_one_relation_case_of_the_typed_model():
    # the homogeneous model is the typed one with one node type and one relation: the same
    # parameters give the same logits, and learned rows enter as lin(x) + emb (embeddings=all)
    from mnmg_sampler.graph.typed import EDGE_TYPE, NODE_TYPE

    x, ei = _tiny()
    torch.manual_seed(0)
    one = GraphSAGE(2, 8, 3, 2, dropout=0.0, use_pyg=False).eval()
    typed = GraphSAGE({NODE_TYPE: 2}, 8, 3, 2, dropout=0.0, use_pyg=False,
                      edge_types=[EDGE_TYPE], target=NODE_TYPE).eval()
    typed.load_state_dict(one.state_dict())
    torch.testing.assert_close(one(x, ei), typed({NODE_TYPE: x}, {EDGE_TYPE: ei}))
    rows = torch.randn(4, 5)
    m = GraphSAGE(2, 8, 3, 2, dropout=0.0, use_pyg=False, embedding_dim=5,
                  embeddings="all").eval()
    assert m.embedded == [NODE_TYPE]
    h = m.inputs({NODE_TYPE: x}, {NODE_TYPE: rows})[NODE_TYPE]
    torch.testing.assert_close(h, m.id_lin[NODE_TYPE](x) + rows)
    assert m(x, ei, rows).shape == (4, 3)
    with pytest.raises(SamplingInputError, match="no embedding rows"):
        m(x, ei)
