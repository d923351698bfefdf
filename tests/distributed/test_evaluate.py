"""Layer-wise full-neighbor inference on real ranks equals the whole-graph forward pass, and the
memory budget fails every rank before allocating."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mnmg_sampler.errors import MemoryBudgetError
from mnmg_sampler.graph.partition import partition
from mnmg_sampler.train.model import GraphSAGE, pyg_available

from .common import small_graph
from .harness import RankFailure, run_ranks


def _model(aggr: str, use_pyg: bool) -> GraphSAGE:
    torch.manual_seed(0)
    return GraphSAGE(5, 16, 7, 3, dropout=0.5, aggr=aggr, use_pyg=use_pyg)


def _rank(rank, world, path, aggr, use_pyg, batch):
    from mnmg_sampler.graph.partition_io import load_partition
    from mnmg_sampler.train.evaluate import evaluate_layerwise, layerwise_logits

    part = load_partition(path, rank, world)
    model = _model(aggr, use_pyg).train()  # eval mode is set (and restored) by the function
    logits = layerwise_logits(model, part, torch.device("cpu"), batch)
    assert model.training
    rng = np.random.default_rng(0)
    splits = {"val": np.sort(rng.choice(part.num_nodes, 60, replace=False)),
              "none": np.zeros(0, np.int64)}
    res = evaluate_layerwise(model, part, splits, torch.device("cpu"), batch)
    return np.asarray(part.orig_ids), logits.numpy(), res


def _reference(g, aggr, use_pyg):
    model = _model(aggr, use_pyg).eval()
    row = np.repeat(np.arange(g.num_nodes), g.degrees())
    ei = torch.from_numpy(np.stack([g.indices, row]))
    with torch.no_grad():
        return model(torch.from_numpy(g.x), ei).numpy()


LAYERWISE = [(1, "range", "mean", False, 1000), (2, "random", "mean", False, 17),
             (3, "hash", "max", False, 40), (2, "random", "sum", True, 23)]


def _rank_each(rank, world, jobs):
    """``_rank`` for each job's arguments in turn, on the same ranks (one spawn for all)."""
    return [_rank(rank, world, *job) for job in jobs]


@pytest.fixture(scope="module")
def layerwise_runs(tmp_path_factory) -> dict:
    """Results by rank of each case of ``LAYERWISE`` (PyG's only when installed): one spawn per
    world size."""
    g = small_graph()
    tmp = tmp_path_factory.mktemp("layerwise")
    cases = [c for c in LAYERWISE if not c[3] or pyg_available()]
    out = {}
    for world in sorted({c[0] for c in cases}):
        mine = [c for c in cases if c[0] == world]
        dirs = {m: str(partition(g, world, m, tmp / f"p{world}{m}", seed=2))
                for m in {c[1] for c in mine}}
        jobs = [(dirs[method], aggr, use_pyg, batch) for _, method, aggr, use_pyg, batch in mine]
        by_rank = run_ranks(_rank_each, world, jobs, timeout=240)
        for i, case in enumerate(mine):
            out[case] = [r[i] for r in by_rank]
    return out


@pytest.mark.parametrize("world,method,aggr,use_pyg,batch", LAYERWISE)
def test_layerwise_equals_whole_graph_forward(layerwise_runs, world, method, aggr, use_pyg,
                                              batch):
    if use_pyg and not pyg_available():
        pytest.skip("torch_geometric is not installed")
    g = small_graph()
    ref = _reference(g, aggr, use_pyg)
    out = layerwise_runs[world, method, aggr, use_pyg, batch]
    seen = np.concatenate([o for o, _, _ in out])
    assert np.array_equal(np.sort(seen), np.arange(g.num_nodes))
    for orig, logits, _ in out:
        np.testing.assert_allclose(logits, ref[orig], rtol=1e-5, atol=1e-5)
    rng = np.random.default_rng(0)
    val = np.sort(rng.choice(g.num_nodes, 60, replace=False))
    acc = float((ref[val].argmax(-1) == g.y[val]).mean())
    loss = float(torch.nn.functional.cross_entropy(torch.from_numpy(ref[val]),
                                                   torch.from_numpy(g.y[val])))
    for _, _, res in out:  # every rank gets the global figures
        assert res["val"][0] == pytest.approx(acc) and res["val"][1] == pytest.approx(loss, 1e-5)
        assert res["none"] == (0.0, 0.0)


def _budget(rank, world):
    from mnmg_sampler.train.evaluate import check_budget

    check_budget(10 * 2**20, 100, "nothing", "fix")  # under budget everywhere: no error
    check_budget((rank + 1) * 80 * 2**20, 100, "layer-wise evaluation", "raise it")


def test_budget_overflow_raises_on_every_rank():
    with pytest.raises(RankFailure) as e:
        run_ranks(_budget, 2, timeout=120)
    assert set(e.value.errors) == {0, 1}
    for err, _ in e.value.errors.values():
        assert isinstance(err, MemoryBudgetError) and "160 MB" in str(err)


def _renumbered_rank(rank, world, path):
    from mnmg_sampler.graph.partition_io import load_partition
    from mnmg_sampler.loaders.seeds import NodeSplit
    from mnmg_sampler.train.evaluate import evaluate_layerwise

    part = load_partition(path, rank, world)
    split = NodeSplit(int(part.num_nodes), 4, 0, 60)  # a random split: the graph's ids
    as_input = np.sort(np.asarray(part.node_ids)[split.ids(np.arange(60))])  # the input's ids
    return evaluate_layerwise(_model("mean", False), part, {"set": split, "ids": as_input},
                              torch.device("cpu"), 32)


def test_layerwise_splits_of_a_renumbered_graph(tmp_path):
    # a seed set speaks the graph's ids 0..N-1, an id array the input's: the same nodes either way
    from mnmg_sampler.loaders.seeds import NodeSplit

    g = small_graph()
    g.node_ids = np.sort(np.random.default_rng(5).choice(2**62, g.num_nodes, replace=False))
    path = partition(g, 2, "random", tmp_path / "p", seed=2)
    val = NodeSplit(g.num_nodes, 4, 0, 60).ids(np.arange(60))
    ref = _reference(g, "mean", False)
    acc = float((ref[val].argmax(-1) == g.y[val]).mean())
    for res in run_ranks(_renumbered_rank, 2, str(path), timeout=180):
        assert res["set"] == res["ids"] and res["set"][0] == pytest.approx(acc)
