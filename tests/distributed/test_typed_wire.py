"""The typed wire is the homogeneous one, counted on real gloo ranks: the same graph partitioned
homogeneous and typed (3 node types by id range, 9 relations), the same seeds: a typed round
makes the homogeneous round's collectives (the agreement, one all-to-all each way per hop: no
size exchange, int32 words) and sends at most 1.25x its id bytes per sampled edge (neighbor and
relation in one word), plus one feature exchange for the rows of every node type; typed batches
equal the single-process HeteroSampler's, ``x``/``y`` of every type included; so they do with
two rounds in flight, and on 2 ranks forced onto 2 hosts with the row cache a budget buys."""

from __future__ import annotations

import numpy as np

from mnmg_sampler.bench.dist import num_edges, typed_request
from mnmg_sampler.bench.hetero import typed_view
from mnmg_sampler.graph.partition import partition
from mnmg_sampler.ops.rng import request_key
from mnmg_sampler.sampling.sampler import HeteroSampler

from .common import SEED, small_graph
from .harness import run_ranks

FANOUTS, B, BATCHES = [4, 3], 16, 6


def _typed_graph():
    g = small_graph()
    tg = typed_view(g)[0]
    rng = np.random.default_rng(1)
    for name in tg.node_types[:2]:  # node data of two types, of different widths and dtypes
        n = tg.num_nodes_of(name)
        tg.x[name] = rng.standard_normal((n, 3 + len(tg.x)), dtype=np.float32)
    tg.y[tg.node_types[0]] = rng.integers(0, 5, tg.num_nodes_of(tg.node_types[0]))
    return g, tg


def _batches(tg, rank, world):
    seeds = np.arange(0, tg.num_nodes, 3, dtype=np.int64)
    return [(i, typed_request(tg.node_types, tg.node_type_offset, seeds[i * B:(i + 1) * B],
                              FANOUTS, request_key(SEED, 0, i), False, False))
            for i in range(rank, BATCHES, world)]


def _assert_single_process(tg, ref, rank, got) -> None:
    """Every ``(batch index, {field: {type: array}})`` of ``rank`` equals ``ref``'s batch."""
    for i, per in got:
        (r,) = [r for j, r in _batches(tg, rank, 2) if j == i]
        want = ref.sample([r])[0]
        for key, arrays in per.items():
            for t, a in arrays.items():
                np.testing.assert_array_equal(a, getattr(want, key)[t].numpy(), (key, t))


def _run(rank, world, homo_dir, typed_dir):
    from mnmg_sampler.distributed.features import DistFeatureStore
    from mnmg_sampler.distributed.sampler import DistSampler
    from mnmg_sampler.graph.partition_io import load_partition
    from mnmg_sampler.sampling.sampler import SampleRequest

    _, tg = _typed_graph()
    typed = DistSampler(load_partition(typed_dir, rank, world), SEED, shared_topology=False)
    store = DistFeatureStore(typed.part, typed.ex)
    homo = DistSampler(load_partition(homo_dir, rank, world), SEED, shared_topology=False)
    out = {"wire": (homo.wire.itemsize, typed.wire.itemsize)}
    for name, s in (("homo", homo), ("typed", typed)):
        calls, ids, edges, got = [], 0, 0, []
        for i, r in _batches(tg, rank, world):
            if name == "homo":
                r = SampleRequest(np.concatenate([r.internal_seeds(
                    tg.node_types, tg.node_type_offset)]), FANOUTS, r.key, edge_ids=False)
            c0, b0 = s.ex.calls, s.ex.bytes.get("ids", [0, 0])[1]
            (b,) = s.sample([r], store if name == "typed" else None)
            calls.append(s.ex.calls - c0)
            ids += s.ex.bytes.get("ids", [0, 0])[1] - b0
            edges += num_edges(b)
            if name == "typed":
                got.append((i, {k: {t: v.numpy() for t, v in getattr(b, k).items()}
                                for k in ("n_id", "edge_index", "e_id", "x", "y")}))
        out[name] = (calls, ids, edges, got)
    return out


