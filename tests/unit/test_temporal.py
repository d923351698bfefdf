"""Temporal and disjoint sampling in one process: time in the typed graph, the temporal kernel,
the sampler's invariants (docs/temporal.md)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mnmg_sampler.errors import GraphFormatError, SamplingInputError
from mnmg_sampler.graph.temporal import temporal_graph_from_data
from mnmg_sampler.graph.typed import typed_graph
from mnmg_sampler.ops import typed
from mnmg_sampler.sampling.sampler import HeteroSampler, HeteroSampleRequest, sample_hetero

N = {"a": 40, "b": 25}
RELS = [("a", "x", "a"), ("b", "y", "a"), ("a", "z", "b")]
BIG = np.iinfo(np.int64).max


def _spec(seed=0, m=300, tmax=100):
    g = np.random.default_rng(seed)
    ei = {r: np.stack([g.integers(0, N[r[0]], m), g.integers(0, N[r[2]], m)]) for r in RELS}
    et = {r: g.integers(0, tmax, m) for r in RELS}
    nt = {t: g.integers(0, tmax, n) for t, n in N.items()}
    return {"num_nodes": N, "edge_index": ei}, et, nt


def _graph(kind="edge", seed=0, **kw):
    spec, et, nt = _spec(seed, **kw)
    if kind in ("edge", "both"):
        spec["edge_time"] = et
    if kind in ("node", "both"):
        spec["node_time"] = nt
    return typed_graph(spec), et, nt


def _segments(g):
    for s in range(g.indptr.size - 1):
        yield s, int(g.indptr[s]), int(g.indptr[s + 1])


def test_segments_sorted_by_time_with_edge_ids_kept():
    g, et, _ = _graph("edge")
    plain = typed_graph(_spec()[0])
    for _s, lo, hi in _segments(g):
        t = g.edge_time[lo:hi]
        assert np.all(np.diff(t) >= 0)
        e = g.edge_ids[lo:hi]
        assert np.all(np.diff(e)[np.diff(t) == 0] > 0)  # stable: ties in edge id order
        assert sorted(e.tolist()) == sorted(plain.edge_ids[lo:hi].tolist())
    gn, _, nt = _graph("node")
    for _s, lo, hi in _segments(gn):
        assert np.all(np.diff(gn.node_time[gn.indices[lo:hi]]) >= 0)


def _edge_times_of(g, et, rel, eid):
    return np.array([et[g.edge_types[r]][e] for r, e in zip(rel, eid, strict=True)], np.int64)


def test_entry_time_is_input_time_of_its_edge():
    g, et, _ = _graph("edge")
    rows = np.arange(g.num_nodes)
    z = np.zeros(rows.size, np.int64)
    _, nbr, rel, eid = typed.sample_typed_neighbors(
        g, rows, rows, z, z, np.full((1, 3), -1), np.zeros(1, np.uint8), 0, 0)
    assert np.array_equal(_edge_times_of(g, et, rel, eid), g.edge_time)


@pytest.mark.parametrize("bad, msg", [
    (np.zeros(5, np.int64), "shape"), (np.full(300, 1.5), "non-integral"),
    (np.array(["1"] * 300), "dtype")])
def test_bad_times_are_refused(bad, msg):
    spec, et, _ = _spec()
    et[RELS[1]] = bad
    spec["edge_time"] = et
    with pytest.raises(GraphFormatError, match=msg):
        typed_graph(spec)


def test_integral_float_times_are_converted_and_missing_relations_refused():
    spec, et, _ = _spec()
    spec["edge_time"] = {r: v.astype(np.float64) for r, v in et.items()}
    g = typed_graph(spec)
    assert g.edge_time.dtype == np.int64
    spec["edge_time"] = {RELS[0]: et[RELS[0]]}
    with pytest.raises(GraphFormatError, match="no times for"):
        typed_graph(spec)


def _call(g, rows, bound, fan, replace=0, last=0, seed=3, hop=1, keys=None):
    n = rows.size
    keys = np.arange(n, dtype=np.int64) if keys is None else keys
    bounds = np.broadcast_to(np.int64(bound), (n,)) if np.ndim(bound) == 0 else bound
    return typed.sample_typed_neighbors(
        g, rows, rows, keys, np.zeros(n, np.int64), np.full((1, len(g.edge_types)), fan),
        np.array([replace], np.uint8), seed, hop, bounds=bounds,
        last=np.array([last], np.uint8))


@pytest.mark.parametrize("kind", ["edge", "node"])
@pytest.mark.parametrize("fan, replace", [(3, 0), (3, 1), (-1, 0), (50, 0)])
def test_kernel_with_unbounded_time_equals_typed_kernel(kind, fan, replace):
    g, _, _ = _graph(kind)
    rows = np.arange(g.num_nodes)
    keys = np.arange(rows.size, dtype=np.int64)
    z = np.zeros(rows.size, np.int64)
    want = typed.sample_typed_neighbors(g, rows, rows, keys, z, np.full((1, 3), fan),
                                        np.array([replace], np.uint8), 3, 1)
    got = _call(g, rows, BIG, fan, replace)
    assert all(np.array_equal(a, b) for a, b in zip(want, got, strict=True))


def test_kernel_weighted_relation_unbounded_equals_typed():
    spec, et, _ = _spec()
    spec["edge_time"] = et
    spec["edge_weight"] = {RELS[1]: np.random.default_rng(1).random(300).astype(np.float32)}
    g = typed_graph(spec)
    rows = np.arange(g.num_nodes)
    keys = np.arange(rows.size, dtype=np.int64)
    z = np.zeros(rows.size, np.int64)
    want = typed.sample_typed_neighbors(g, rows, rows, keys, z, np.full((1, 3), 2),
                                        np.zeros(1, np.uint8), 3, 1)
    assert all(np.array_equal(a, b) for a, b in zip(want, _call(g, rows, BIG, 2), strict=True))


def _admissible_reference(g, v, bound, kind):
    """Per relation of node v: the admissible entries (time <= bound) in segment order."""
    out = {}
    t = int(g.type_of(np.array([v]))[0])
    r0, r1 = int(g.rel_offset[t]), int(g.rel_offset[t + 1])
    s0 = int(g.seg_base[t]) + (v - int(g.node_type_offset[t])) * (r1 - r0)
    for j in range(r1 - r0):
        lo, hi = int(g.indptr[s0 + j]), int(g.indptr[s0 + j + 1])
        tm = g.edge_time[lo:hi] if kind == "edge" else g.node_time[g.indices[lo:hi]]
        out[r0 + j] = np.arange(lo, hi)[tm <= bound]
    return out


@pytest.mark.parametrize("kind", ["edge", "node"])
def test_last_takes_the_k_latest_admissible(kind):
    g, _, _ = _graph(kind)
    rows = np.arange(g.num_nodes)
    bounds = np.random.default_rng(4).integers(0, 100, rows.size)
    for k in (2, -1):
        counts, nbr, rel, eid = _call(g, rows, bounds, k, last=1)
        off = np.r_[0, np.cumsum(counts)]
        for i, v in enumerate(rows):
            ref = _admissible_reference(g, int(v), bounds[i], kind)
            want_n, want_e = [], []
            for pos in ref.values():
                tail = pos if k < 0 else pos[max(pos.size - k, 0):]
                want_n += g.indices[tail].tolist()
                want_e += g.edge_ids[tail].tolist()
            assert nbr[off[i]:off[i + 1]].tolist() == want_n
            assert eid[off[i]:off[i + 1]].tolist() == want_e


@pytest.mark.parametrize("search", [typed.admissible_count])  # one search since issue 30
@pytest.mark.parametrize("by_node", [False, True])
def test_admissible_count_is_the_sorted_segments_upper_bound(search, by_node):
    # the search against numpy's: empty, one-entry and long segments, ties at the bound,
    # bounds below, among and above every time
    g = np.random.default_rng(11)
    ntime = g.integers(0, 20, 50)
    for d in [0, 1, 2, 3, 7, 8, 9, 16, 33, 100]:
        for _ in range(20):
            indices = g.integers(0, 50, d)
            indices = indices[np.argsort(ntime[indices], kind="stable")]
            pad = g.integers(0, 5)  # the segment starts inside the arrays
            idx = np.r_[np.zeros(pad, np.int64), indices, np.zeros(3, np.int64)]
            etime = np.r_[np.full(pad, 99), np.sort(g.integers(0, 20, d)), np.full(3, -1)]
            seg = ntime[indices] if by_node else etime[pad:pad + d]
            for bound in (-1, 0, 5, 10, 19, 25, *seg[:3].tolist()):
                got = search(etime, ntime, idx, by_node, pad, d, bound)
                assert got == np.searchsorted(seg, bound, side="right"), (d, bound)


@pytest.mark.parametrize("kind", ["edge", "node"])
def test_time_cut_of_a_large_frontier_equals_the_reference(kind):
    # a frontier large enough for the parallel kernel (and for the prefetches ahead of the
    # searches to cross rows of both types, whose relation counts differ): per node the
    # admissible counts of the reference, and the same output as serial calls of few nodes
    g, _, _ = _graph(kind)
    gen = np.random.default_rng(5)
    rows = gen.integers(0, g.num_nodes, 5000)
    bounds = gen.integers(-5, 105, rows.size)
    counts, nbr, rel, eid = got = _call(g, rows, bounds, -1, last=1)
    want = [sum(p.size for p in _admissible_reference(g, int(v), b, kind).values())
            for v, b in zip(rows, bounds, strict=True)]
    assert counts.tolist() == want
    for fan, last in ((-1, 1), (3, 0)):
        whole = got if last else _call(g, rows, bounds, fan, last=last)
        parts = [_call(g, rows[i:i + 700], bounds[i:i + 700], fan, last=last,
                       keys=np.arange(i, min(i + 700, rows.size), dtype=np.int64))
                 for i in range(0, rows.size, 700)]
        for a, b in zip(whole, (np.concatenate(x) for x in zip(*parts, strict=True)),
                        strict=True):
            assert np.array_equal(a, b)


def _chi_square(g, v, bound, fan, n_keys=3000, hop=1):
    """Chi-square of how often each admissible neighbor position of v's first relation is
    drawn, over ``n_keys`` keys, against uniform inclusion."""
    rows = np.full(n_keys, v, np.int64)
    keys = np.arange(n_keys, dtype=np.int64)
    counts, pos_nbr, rel, eid = _call(g, rows, np.int64(bound), fan, keys=keys, hop=hop)
    ref = _admissible_reference(g, v, bound, "edge")
    r0 = min(ref)
    adm = ref[r0]
    e_adm = g.edge_ids[adm]
    hits = np.array([np.sum((rel == r0) & (eid == e)) for e in e_adm], np.float64)
    expected = n_keys * min(fan, adm.size) / adm.size
    return float(((hits - expected) ** 2 / expected).sum()), adm.size


def test_uniform_draws_are_uniform_over_the_admissible_prefix():
    spec, _, _ = _spec()
    # node 0 of type "a" gets 12 edges of relation x with distinct times 0..11 (ties excluded)
    ei = spec["edge_index"][RELS[0]].copy()
    ei[1, :12] = 0
    ei[1, 12:][ei[1, 12:] == 0] = 1
    spec["edge_index"][RELS[0]] = ei
    spec["edge_time"] = {r: np.full(300, 1000, np.int64) for r in RELS}
    spec["edge_time"][RELS[0]] = np.r_[np.arange(12), np.full(288, 1000)]
    g = typed_graph(spec)
    v = 0  # internal id of a:0
    # 8 admissible of 12: chi-square with 7 degrees of freedom; 40 is p < 1e-5
    for fan in (1, 3):
        chi, a = _chi_square(g, v, 7, fan)
        assert a == 8
        assert chi < 40, chi
    # a biased draw that never takes the last admissible neighbor (bound 6: 7 admissible)
    # measured against the 8 that should be admissible fails clearly
    rows = np.full(3000, v, np.int64)
    _, _, rel, eid = _call(g, rows, np.int64(6), 1, keys=np.arange(3000, dtype=np.int64))
    adm = _admissible_reference(g, v, 7, "edge")[0]
    hits = np.array([np.sum((rel == 0) & (eid == e)) for e in g.edge_ids[adm]], np.float64)
    exp = 3000 / 8
    assert ((hits - exp) ** 2 / exp).sum() > 40


def _epoch(g, et, kind, disjoint_strategy="uniform", fan=(3, 2), input_type="a"):
    n = g.num_nodes_of(input_type)
    rng = np.random.default_rng(7)
    perm = rng.permutation(n)
    for start in range(0, n, 8):
        ids = perm[start:start + 8]
        it = rng.integers(0, 100, ids.size) if kind == "edge" else None
        yield ids, it, sample_hetero(g, (input_type, ids), list(fan), seed=1, key=start,
                                     time_attr="time", input_time=it,
                                     temporal_strategy=disjoint_strategy)


@pytest.mark.parametrize("strategy", ["uniform", "last"])
def test_epoch_never_samples_the_future_edge_time(strategy):
    g, et, _ = _graph("edge")
    for ids, it, b in _epoch(g, et, "edge", strategy):
        for (s, r, d), ei in b.edge_index.items():
            times = et[(s, r, d)][b.e_id[(s, r, d)].numpy()]
            seed_of = b.batch[d][ei[1]].numpy()
            assert np.all(b.batch[s][ei[0]].numpy() == seed_of)  # trees stay disjoint
            assert np.all(times <= it[seed_of])
        assert b.n_id["a"][:ids.size].tolist() == ids.tolist()
        assert b.batch["a"][:ids.size].tolist() == list(range(ids.size))


def test_epoch_never_samples_the_future_node_time():
    g, _, nt = _graph("node")
    for ids, _, b in _epoch(g, None, "node"):
        seed_time = nt["a"][ids]
        for t, nid in b.n_id.items():
            assert np.all(nt[t][nid.numpy()] <= seed_time[b.batch[t].numpy()])
        assert sum(ei.shape[1] for ei in b.edge_index.values()) > 0


def test_disjoint_trees_equal_each_seed_sampled_alone():
    g, _, _ = _graph("both")
    ids = np.array([3, 7, 11, 0])
    it = np.array([40, 90, 10, 70])
    b = sample_hetero(g, ("a", ids), [3, 2], seed=2, key=5, time_attr="time", input_time=it)
    for j, v in enumerate(ids):
        one = sample_hetero(g, ("a", [v]), [3, 2], seed=2, key=5, time_attr="time",
                            input_time=it[j:j + 1])
        for t in b.n_id:
            mine = b.batch[t].numpy() == j
            assert b.n_id[t][mine].tolist() == one.n_id[t].tolist()
        for et, ei in b.edge_index.items():
            s, _, d = et
            sel = b.batch[d][ei[1]].numpy() == j
            assert b.e_id[et][sel].tolist() == one.e_id[et].tolist()
    data = b.to_pyg()
    assert torch.equal(data["a"].batch, b.batch["a"])


@pytest.mark.parametrize("kind", ["edge", "node"])
def test_unbounded_time_equals_non_temporal_disjoint(kind):
    g, _, _ = _graph(kind)
    ids = np.arange(10)
    it = np.full(10, 10**6)
    s1 = HeteroSampler(g, 4, time_attr="time")
    s2 = HeteroSampler(g, 4, disjoint=True)
    r1 = [HeteroSampleRequest("a", ids, [4, 3], 9, input_time=it)]
    r2 = [HeteroSampleRequest("a", ids, [4, 3], 9)]
    got = s1.sample(r1)[0]
    assert got.seed_time.tolist() == it.tolist()
    got.seed_time = None  # the one field only temporal sampling fills
    assert got.equal(s2.sample(r2)[0])
    assert s1.kernel_calls == 2


def test_one_type_graph_from_data_dict():
    g = np.random.default_rng(3)
    ei = g.integers(0, 30, (2, 200))
    graph = temporal_graph_from_data({"edge_index": ei, "num_nodes": 30,
                                      "time": g.integers(0, 50, 200)})
    assert graph.edge_time is not None and graph.node_types == ("node",)
    b = sample_hetero(graph, ("node", [0, 1, 2]), [5, 5], time_attr="time",
                      input_time=[10, 20, 30])
    et = ("node", "to", "node")
    times = graph.edge_time[np.argsort(graph.edge_ids)][b.e_id[et].numpy()]
    assert np.all(times <= np.array([10, 20, 30])[b.batch["node"][b.edge_index[et][1]].numpy()])
    # with every time equal, sorting keeps edge id order: same as the graph without time
    plain = typed_graph({"num_nodes": {"node": 30}, "edge_index": {et: ei}})
    same = temporal_graph_from_data({"edge_index": ei, "num_nodes": 30,
                                     "time": np.zeros(200, np.int64)})
    a = sample_hetero(plain, ("node", [0, 1, 2]), [5, 5], disjoint=True)
    c = sample_hetero(same, ("node", [0, 1, 2]), [5, 5], time_attr="time",
                      input_time=[0, 0, 0])
    c.seed_time = None
    assert a.equal(c)


def test_temporal_user_errors():
    g, _, _ = _graph("edge")
    with pytest.raises(SamplingInputError, match="input_time"):
        sample_hetero(g, ("a", [0]), [2], time_attr="time")
    with pytest.raises(SamplingInputError, match="disjoint=False"):
        HeteroSampler(g, time_attr="time", disjoint=False)
    with pytest.raises(SamplingInputError, match="holds time"):
        HeteroSampler(g, time_attr="ts")
    with pytest.raises(SamplingInputError, match="temporal_strategy"):
        HeteroSampler(g, time_attr="time", temporal_strategy="latest")
    plain = typed_graph(_spec()[0])
    with pytest.raises(SamplingInputError, match="no time"):
        HeteroSampler(plain, time_attr="time")
    with pytest.raises(SamplingInputError, match="time_attr is not set"):
        sample_hetero(g, ("a", [0, 1]), [2], input_time=[1, 2])
    with pytest.raises(SamplingInputError, match="one integer time per seed"):
        sample_hetero(g, ("a", [0, 1]), [2], time_attr="time", input_time=[1])


def test_pyg_inputs_and_output():
    pyg = pytest.importorskip("torch_geometric.data")
    spec, et, nt = _spec()
    data = pyg.HeteroData()
    for t, n in N.items():
        data[t].num_nodes = n
        data[t].time = torch.from_numpy(nt[t])
    for r in RELS:
        data[r].edge_index = torch.from_numpy(spec["edge_index"][r])
        data[r].time = torch.from_numpy(et[r])
    from mnmg_sampler import load_temporal_graph

    g = load_temporal_graph(data, time_attr="time")
    want, _, _ = _graph("both")
    assert np.array_equal(g.edge_time, want.edge_time)
    assert np.array_equal(g.node_time, want.node_time)
    b = sample_hetero(g, ("a", [1, 2]), [3, 3], time_attr="time")  # default: seeds' node time
    out = b.to_pyg()
    assert out["a"].seed_time.tolist() == nt["a"][[1, 2]].tolist()
    assert out["b"].batch.numel() == out["b"].num_nodes
    with pytest.raises(GraphFormatError, match="no attribute 'ts'"):
        load_temporal_graph(data, time_attr="ts")
    ei = torch.from_numpy(spec["edge_index"][RELS[0]])
    homo = pyg.Data(edge_index=ei, num_nodes=40, time=torch.from_numpy(et[RELS[0]]))
    h = load_temporal_graph(homo)
    assert h.edge_time is not None and h.num_edges == 300
    homo_nt = pyg.Data(edge_index=ei, num_nodes=40, time=torch.from_numpy(nt["a"]))
    assert load_temporal_graph(homo_nt).node_time is not None


def test_request_level_options_are_refused_by_the_one_process_sampler():
    g, _, _ = _graph("edge")
    req = HeteroSampleRequest("a", np.arange(3), [2], 0, time_attr="time",
                              input_time=np.zeros(3, np.int64))
    with pytest.raises(SamplingInputError, match="at construction"):
        HeteroSampler(g, 0, time_attr="time").sample([req])
