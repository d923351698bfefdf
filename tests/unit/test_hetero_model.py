"""The built-in heterogeneous GraphSAGE on real typed minibatches: shapes, the embedding rows of
featureless types (given with the batch, never model parameters), ``model.embeddings: all``
(``lin(x) + emb``) and ``none``, a gradient for every relation, the layers it builds; and the
generated typed graph it is trained on."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mnmg_sampler.errors import ConfigError
from mnmg_sampler.graph.typed_generate import PLANTED, typed_sbm_graph, typed_sbm_metadata
from mnmg_sampler.sampling.sampler import sample_hetero
from mnmg_sampler.train.model import HeteroGraphSAGE, relations_per_layer

WRITES, REV_WRITES = ("author", "writes", "paper"), ("paper", "rev_writes", "author")
TOPIC, REV_TOPIC = ("paper", "has_topic", "field"), ("field", "rev_has_topic", "paper")
CITES = ("paper", "cites", "paper")


@pytest.fixture(scope="module")
def graph():
    return typed_sbm_graph(120, 3, seed=5)


@pytest.fixture(scope="module")
def batch(graph):
    return sample_hetero(graph, ("paper", np.arange(16)), [4, 3], seed=1, key=2)


def _model(graph, **kw):
    torch.manual_seed(0)
    args = dict(hidden=8, out_dim=3, layers=2, target="paper", embedding_dim=6, dropout=0.0)
    args.update(kw)
    return HeteroGraphSAGE(graph.edge_types, {"paper": 16}, **args)


def _rows(graph, batch, types, grad=False):
    """Stand-in for DistEmbedding.fetch: rows of a fixed table per type, one leaf per row."""
    g = torch.Generator().manual_seed(3)
    out = {}
    for t in types:
        table = torch.randn(graph.num_nodes_of(t), 6, generator=g)
        out[t] = table[batch.n_id[t]].requires_grad_(grad)
    return out


def test_logits_one_row_per_target_node_and_no_table_in_the_model(graph, batch):
    model = _model(graph)
    assert model.embedded == ["author", "field"]  # the featureless types
    out = model(batch.x, batch.edge_index, _rows(graph, batch, model.embedded))
    assert out.shape == (batch.n_id["paper"].numel(), 3)
    assert out.dtype == torch.float32 and torch.isfinite(out).all()
    biggest = max(p.shape[0] for p in model.parameters())
    assert biggest < graph.num_nodes_of("author")  # DDP never sees a table
    with pytest.raises(Exception, match="no embedding rows of node type"):
        model(batch.x, batch.edge_index, None)


def test_every_parameter_and_row_gets_a_gradient(graph, batch):
    # every relation's layer and both types' rows take part in the seeds' logits
    model = _model(graph)
    rows = _rows(graph, batch, model.embedded, grad=True)
    out = model(batch.x, batch.edge_index, rows)[: batch.batch_size]
    torch.nn.functional.cross_entropy(out, batch.y["paper"][: batch.batch_size]).backward()
    assert all(batch.edge_index[et].shape[1] > 0 for et in graph.edge_types)
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    for t, r in rows.items():
        assert r.grad is not None and r.grad.abs().sum() > 0, t
    rels = {k for layer in model.convs for k in layer}
    assert rels == {"__".join(et) for et in graph.edge_types}


def test_rows_are_the_inputs_of_featureless_types(graph, batch):
    model = _model(graph).eval()
    rows = _rows(graph, batch, model.embedded)
    before = model(batch.x, batch.edge_index, rows)
    moved = {**rows, "author": rows["author"].clone()}
    moved["author"][0] += 10.0
    assert not torch.equal(model(batch.x, batch.edge_index, moved), before)
    h = model.inputs(batch.x, rows)
    assert torch.equal(h["author"], rows["author"])
    assert torch.equal(h["paper"], batch.x["paper"].float())


def test_all_adds_rows_to_features_and_none_refuses_featureless_types(graph, batch):
    model = _model(graph, embeddings="all").eval()
    assert model.embedded == ["author", "field", "paper"]
    rows = _rows(graph, batch, model.embedded)
    h = model.inputs(batch.x, rows)
    want = model.id_lin["paper"](batch.x["paper"].float()) + rows["paper"]
    torch.testing.assert_close(h["paper"], want)
    assert model(batch.x, batch.edge_index, rows).shape == (batch.n_id["paper"].numel(), 3)
    with pytest.raises(ConfigError, match="model.embeddings: none"):
        _model(graph, embeddings="none")


def test_sum_over_relations_per_destination(graph, batch):
    # one layer: the paper logits are the sum of each relation's SAGE convolution
    model = _model(graph, layers=1).eval()
    rows = _rows(graph, batch, model.embedded)
    h = model.inputs(batch.x, rows)
    want = sum(model.convs[0]["__".join(et)]((h[et[0]], h["paper"]), batch.edge_index[et])
               for et in (WRITES, REV_TOPIC, CITES))
    got = model(batch.x, batch.edge_index, rows)
    torch.testing.assert_close(got, want)
    assert model.embedded == ["author", "field"]
    assert set(model.convs[0]) == {"__".join(et) for et in (WRITES, REV_TOPIC, CITES)}


def test_layers_keep_only_relations_that_reach_the_target():
    ets = [WRITES, REV_WRITES, TOPIC, REV_TOPIC, CITES]
    per = relations_per_layer(ets, "paper", 2)
    assert per[1] == [WRITES, REV_TOPIC, CITES]
    assert per[0] == ets
    # no relation into `author`: `writes` cannot be read after layer 0
    per = relations_per_layer([WRITES, CITES], "paper", 2)
    assert per == [[WRITES, CITES], [CITES]]
    assert relations_per_layer([WRITES], "paper", 2) == [[], []]
    with pytest.raises(ConfigError, match="no chain of 2 relations ends at node type 'paper'"):
        HeteroGraphSAGE([WRITES], {}, 8, 2, 2, "paper", 4)


def test_generated_graph_is_deterministic_and_planted(graph):
    again = typed_sbm_graph(120, 3, seed=5)
    other = typed_sbm_graph(120, 3, seed=6)
    assert np.array_equal(graph.indices, again.indices)
    assert np.array_equal(graph.x["paper"], again.x["paper"])
    assert not np.array_equal(graph.indices, other.indices)
    counts, ets = typed_sbm_metadata(120, 3)
    assert graph.num_nodes_dict() == counts and sorted(graph.edge_types) == sorted(ets)
    assert set(graph.x) == {"paper"} and set(graph.y) == {"paper"}
    # cited papers share the class far more often than chance (1/3)
    big = typed_sbm_graph(3000, 4, seed=0)
    y = big.y["paper"]
    r = big.relation_index(CITES)
    lo, hi = big.rel_offset[big.type_index("paper")], big.rel_offset[big.type_index("paper") + 1]
    per = int(hi - lo)
    seg0 = big.seg_base[big.type_index("paper")]
    off = big.node_type_offset[big.type_index("paper")]
    same = total = 0
    for p in range(0, 3000, 7):
        s = seg0 + p * per + (r - lo)
        nb = big.indices[big.indptr[s]:big.indptr[s + 1]] - off
        same += int((y[nb] == y[p]).sum())
        total += nb.size
    frac = same / total
    assert PLANTED["cites"] < frac < 0.8  # planted 0.6 + (0.4 / 4) by chance
