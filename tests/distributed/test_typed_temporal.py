"""Temporal and disjoint sampling over ranks (SamplingService + DistNeighborLoader on typed
parts, real gloo ranks): on every batch of an epoch, for a heterogeneous graph with edge time,
the same graph with node time and a homogeneous (one-type) graph with node time, no sampled
edge or node is later than its seed's time; "last" takes exactly the k latest admissible
neighbors (edge time and node time); uniform draws pass a chi-square test over the admissible
set (fixed seeds); disjoint trees without time; every batch equals the one-process sampler's
(so W = 1, 2, 3 agree); every seed once per epoch; bad temporal arguments are typed errors on
every rank. With W > 1 every case runs twice, over the wire and over the shared topology (time
bounds in the kernel over mapped parts); the merged rounds run on the shared topology. One
spawn per world size."""

from __future__ import annotations

import numpy as np
import pytest

from mnmg_sampler.graph.api import partition_graph
from mnmg_sampler.graph.temporal import temporal_graph_from_data
from mnmg_sampler.graph.typed import typed_graph
from mnmg_sampler.loaders.neighbor import global_batches
from mnmg_sampler.ops.rng import request_key
from mnmg_sampler.sampling.sampler import HeteroSampler, HeteroSampleRequest

from .harness import run_ranks

SEED, LSEED, EPOCH, B = 5, 7, 1, 4
N = {"a": 30, "b": 18}
RELS = [("a", "x", "a"), ("b", "y", "a"), ("a", "z", "b")]
NUM = [3, 2]
N_HOMO = 40


def _hetero_spec() -> tuple[dict, dict]:
    g = np.random.default_rng(11)
    ei = {r: np.stack([g.integers(0, N[r[0]], 160), g.integers(0, N[r[2]], 160)])
          for r in RELS}
    et = {r: g.integers(0, 50, 160) for r in RELS}
    spec = {"num_nodes": N, "edge_index": ei, "edge_time": et,
            "x": {"a": g.random((N["a"], 3), dtype=np.float32)}}
    return spec, et


def _homo_data() -> dict:
    g = np.random.default_rng(12)
    ei = np.stack([g.integers(0, N_HOMO, 200), g.integers(0, N_HOMO, 200)])
    return {"edge_index": ei, "num_nodes": N_HOMO, "node_time": g.integers(0, 30, N_HOMO),
            "x": g.random((N_HOMO, 2), dtype=np.float32)}


def _node_time_spec() -> tuple[dict, dict]:
    """The heterogeneous graph's edges with a node time per type instead of edge time."""
    spec, _ = _hetero_spec()
    g = np.random.default_rng(14)
    nt = {t: g.integers(0, 40, n) for t, n in N.items()}
    return {**{k: v for k, v in spec.items() if k != "edge_time"}, "node_time": nt}, nt


# chi-square over ranks: every node of CHI_N has CHI_DEG in-edges at times 0 .. CHI_DEG - 1;
# seeds at time CHI_T admit the CHI_T + 1 earliest, of which uniform draws CHI_FAN
CHI_N, CHI_DEG, CHI_T, CHI_FAN = 480, 12, 7, 3


def _chi_spec() -> dict:
    g = np.random.default_rng(15)
    dst = np.repeat(np.arange(CHI_N), CHI_DEG)
    ei = np.stack([g.integers(0, CHI_N, dst.size), dst])
    return {"num_nodes": {"a": CHI_N}, "edge_index": {("a", "x", "a"): ei},
            "edge_time": {("a", "x", "a"): np.tile(np.arange(CHI_DEG), CHI_N)}}


def _input_time() -> np.ndarray:
    return np.random.default_rng(13).integers(0, 60, N["a"])


def _loader_time(graph: str) -> np.ndarray | None:
    """The ``input_time`` the loader of ``graph``'s timed cases passes (None: the seeds' own
    node time)."""
    return {"hetero": _input_time(), "chi": np.full(CHI_N, CHI_T)}.get(graph)