def test_typed_round_is_the_homogeneous_wire(tmp_path):
    g, tg = _typed_graph()
    partition(g, 2, "random", tmp_path / "homo", SEED)
    partition(tg, 2, "random", tmp_path / "typed", SEED)
    ranks = run_ranks(_run, 2, str(tmp_path / "homo"), str(tmp_path / "typed"))
    ref = HeteroSampler(tg, SEED)
    for rank, res in enumerate(ranks):
        assert res["wire"] == (4, 4)  # int32 words on both paths
        # the same collectives round by round, and one feature exchange for every node type
        # with data (the ids in one bounded all-to-all, the rows as bytes: no size exchange)
        assert res["typed"][0] == [c + 2 for c in res["homo"][0]]
        _assert_single_process(tg, ref, rank, res["typed"][3])
        for _, got in res["typed"][3]:
            assert set(got["x"]) == set(tg.x) and set(got["y"]) == set(tg.y)
    per_edge = {k: sum(r[k][1] for r in ranks) / sum(r[k][2] for r in ranks)
                for k in ("homo", "typed")}
    assert 0 < per_edge["typed"] <= 1.25 * per_edge["homo"], per_edge


def _in_flight(rank, world, typed_dir):
    import time

    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.graph.partition_io import load_partition

    _, tg = _typed_graph()
    svc = SamplingService(load_partition(typed_dir, rank, world), seed=SEED,
                          rounds_in_flight=2, shared_topology=False)
    first, second = svc._slots
    reqs = _batches(tg, rank, world)
    with first.lock:  # the first round's thread waits: the second round takes these
        futs = [(i, svc.submit(r)) for i, r in reqs[:2]]
        while not all(f.done() for _, f in futs):
            time.sleep(0.01)
    futs += [(i, svc.submit(r)) for i, r in reqs[2:]]  # either round may carry these
    got = [(i, {k: {t: v.numpy() for t, v in getattr(svc.result(f), k).items()}
                for k in ("n_id", "edge_index", "x", "y")}) for i, f in futs]
    calls = second.sampler.kernel_calls
    svc.shutdown()
    return got, calls


def test_typed_rounds_in_flight_equal_the_single_process(tmp_path):
    _, tg = _typed_graph()
    partition(tg, 2, "random", tmp_path / "typed", SEED)
    ref = HeteroSampler(tg, SEED)
    for rank, (got, calls) in enumerate(run_ranks(_in_flight, 2, str(tmp_path / "typed"))):
        assert calls > 0  # the second round in flight sampled
        _assert_single_process(tg, ref, rank, got)


def _two_hosts(rank, world, typed_dir, budget):
    import os

    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.graph.partition_io import load_partition

    os.environ["MNMG_HOST_ID"] = f"typed-host-{rank}"  # one rank per emulated host
    _, tg = _typed_graph()
    svc = SamplingService(load_partition(typed_dir, rank, world), seed=SEED,
                          host_memory=budget)  # the shared topology: auto
    futs = [(i, svc.submit(r)) for i, r in _batches(tg, rank, world)]
    got = [(i, {k: {t: v.numpy() for t, v in getattr(svc.result(f), k).items()}
                for k in ("n_id", "edge_index", "e_id", "x", "y")}) for i, f in futs]
    st = svc.stats()
    svc.shutdown()
    return got, st["features"], st["shared_topology"]["enabled"]


def test_typed_parts_on_two_hosts_with_the_row_cache_equal_one_process(tmp_path):
    _, tg = _typed_graph()
    partition(tg, 2, "random", tmp_path / "typed", SEED)
    ref = HeteroSampler(tg, SEED)
    # a budget of 40 of the widest rows (x of 3 float32 and an int64 label: 20 B)
    for rank, (got, feats, shared) in enumerate(run_ranks(
            _two_hosts, 2, str(tmp_path / "typed"), 40 * 20, fresh=True)):
        assert not shared  # two hosts of one rank: the wire
        assert feats["cache_rows"] == 40 and feats["cache_hits"] > 0
        assert 0 < feats["cache_hit_rate"] < 1 and feats["rows_fetched"] > 0
        assert feats["cache_hits"] + feats["rows_fetched"] == feats["distinct_remote_rows"]
        _assert_single_process(tg, ref, rank, got)
