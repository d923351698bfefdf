"""Temporal link prediction over ranks (DistLinkNeighborLoader with PyG's edge_label_time,
time_attr, temporal_strategy on typed parts, real gloo ranks): on every batch of an epoch no
sampled edge is later than the time of its seed edge (the tree's positive), the subtrees of the
negatives included, and on the graph with node time no negative node is (PyG's rule); every
batch equals the one-process reference (so W = 1, 2, 3 agree); every seed edge once per epoch;
``to_pyg()`` carries PyG's ``edge_label_time`` / ``seed_time`` and ``batch``; bad temporal
arguments are typed errors on every rank. One spawn per world size."""

from __future__ import annotations

from dataclasses import fields, replace

import numpy as np
import pytest
import torch

from mnmg_sampler.graph.api import partition_graph
from mnmg_sampler.graph.temporal import temporal_graph_from_data
from mnmg_sampler.graph.typed import typed_graph
from mnmg_sampler.loaders.neighbor import global_batches
from mnmg_sampler.ops.negative import AdmissibleNodes, NegativeSampling
from mnmg_sampler.sampling.batch import HeteroLinkMiniBatch
from mnmg_sampler.sampling.link import build_link_request, finish_link_batch, reverse_relation
from mnmg_sampler.sampling.sampler import HeteroSampler

from ..typed_graphs import link_spec
from .harness import run_ranks
from .test_hetero_link_loader import _batch, _plain

SEED, B, EPOCH = 5, 6, 1
RATES, REV = ("user", "rates", "movie"), ("movie", "rev_rates", "user")
HOMO = ("node", "to", "node")
FAN = {"hetero": [-1, 2], "homo": [-1, 2]}

# (name, graph, loader options): the same list in the ranks and the check
CASES = [("binary", "hetero", {"neg_sampling": {"mode": "binary", "amount": 2},
                               "exclude_seed_edges": True, "shuffle": True}),
         ("triplet_last", "hetero", {"neg_sampling": {"mode": "triplet", "amount": 2},
                                     "temporal_strategy": "last"}),
         ("homo", "homo", {"neg_sampling": "binary", "exclude_seed_edges": True})]


def _hetero_spec() -> dict:
    """Edge time (it bounds the trees) and node time (it bounds the negatives: node 0 of each
    type at time 0, so every seed edge admits one; the others up to 80, so some do not)."""
    spec = link_spec()
    g = np.random.default_rng(21)
    t = g.integers(0, 100, spec["edge_index"][RATES].shape[1])
    spec["edge_time"] = {RATES: t, REV: t.copy(),
                         ("user", "follows", "user"): g.integers(0, 100, 60)}
    spec["node_time"] = {k: np.concatenate([[0], g.integers(0, 80, n - 1)])
                         for k, n in spec["num_nodes"].items()}
    return spec


def _homo_data() -> dict:
    g = np.random.default_rng(22)
    ei = np.stack([g.integers(0, 35, 220), g.integers(0, 35, 220)])
    return {"edge_index": ei, "num_nodes": 35, "time": g.integers(0, 100, 220),
            "x": g.random((35, 2), dtype=np.float32)}


def _graphs() -> dict:
    return {"hetero": typed_graph(_hetero_spec()), "homo": temporal_graph_from_data(_homo_data())}


def _seed_edges(graph) -> tuple:
    """``(edge type, [2, E] seed edges, their times)``: edges of the graph at their own time
    (so the seed edge itself is admissible) and some later, drawn with a fixed seed."""
    et = RATES if RATES in graph.edge_types else HOMO
    ei, t = _edge_table(graph, et)
    pick = np.random.default_rng(2).choice(ei.shape[1], 30, replace=False)
    times = t[pick] + np.arange(30) % 3 * 7
    return et, ei[:, pick], times


def _edge_table(graph, et) -> tuple[np.ndarray, np.ndarray]:
    """``([2, E] per-type ids, [E] times)`` of relation ``et`` by input edge id."""
    spec = _hetero_spec()
    if et == RATES:
        return spec["edge_index"][et], spec["edge_time"][et]
    d = _homo_data()
    return d["edge_index"], d["time"]