# (name, graph, loader arguments): the same list in the ranks and the check
CASES = [("uniform", "hetero", {"time_attr": "time", "temporal_strategy": "uniform"}),
         ("last", "hetero", {"time_attr": "time", "temporal_strategy": "last"}),
         ("disjoint", "hetero", {"disjoint": True}),
         ("node_last", "hetero_nt", {"time_attr": "time", "temporal_strategy": "last"}),
         ("chi", "chi", {"time_attr": "time", "temporal_strategy": "uniform"}),
         ("homo", "homo", {"time_attr": "time", "temporal_strategy": "uniform"})]
NUM_OF = {"chi": [CHI_FAN]}  # fanouts per case (default NUM)
B_OF = {"chi": 96}  # batch size per case (default B)


# merged rounds: every rank submits these at once (rank r: those with i % W == r), so one
# kernel call serves timed, untimed and disjoint requests of several ranks together (W = 2:
# rank 0's blocks carry no time, rank 1's do)
MIXED = [{}, {"time_attr": "time"}, {"disjoint": True}, {"time_attr": "time", "last": True},
         {}, {"time_attr": "time"}, {"disjoint": True}, {"time_attr": "time", "last": True}]


def _mixed_request(i: int, opts: dict) -> HeteroSampleRequest:
    seeds = np.arange(3 * i, 3 * i + 4) % N["a"]
    kw = {}
    if "time_attr" in opts:
        kw = {"input_time": _input_time()[seeds], "time_attr": "time",
              "temporal_strategy": "last" if opts.get("last") else "uniform"}
    elif opts.get("disjoint"):
        kw = {"disjoint": True}
    return HeteroSampleRequest("a", seeds, NUM, request_key(SEED, 3, i), **kw)


def _plain(b) -> dict:
    d = {k: {n: v.numpy() for n, v in getattr(b, k).items()}
         for k in ("n_id", "edge_index", "e_id", "x", "batch")}
    d["seed_time"] = None if b.seed_time is None else b.seed_time.numpy()
    d["input_id"] = b.input_id.numpy()
    return d


def _ranks(rank, world, dirs):
    import torch

    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.errors import SamplingInputError
    from mnmg_sampler.graph.partition_io import load_partition
    from mnmg_sampler.loaders.neighbor import DistNeighborLoader

    out, errors = {}, []
    for graph, d in dirs.items():
        part = load_partition(d, rank, world)
        # the same epoch over the wire, then (W > 1) over the shared topology
        shared = {"wire": SamplingService(part, seed=SEED, shared_topology=False)}
        if world > 1:
            shared["shared"] = SamplingService(part, seed=SEED, shared_topology=True)
        for how, s in shared.items():
            for name, g, kw in CASES:
                if g != graph:
                    continue
                if _loader_time(graph) is not None and "time_attr" in kw:
                    kw = kw | {"input_time": torch.from_numpy(_loader_time(graph))}
                nodes = None if graph == "homo" else ("a", None)  # one type: plain ids
                loader = DistNeighborLoader(s, nodes, NUM_OF.get(name, NUM),
                                            batch_size=B_OF.get(name, B), shuffle=True,
                                            seed=LSEED, **kw)
                loader.set_epoch(EPOCH)
                out[name, how] = [_plain(b) for b in loader]
            st = s.stats()["shared_topology"]
            out["used", graph, how] = (st["enabled"], st["peer_nodes"])
        svc = shared.pop("shared") if world > 1 else shared.pop("wire")
        for s in shared.values():  # the other one
            s.shutdown()
        if graph == "hetero":
            futs = [(i, svc.submit(_mixed_request(i, o))) for i, o in enumerate(MIXED)
                    if i % world == rank]
            out["mixed"] = {i: _plain(svc.result(f)) for i, f in futs}
            bad = _mixed_request(0, MIXED[0])
            bad.time_attr = "ts"  # not the graph's time: refused when submitted
            try:
                svc.result(svc.submit(bad))
            except SamplingInputError as e:
                errors.append(str(e).split(".")[0])
            for bad in ({"time_attr": "ts"}, {"time_attr": "time"},  # no node time: input_time
                        {"time_attr": "time", "input_time": np.zeros(3, np.int64)},
                        {"time_attr": "time", "input_time": np.zeros(N["a"])},
                        {"input_time": np.zeros(N["a"], np.int64)},
                        {"time_attr": "time", "temporal_strategy": "first",
                         "input_time": np.zeros(N["a"], np.int64)}):
                try:
                    DistNeighborLoader(svc, ("a", None), NUM, batch_size=B, **bad)
                except SamplingInputError as e:
                    errors.append(str(e).split(".")[0])
        svc.shutdown()
    return out, errors


