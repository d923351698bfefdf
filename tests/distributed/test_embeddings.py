"""Partitioned embeddings (issue 31, :mod:`mnmg_sampler.distributed.embeddings`), real gloo ranks:
each rank holds only its part's rows; the same global batches split over 1, 2 or 3 ranks train
bit-identical tables (rows fetched from owners, gradients summed per row in a fixed order,
sparse Adam on touched rows); reruns are bit-identical; a checkpoint of 2 ranks loads into 3
(rows re-partitioned by id) and continues exactly as the uninterrupted run."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mnmg_sampler.graph.api import partition_graph

from ..typed_graphs import typed_spec
from .common import small_graph
from .harness import run_ranks

DIM, STEPS, GLOBAL = 6, 5, 60


def _global_batches(types: list[str], sizes: dict[str, int]) -> list[dict[str, np.ndarray]]:
    """Per step, every type's ids of the global batch (repeats within and across ranks; the
    last row of each type never)."""
    rng = np.random.default_rng(5)
    return [{t: rng.integers(0, sizes[t] - 1, GLOBAL) for t in types} for _ in range(STEPS)]


def _weights(step: int) -> np.ndarray:
    return np.random.default_rng([7, step]).standard_normal((GLOBAL, DIM)).astype(np.float32)


def _train(rank, world, pdir, types, sizes, steps, state_dirs, save_dir):
    """Rank ``rank``'s share (positions ``rank::world``) of each global batch, loss
    ``sum(w * h^2)``; returns this rank's rows (and saves them to ``save_dir``)."""
    from mnmg_sampler.distributed.embeddings import DistEmbedding
    from mnmg_sampler.graph.partition_io import load_partition

    part = load_partition(pdir, rank, world)
    emb = DistEmbedding(part, types or None, DIM, seed=4, lr=0.05)
    if state_dirs:
        emb.load_state_dicts(torch.load(f"{d}/emb-{r}.pt", weights_only=True)
                             for d, w in state_dirs for r in range(w))
    batches = _global_batches(types or [""], sizes)
    for s in steps:
        ids = {t: b[rank::world] for t, b in batches[s].items()}
        h = emb.fetch(ids if types else ids[""])
        h = h if types else {"": h}
        w = torch.from_numpy(_weights(s)[rank::world])
        loss = sum((w * v * v).sum() + v.sum() for v in h.values())
        loss.backward()
        emb.step()
    if save_dir:
        torch.save(emb.state_dict(), f"{save_dir}/emb-{rank}.pt")
    st = emb.state_dict()
    return {k: v.numpy() for k, v in st.items() if k != "dim"}, emb.traffic()


def _table(results, types) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The whole table by global id, from every rank's rows (each id exactly once)."""
    out = {}
    for t in types or [""]:
        ids = np.concatenate([r[0][f"ids.{t}"] for r in results])
        assert np.unique(ids).size == ids.size  # no row on two ranks
        order = np.argsort(ids)
        out[t] = tuple(np.concatenate([r[0][f"{k}.{t}"] for r in results])[order]
                       for k in ("ids", "weight", "m", "v", "steps"))
    return out


def _assert_equal(a, b):
    assert a.keys() == b.keys()
    for t in a:
        for x, y in zip(a[t], b[t], strict=True):
            np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("typed", [False, True])
def test_same_global_batches_give_identical_tables_on_1_2_3_ranks(tmp_path, typed):
    if typed:
        spec = typed_spec(3)
        types, sizes = ["author", "field"], dict(spec["num_nodes"])  # author has features too
        data = spec
    else:
        g = small_graph()
        types, sizes, data = [], {"": g.num_nodes}, g
    tables = {}
    for world in (1, 2, 3):
        d = str(partition_graph(data, num_parts=world, out=tmp_path / f"p{world}",
                                method="random", seed=world))
        res = run_ranks(_train, world, d, types, sizes, range(STEPS), [], None, timeout=240)
        n_local = [r[1]["embedding_rows_local"] for r in res]
        total = res[0][1]["embedding_rows_total"]
        assert sum(n_local) == total == sum(sizes[t] for t in (types or [""]))
        assert max(n_local) < total or world == 1  # no rank holds the whole table
        if world > 1:
            assert all(r[1]["embedding_bytes_sent"] > 0 for r in res)
        tables[world] = _table(res, types)
    # the table moved, and moved the same way for every split of the global batches
    first = next(iter(tables[1].values()))
    assert np.any(first[4] > 0) and np.any(first[4] == 0)  # touched and untouched rows
    _assert_equal(tables[1], tables[2])
    _assert_equal(tables[1], tables[3])
    # a rerun is bit-identical
    d = str(tmp_path / "p2")
    _assert_equal(_table(run_ranks(_train, 2, d, types, sizes, range(STEPS), [], None,
                                   timeout=240), types), tables[2])