def reference(graph, name: str, epoch: int, world: int) -> list[HeteroLinkMiniBatch]:
    """One epoch's batches in global order, sampled in this process."""
    opts = dict(next(c for c in CASES if c[0] == name)[2])
    et, eli, times = _seed_edges(graph)
    neg = NegativeSampling.cast(opts.get("neg_sampling"))
    strategy = opts.get("temporal_strategy", "uniform")
    sampler = HeteroSampler(graph, SEED, time_attr="time", temporal_strategy=strategy)
    rev = reverse_relation(et, graph.edge_types)
    out = []
    for gi, pos in enumerate(global_batches(eli.shape[1], B, world,
                                            shuffle=opts.get("shuffle", False),
                                            drop_last=False, seed=SEED, epoch=epoch)):
        plan = build_link_request(
            eli, None, pos, g=gi, epoch=epoch, seed=SEED, num_neighbors=FAN[_kind(et)],
            replace=False, edge_type=et,
            num_nodes=(graph.num_nodes_of(et[0]), graph.num_nodes_of(et[2])), neg=neg,
            edge_label_time=times,
            time_attr="time", temporal_strategy=strategy, neg_times=_neg_times(graph, et))
        # the one-process sampler takes the options at construction, not per request
        req = replace(plan.request, time_attr=None, temporal_strategy="uniform", disjoint=None)
        mb = sampler.sample([req])[0]
        out.append(finish_link_batch(mb, plan, reverse_edge_type=rev,
                                     exclude_seed_edges=opts.get("exclude_seed_edges", False)))
    return out


def _node_time(graph, t: str) -> np.ndarray | None:
    """Node time of type ``t`` by per-type id (``None`` without node time)."""
    if graph.node_time is None:
        return None
    i = graph.node_types.index(t)
    return graph.node_time[graph.node_type_offset[i]:graph.node_type_offset[i + 1]]


def _neg_times(graph, et):
    """The negatives' time tables of the one-process reference (node time only)."""
    if graph.node_time is None:
        return None
    return tuple(AdmissibleNodes.of(_node_time(graph, t)) for t in (et[0], et[2]))


def _kind(et) -> str:
    return "hetero" if et == RATES else "homo"


def check_time(graph, batches: list[HeteroLinkMiniBatch], name: str) -> int:
    """Every sampled edge no later than its tree's positive; the negatives' trees bounded by
    their positive's time; with node time, every negative endpoint (a binary negative's drawn
    source too) no later than its positive (and some node of its type later: the rule binds);
    every seed edge once. Returns the sampled edges into negatives."""
    et, eli, times = _seed_edges(graph)
    opts = next(c for c in CASES if c[0] == name)[2]
    neg = NegativeSampling.cast(opts.get("neg_sampling"))
    used = np.concatenate([b.input_id.numpy() for b in batches])
    assert np.array_equal(np.sort(used), np.arange(eli.shape[1]))
    rel_time = {r: _rel_time(r) for r in graph.edge_types}
    into_negatives = binding = 0
    for b in batches:
        P = b.input_id.numel()
        t_pos = torch.from_numpy(times[b.input_id.numpy()])
        reps = 1 if neg.mode == "triplet" else 1 + neg.amount
        assert torch.equal(b.edge_label_time, t_pos.repeat(reps))
        for t, v in b.batch.items():  # PyG's batch vector: the positive of every node
            assert v.numel() == b.n_id[t].numel() and (v.numel() == 0 or int(v.max()) < P)
        for r, ei in b.edge_index.items():
            tree = b.batch[r[2]][ei[1]]
            assert bool((rel_time[r][b.e_id[r]] <= t_pos[tree]).all()), (name, r)
        # negatives: the destinations after the positives' (their trees' local ids)
        s_t, _, d_t = et
        dst_loc = b.dst_neg_index.reshape(-1) if neg.mode == "triplet" else \
            b.edge_label_index[1, P:]
        for r, ei in b.edge_index.items():
            if r[2] != d_t:
                continue
            hit = torch.isin(ei[1], dst_loc)
            into_negatives += int(hit.sum())
            assert bool((rel_time[r][b.e_id[r][hit]] <= t_pos[b.batch[d_t][ei[1][hit]]]).all())
        binding += _check_negative_times(graph, b, et, neg, t_pos)
        if opts.get("exclude_seed_edges"):  # no seed edge into its own destination's tree
            ei = b.edge_index[et]
            src = b.n_id[s_t][ei[0]]
            for i in range(P):
                d_loc = int(b.edge_label_index[1, i])
                assert not bool(((ei[1] == d_loc) & (src == int(eli[0, b.input_id[i]]))).any())
    assert graph.node_time is None or binding > 0  # some drawn type had later nodes
    return into_negatives


