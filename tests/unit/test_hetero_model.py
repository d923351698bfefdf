"""The built-in heterogeneous GraphSAGE on real typed minibatches: shapes, the embedding path of
featureless types, a gradient for every relation, the layers it builds, the embedding budget;
and the generated typed graph it is trained on."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mnmg_sampler.errors import ConfigError, MemoryBudgetError
from mnmg_sampler.graph.typed_generate import PLANTED, typed_sbm_graph, typed_sbm_metadata
from mnmg_sampler.hetero_sampler import sample_hetero
from mnmg_sampler.train.hetero_model import (
    HeteroGraphSAGE,
    check_embedding_budget,
    relations_per_layer,
)

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
    return HeteroGraphSAGE(graph.edge_types, graph.num_nodes_dict(), {"paper": 16}, **args)


def test_logits_one_row_per_target_node(graph, batch):
    model = _model(graph)
    out = model(batch.x, batch.edge_index, batch.n_id)
    assert out.shape == (batch.n_id["paper"].numel(), 3)
    assert out.dtype == torch.float32 and torch.isfinite(out).all()
    assert set(model.embeddings) == {"author", "field"}  # the featureless types
    assert model.embeddings["author"].weight.shape == (graph.num_nodes_of("author"), 6)


def test_every_parameter_gets_a_gradient(graph, batch):
    # every relation's layer and both embedding tables take part in the seeds' logits
    model = _model(graph)
    out = model(batch.x, batch.edge_index, batch.n_id)[: batch.batch_size]
    torch.nn.functional.cross_entropy(out, batch.y["paper"][: batch.batch_size]).backward()
    assert all(batch.edge_index[et].shape[1] > 0 for et in graph.edge_types)
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    rels = {k for layer in model.convs for k in layer}
    assert rels == {"__".join(et) for et in graph.edge_types}


def test_embeddings_are_rows_of_the_batch_ids(graph, batch):
    # moving one author's embedding changes the logits only through that author
    model = _model(graph).eval()
    before = model(batch.x, batch.edge_index, batch.n_id)
    authors = batch.n_id["author"]
    outside = sorted(set(range(graph.num_nodes_of("author"))) - set(authors.tolist()))
    with torch.no_grad():
        model.embeddings["author"].weight[outside[0]] += 10.0
    assert torch.equal(model(batch.x, batch.edge_index, batch.n_id), before)
    with torch.no_grad():
        model.embeddings["author"].weight[int(authors[0])] += 10.0
    assert not torch.equal(model(batch.x, batch.edge_index, batch.n_id), before)
    h = model.inputs(batch.x, batch.n_id)
    assert torch.equal(h["author"], model.embeddings["author"].weight[authors])
    assert torch.equal(h["paper"], batch.x["paper"].float())


def test_sum_over_relations_per_destination(graph, batch):
    # one layer: the paper logits are the sum of each relation's SAGE convolution
    model = _model(graph, layers=1).eval()
    h = model.inputs(batch.x, batch.n_id)
    want = sum(model.convs[0]["__".join(et)]((h[et[0]], h["paper"]), batch.edge_index[et])
               for et in (WRITES, REV_TOPIC, CITES))
    got = model(batch.x, batch.edge_index, batch.n_id)
    torch.testing.assert_close(got, want)
    assert set(model.embeddings) == {"author", "field"}
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
        HeteroGraphSAGE([WRITES], {"author": 3, "paper": 4}, {}, 8, 2, 2, "paper", 4)


def test_embedding_budget_is_a_typed_error():
    with pytest.raises(MemoryBudgetError, match="model.embedding_memory_mb = 1") as e:
        check_embedding_budget({"author": 100_000}, 64, 1.0)
    assert "author: 100,000 rows" in e.value.what
    check_embedding_budget({"author": 1000}, 64, 1.0)  # 1 MB holds 1000 x 64 x 16 bytes
    with pytest.raises(MemoryBudgetError, match="embedding_dim"):
        check_embedding_budget({"author": 2**40}, 2**20, None)  # beyond the machine


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