def _check_case(name, graph, kw, g, res, world, times, cols, how):
    """Every batch of every rank: equal to one process, time-respecting, seeds once."""
    itype = "node" if graph == "homo" else "a"
    n = g.num_nodes_of(itype)
    num, bs = NUM_OF.get(name, NUM), B_OF.get(name, B)
    gb = global_batches(n, bs, world, shuffle=True, drop_last=False, seed=LSEED, epoch=EPOCH)
    opts = {k: v for k, v in kw.items() if k != "input_time"}
    ref = HeteroSampler(g, SEED, **opts)
    it = _loader_time(graph) if "time_attr" in kw else None
    seen = np.zeros(n, np.int64)
    drawn = np.zeros(CHI_DEG, np.int64)  # chi: how often each edge time was drawn
    for rank, (out, _) in enumerate(res):
        got_all = out[name, how]
        assert len(got_all) == len(range(rank, len(gb), world))
        for gidx, got in zip(range(rank, len(gb), world), got_all, strict=True):
            seeds = gb[gidx]
            want = _plain(ref.sample([HeteroSampleRequest(
                itype, seeds, num, request_key(LSEED, EPOCH, gidx),
                input_time=None if it is None else it[seeds])])[0])
            for key in ("n_id", "edge_index", "e_id", "x", "batch"):
                assert got[key].keys() == want[key].keys(), (name, key)
                for k in want[key]:
                    np.testing.assert_array_equal(got[key][k], want[key][k], err_msg=key)
            np.testing.assert_array_equal(got["input_id"], seeds)
            seen[got["n_id"][itype][:seeds.size]] += 1
            _check_time(name, got, cols, times, it, seeds, itype)
            if name == "chi":
                et = ("a", "x", "a")
                drawn += np.bincount(times[et][got["e_id"][et]], minlength=CHI_DEG)
    np.testing.assert_array_equal(seen, np.ones(n, np.int64))  # every seed once per epoch
    if name == "chi":
        _check_chi_square(drawn)


def _check_chi_square(drawn: np.ndarray) -> None:
    """Each seed drew CHI_FAN of its CHI_T + 1 admissible in-edges (one per time 0 .. CHI_T):
    every time is drawn as often as uniform draws predict (7 degrees of freedom, 40 is
    p < 1e-5; fixed seeds, so it cannot flake), and the test has power: the counts fail against
    one more admissible time (a sampler that admitted it would have drawn it)."""
    assert drawn[CHI_T + 1:].sum() == 0 and drawn.sum() == CHI_N * CHI_FAN

    def chi(adm: int) -> float:
        exp = CHI_N * CHI_FAN / adm
        return float(((drawn[:adm] - exp) ** 2 / exp).sum())

    assert chi(CHI_T + 1) < 40, drawn
    assert chi(CHI_T + 2) > 40, drawn


def _check_time(name, b, cols, times, it, seeds, itype):
    if name == "disjoint":
        assert b["seed_time"] is None
        for t, tree in b["batch"].items():  # a node appears at most once per tree
            ids = b["n_id"][t]
            assert np.unique(np.stack([tree, ids]), axis=1).shape[1] == ids.size
        return
    st = b["seed_time"]
    if name in ("homo", "node_last"):
        np.testing.assert_array_equal(st, times[itype][seeds])  # default: the seeds' node time
        for t, tree in b["batch"].items():
            assert np.all(times[t][b["n_id"][t]] <= st[tree])  # no node from the future
        assert sum(ei.shape[1] for ei in b["edge_index"].values()) > 0
        if name == "node_last":
            for et, ei in b["edge_index"].items():
                _check_last_node_time(b, cols[et], times, et, ei, st, itype)
        return
    np.testing.assert_array_equal(st, it[seeds])
    n_edges = 0
    for et, ei in b["edge_index"].items():
        tree = b["batch"][et[2]][ei[1]]
        assert np.all(times[et][b["e_id"][et]] <= st[tree])  # no edge from the future
        n_edges += ei.shape[1]
        if name == "last":
            _check_last(b, cols[et], times, et, ei, st, itype)
    assert n_edges > 0