def _check_negative_times(graph, b, et, neg, t_pos) -> int:
    """Node time of every negative endpoint <= its positive's (PyG's rule); returns how many
    negatives had a later node of their type (0 without node time)."""
    if graph.node_time is None:
        return 0
    s_t, _, d_t = et
    P = t_pos.numel()
    if neg.mode == "triplet":
        ends = [(d_t, b.dst_neg_index.reshape(-1))]
    else:
        ends = [(s_t, b.edge_label_index[0, P:]), (d_t, b.edge_label_index[1, P:])]
    binding = 0
    for t, loc in ends:
        nt = torch.from_numpy(_node_time(graph, t))
        tree = b.batch[t][loc]  # the positive of each negative
        assert bool((nt[b.n_id[t][loc]] <= t_pos[tree]).all()), t
        binding += int((nt.max() > t_pos[tree]).sum())
    return binding


def _rel_time(r) -> torch.Tensor:
    if r == HOMO:
        return torch.from_numpy(_homo_data()["time"])
    return torch.from_numpy(_hetero_spec()["edge_time"][r])


def _errors(svc, graph_name: str, rank: int) -> list:
    """The typed error of each bad temporal argument (the last one bad on rank 1 only)."""
    from mnmg_sampler.errors import SamplingInputError
    from mnmg_sampler.loaders.link import DistLinkNeighborLoader

    et, eli, times = _seed_edges(_graphs()[graph_name])
    cases = [({"edge_label_time": None}, "edge_label_time is not given"),
             ({"edge_label_time": times[:-1]}, "edge_label_time is a int64 array of 29"),
             ({"edge_label_time": times.astype(np.float64)}, "float64"),
             ({"time_attr": "ts"}, "holds time 'time'"),
             ({"time_attr": None}, "time_attr is not set"),
             ({"temporal_strategy": "first"}, "temporal_strategy"),
             ({"edge_label_time": times[:-1] if rank == 1 else times}, "rank 1|29")]
    got = []
    for kw, match in cases:
        args = {"num_neighbors": [1], "edge_label_index": (et, eli), "batch_size": 4,
                "time_attr": "time", "edge_label_time": times} | kw
        try:
            DistLinkNeighborLoader(svc, **args)
            got.append(None)
        except SamplingInputError as e:
            got.append((match, str(e)))
    return got


def _run(rank, world, dirs, errors):
    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.graph.partition_io import load_partition
    from mnmg_sampler.loaders.link import DistLinkNeighborLoader

    graphs = _graphs()
    out, errs, counts = {}, [], {}
    for graph_name, d in dirs.items():
        svc = SamplingService(load_partition(d, rank, world), seed=SEED)
        if errors and graph_name == "hetero":
            errs = _errors(svc, graph_name, rank)
        for name, g, opts in CASES:
            if g != graph_name:
                continue
            et, eli, times = _seed_edges(graphs[g])
            loader = DistLinkNeighborLoader(svc, FAN[g], (et, torch.from_numpy(eli)),
                                            batch_size=B, seed=SEED, time_attr="time",
                                            edge_label_time=torch.from_numpy(times), **opts)
            loader.set_epoch(EPOCH)
            out[name] = [{f.name: _plain(getattr(b, f.name)) for f in fields(b)}
                         for b in loader]
            counts[name] = len(loader)
        svc.shutdown()
    return out, counts, errs