def test_checkpoint_of_2_ranks_resumes_on_3(tmp_path):
    """Rows saved by 2 ranks after 2 steps, loaded by 3 ranks (other parts), 3 more steps:
    the table equals 5 uninterrupted steps."""
    g = small_graph()
    sizes = {"": g.num_nodes}
    p2 = str(partition_graph(g, num_parts=2, out=tmp_path / "p2", method="random", seed=1))
    p3 = str(partition_graph(g, num_parts=3, out=tmp_path / "p3", method="random", seed=2))
    ck = tmp_path / "ck"
    ck.mkdir()
    run_ranks(_train, 2, p2, [], sizes, range(2), [], str(ck), timeout=240)
    resumed = run_ranks(_train, 3, p3, [], sizes, range(2, STEPS), [(str(ck), 2)], None,
                        timeout=240)
    whole = run_ranks(_train, 3, p3, [], sizes, range(STEPS), [], None, timeout=240)
    _assert_equal(_table(resumed, []), _table(whole, []))


def _over_budget(rank, world, pdir):
    from mnmg_sampler.distributed.embeddings import DistEmbedding
    from mnmg_sampler.errors import MemoryBudgetError
    from mnmg_sampler.graph.partition_io import load_partition

    part = load_partition(pdir, rank, world)
    ok = DistEmbedding(part, None, 64, memory_mb=0.1).rows_local  # 120 rows x 768 B fit
    try:
        DistEmbedding(part, None, 64, memory_mb=0.05)
    except MemoryBudgetError as e:
        return ok, e.what
    return ok, None


def _step_first(rank, world, pdir):
    from mnmg_sampler.distributed.embeddings import DistEmbedding
    from mnmg_sampler.errors import ServiceError
    from mnmg_sampler.graph.partition_io import load_partition

    emb = DistEmbedding(load_partition(pdir, rank, world), None, 8)
    try:
        emb.step()  # no fetch before it: refused before any collective, on every rank
    except ServiceError as e:
        return e.fix
    return None


def test_step_without_a_fetch_is_a_typed_error_on_every_rank(tmp_path):
    d = str(partition_graph(small_graph(), num_parts=2, out=tmp_path / "p", method="range"))
    for fix in run_ranks(_step_first, 2, d, timeout=120):
        assert fix is not None and "fetch(ids)" in fix


def test_rows_above_the_budget_fail_every_rank_before_allocating(tmp_path):
    d = str(partition_graph(small_graph(), num_parts=2, out=tmp_path / "p", method="range"))
    for ok, what in run_ranks(_over_budget, 2, d, timeout=120):
        assert ok == 120 and what is not None
        assert "120 embedding rows of width 64" in what and "embedding_memory_mb = 0.05" in what


def _adam_rows(rank, world, pdir, ids, steps):
    """Each step, rank ``rank`` fetches ``ids[rank]`` (repeats within and across ranks), loss
    ``sum(w * h^2)``, step with ``1 / world``; returns the whole table of this rank's rows."""
    from mnmg_sampler.distributed.embeddings import DistEmbedding
    from mnmg_sampler.graph.partition_io import load_partition

    emb = DistEmbedding(load_partition(pdir, rank, world), None, DIM, seed=4, lr=0.05)
    for s in range(steps):
        h = emb.fetch(ids[rank])
        w = torch.from_numpy(_weights(s)[: h.shape[0]])
        (w * h * h).sum().backward()
        emb.step(1.0 / world)
    st = emb.state_dict()
    return st["ids."].numpy(), st["weight."].numpy()


def test_sparse_adam_on_rows_touched_every_step_equals_torch_adam(tmp_path):
    """Rows every step touches follow ``torch.optim.Adam`` on the dense rows with the global
    batch's gradient averaged over ranks (to float32 rounding); untouched rows keep their
    initial values exactly."""
    from mnmg_sampler.distributed.embeddings import init_rows

    g = small_graph()
    d = str(partition_graph(g, num_parts=2, out=tmp_path / "p", method="random", seed=3))
    ids = [np.array([3, 7, 7, 50, 91]), np.array([7, 91, 12, 3, 3, 3])]
    steps = 6
    res = run_ranks(_adam_rows, 2, d, ids, steps, timeout=120)
    got = np.zeros((g.num_nodes, DIM), np.float32)
    for rid, w in res:
        got[rid] = w
    touched = np.unique(np.concatenate(ids))
    p = torch.nn.Parameter(torch.from_numpy(init_rows("", np.arange(g.num_nodes), DIM, 4)))
    opt = torch.optim.Adam([p], lr=0.05)
    for s in range(steps):
        opt.zero_grad()
        loss = sum((torch.from_numpy(_weights(s)[: r.size]) * p[r] ** 2).sum() for r in ids)
        (loss / 2).backward()
        opt.step()
    want = p.detach().numpy()
    np.testing.assert_allclose(got[touched], want[touched], rtol=1e-5, atol=1e-6)
    assert not np.allclose(got[touched], init_rows("", touched, DIM, 4))  # they moved
    rest = np.setdiff1d(np.arange(g.num_nodes), touched)
    np.testing.assert_array_equal(got[rest], init_rows("", rest, DIM, 4))