def _check_last(b, cols, times, et, ei, st, itype):
    """Hop 1: the edges sampled into each seed along ``et`` are the k latest admissible."""
    if et[2] != itype:
        return
    for s in range(st.size):
        v = b["n_id"][itype][s]
        adm = np.flatnonzero((cols[1] == v) & (times[et] <= st[s]))
        adm = adm[np.lexsort((adm, times[et][adm]))]  # time order, ties by edge id
        want = adm[max(0, adm.size - NUM[0]):]
        hop1 = (ei[1] == s)
        np.testing.assert_array_equal(np.sort(b["e_id"][et][hop1]), np.sort(want))


def _check_last_node_time(b, cols, times, et, ei, st, itype):
    """Hop 1 with node time: the neighbors sampled into each seed along ``et`` are the k
    latest admissible ones (their node times are the k largest admissible, ties aside)."""
    if et[2] != itype:
        return
    nt_src = times[et[0]][cols[0]]
    for s in range(st.size):
        v = b["n_id"][itype][s]
        adm = np.sort(nt_src[(cols[1] == v) & (nt_src <= st[s])])
        got = times[et[0]][b["n_id"][et[0]][ei[0][ei[1] == s]]]
        np.testing.assert_array_equal(np.sort(got), adm[max(0, adm.size - NUM[0]):])


@pytest.mark.parametrize("world, method", [pytest.param(1, "random", marks=pytest.mark.slow),
                                           (2, "range"),
                                           pytest.param(3, "random", marks=pytest.mark.slow)])
def test_temporal_loader_over_ranks_equals_one_process(tmp_path, world, method):
    spec, et = _hetero_spec()
    hetero = typed_graph(spec)
    nt_spec, nt = _node_time_spec()
    chi_spec = _chi_spec()
    homo_data = _homo_data()
    graphs = {"hetero": hetero, "hetero_nt": typed_graph(nt_spec),
              "chi": typed_graph(chi_spec), "homo": temporal_graph_from_data(homo_data)}
    times = {"hetero": et, "hetero_nt": nt, "chi": chi_spec["edge_time"],
             "homo": {"node": homo_data["node_time"]}}
    dirs = {k: str(partition_graph(gr, num_parts=world, out=tmp_path / k, method=method,
                                   seed=3))
            for k, gr in graphs.items()}
    res = run_ranks(_ranks, world, dirs, timeout=300)
    hows = ("wire", "shared") if world > 1 else ("wire",)
    for how in hows:  # both equal one process, so each other
        for name, graph, kw in CASES:
            cols = chi_spec["edge_index"] if graph == "chi" else spec["edge_index"]
            _check_case(name, graph, kw, graphs[graph], res, world, times[graph], cols, how)
    for out, _ in res:  # the shared topology sampled other ranks' nodes; the wire did not
        for graph in graphs:
            assert out["used", graph, "wire"] == (False, 0)
            if world > 1:
                enabled, peers = out["used", graph, "shared"]
                assert enabled and peers > 0, (graph, enabled, peers)
    for _, errors in res:
        assert len(errors) == 7, errors  # each bad argument: a typed error on every rank
    mixed = {i: b for out, _ in res for i, b in out["mixed"].items()}
    assert sorted(mixed) == list(range(len(MIXED)))
    for i, o in enumerate(MIXED):
        r = _mixed_request(i, o)
        opts = {"time_attr": r.time_attr, "temporal_strategy": r.temporal_strategy,
                "disjoint": r.disjoint}
        r.time_attr, r.temporal_strategy, r.disjoint = None, "uniform", None
        want = _plain(HeteroSampler(hetero, SEED, **opts).sample([r])[0])
        for key in ("n_id", "edge_index", "e_id", "batch"):
            assert mixed[i][key].keys() == want[key].keys(), (i, key)
            for k in want[key]:
                np.testing.assert_array_equal(mixed[i][key][k], want[key][k])