@pytest.mark.parametrize("world, method, errors", [
    pytest.param(1, "random", False, marks=pytest.mark.slow),
    (2, "random", True),
    pytest.param(3, "range", False, marks=pytest.mark.slow),
])
def test_temporal_link_loader_equals_single_process(tmp_path, world, method, errors):
    graphs = _graphs()
    dirs = {k: str(partition_graph(g, num_parts=world, out=tmp_path / k, method=method,
                                   seed=3)) for k, g in graphs.items()}
    res = run_ranks(_run, world, dirs, errors, timeout=400)
    for name, g, _ in CASES:
        assert len({r[1][name] for r in res}) == 1  # the same batch count on every rank
        per_rank = [[_batch(b) for b in r[0][name]] for r in res]
        n = sum(len(p) for p in per_rank)
        mine = [per_rank[i % world][i // world] for i in range(n)]
        want = reference(graphs[g], name, EPOCH, world)
        assert len(mine) == len(want) == res[0][1][name] * world
        for a, b in zip(mine, want, strict=True):
            assert a.equal(b), name
        assert check_time(graphs[g], mine, name) > 0  # the negatives' trees were sampled
    for _, _, errs in res:  # every bad argument a typed error on every rank
        for got in errs:
            assert got is not None
            match, msg = got
            assert any(m in msg for m in match.split("|")), (match, msg)


@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_time_bounds_and_pyg_fields_in_one_process(name):
    """The invariants on the reference itself (fast), fewer edges than without time, and
    ``to_pyg()`` with PyG's LinkLoader field names for temporal batches."""
    graph = _graphs()[next(c for c in CASES if c[0] == name)[1]]
    batches = reference(graph, name, 0, 1)
    assert check_time(graph, batches, name) > 0
    et = batches[0].edge_type
    triplet = batches[0].src_index is not None
    for b in batches:
        data = b.to_pyg()
        if triplet:  # PyG: seed_time on both endpoint types, no edge_label_time
            assert torch.equal(data[et[0]].seed_time, b.edge_label_time)
            assert torch.equal(data[et[2]].seed_time, b.edge_label_time)
        else:
            assert torch.equal(data[et].edge_label_time, b.edge_label_time)
            assert data[et].edge_label_index.shape[1] == b.edge_label_time.numel()
        for t in b.n_id:
            assert torch.equal(data[t].batch, b.batch[t])
        if len(b.n_id) == 1:  # a PyG Data with time: read back as a Data (issue 30, item 3)
            flat = b.to_homogeneous().to_pyg()
            assert type(flat).__name__ == "Data" and torch.equal(flat.batch, b.batch[et[0]])
            assert torch.equal(flat.edge_label_time, b.edge_label_time)
            assert torch.equal(flat.edge_label_index, b.edge_label_index)
    # the same trees without time sample more hop-1 edges (the time bound removed some)
    _, eli, times = _seed_edges(graph)
    plan = build_link_request(eli, None, np.arange(eli.shape[1]), g=0, epoch=0, seed=SEED,
                              num_neighbors=[-1], replace=False, edge_type=et,
                              num_nodes=(graph.num_nodes_of(et[0]), graph.num_nodes_of(et[2])),
                              neg=None, edge_label_time=times, time_attr="time")
    sampler = HeteroSampler(graph, SEED, time_attr="time")
    req = replace(plan.request, time_attr=None, disjoint=None)
    timed = sampler.sample([req])[0]
    free = sampler.sample([replace(req, input_time=np.full(req.input_time.size, 2**62))])[0]
    n_timed = sum(v.shape[1] for v in timed.edge_index.values())
    assert 0 < n_timed < sum(v.shape[1] for v in free.edge_index.values())
