"""A loader's seeds are translated to the partitioning's ids once, at construction: its rounds make
no seed lookup, and a request's translated seeds are checked (typed errors), on real gloo ranks."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mnmg_sampler.errors import SamplingInputError
from mnmg_sampler.graph.partition import partition
from mnmg_sampler.loaders.neighbor import global_batches
from mnmg_sampler.ops.rng import request_key
from mnmg_sampler.sampling.sampler import MultiHopSampler, SampleRequest, local_hop_fn

from .common import as_arrays, assert_same, small_graph
from .harness import run_ranks

SEED = 5
FAN = [4, 3]


def _id_bytes(ex) -> list[int]:
    return list(ex.bytes.get("id_maps", [0, 0]))


def _loader_rounds(rank, world, d, nodes):
    import torch.distributed as dist

    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.graph.partition_io import load_partition
    from mnmg_sampler.loaders.neighbor import DistNeighborLoader

    svc = SamplingService(load_partition(d, rank, world), seed=SEED, id_maps="sharded",
                          shared_topology=False)
    ex = svc.sampler.ex
    before_loader = _id_bytes(ex)
    loader = DistNeighborLoader(svc, nodes, FAN, 8, shuffle=True, seed=1, prefetch=2,
                                edge_ids=True)
    built = _id_bytes(ex)  # the loader translates on the default group, not the sampler's
    loader.set_epoch(1)
    got = [as_arrays(b) | {"input_id": b.input_id.numpy()} for b in loader]
    dist.barrier()  # every rank's loader rounds are done ...
    after_loader = _id_bytes(ex)
    dist.barrier()  # ... and counted before any rank starts the next phase
    remote = sum(int((~svc.sampler.owns(nodes[g["input_id"]])).sum()) for g in got)
    # the same requests without their translated seeds: the sampler looks them up per round
    loader.set_epoch(1)
    plain = []
    for j in range(loader._num_my_batches()):
        g, pos = loader._my_batch(j, loader.epoch)
        r = dataclasses.replace(loader.request(g, pos), new_seeds=None)
        plain.append(as_arrays(svc.result(svc.submit(r))))
    after_plain = _id_bytes(ex)
    svc.shutdown()
    return (got, plain, before_loader, built, after_loader, after_plain, remote,
            loader._new_nodes.size)


def test_loader_rounds_make_no_seed_lookup_and_equal_the_single_process(tmp_path):
    g = small_graph()
    d = str(partition(g, 2, "random", tmp_path / "p", seed=2))
    nodes = np.arange(3, 140)
    res = run_ranks(_loader_rounds, 2, d, nodes, timeout=240)
    ref = MultiHopSampler(local_hop_fn(g, SEED), g.num_nodes)
    gb = global_batches(nodes.size, 8, 2, shuffle=True, drop_last=False, seed=1, epoch=1)
    assert sum(r[6] for r in res) > 0  # seeds owned by another rank were requested
    for rank, (got, plain, b0, b1, b2, b3, _remote, n_new) in enumerate(res):
        mine = list(range(rank, len(gb), 2))
        assert len(got) == len(plain) == len(mine) > 0
        for gidx, a, p in zip(mine, got, plain, strict=True):
            want = as_arrays(ref.sample([SampleRequest(nodes[gb[gidx]], FAN,
                                                       request_key(1, 1, gidx))])[0])
            assert_same(a, want)
            assert_same(p, want)
            assert np.array_equal(a["input_id"], gb[gidx])
            assert np.array_equal(a["x"], g.x[a["n_id"]])
            assert np.array_equal(a["y"], g.y[a["n_id"]])
        assert n_new == nodes.size  # one new id per seed, nothing num_nodes-sized
        assert b1 == b0  # the sampler's exchanger never ran the loader's translation
        # features carry the nodes' original ids, so with translated seeds a round makes no
        # id-map exchange at all; without them, every round looks its seeds up
        assert b2 == b1
        assert b3[1] > b2[1] and b3[0] >= b2[0]


def _bad_new_seeds(rank, world, d):
    from mnmg_sampler.distributed.sampler import DistSampler
    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.graph.partition_io import load_partition

    part = load_partition(d, rank, world)
    orig = np.asarray(part.orig_ids)
    lo = int(part.boundaries[rank])
    n = int(part.num_nodes)
    own = orig[:3]
    good = SampleRequest(own, FAN, 7, new_seeds=lo + np.arange(3))
    bad = {
        "range": SampleRequest(own, FAN, 7, new_seeds=np.array([lo, lo + 1, n])),
        "negative": SampleRequest(own, FAN, 7, new_seeds=np.array([-1, lo + 1, lo + 2])),
        "names another node": SampleRequest(own, FAN, 7, new_seeds=lo + np.array([1, 0, 2])),
        "length": dataclasses.replace(good),  # made valid, then cut (after construction)
    }
    bad["length"].new_seeds = bad["length"].new_seeds[:2]
    out = {}
    # the collective path: a bad request on one rank fails the round on every rank
    s = DistSampler(part, seed=SEED, shared_topology=False)
    for name, r in bad.items():
        try:
            s.sample([r] if rank == 0 else [good])
            out[name] = "no error"
        except SamplingInputError as e:
            out[name] = ("SamplingInputError", str(e))
    ok = as_arrays(s.sample([good])[0])  # the group still works after agreed errors
    # the service: a bad request fails alone, at submit
    svc = SamplingService(part, seed=SEED, features=False, shared_topology=False)
    sub = {}
    for name, r in bad.items():
        try:
            svc.result(svc.submit(r))
            sub[name] = "no error"
        except SamplingInputError as e:
            sub[name] = ("SamplingInputError", str(e))
    ok2 = as_arrays(svc.result(svc.submit(good)))
    svc.shutdown()
    return out, sub, ok, ok2, own


def test_bad_translated_seeds_are_typed_errors_on_every_rank(tmp_path):
    g = small_graph(features=False)
    d = str(partition(g, 2, "random", tmp_path / "p", seed=2))
    res = run_ranks(_bad_new_seeds, 2, d, timeout=240)
    ref = MultiHopSampler(local_hop_fn(g, SEED), g.num_nodes)
    needles = {"range": "out of range", "negative": "out of range",
               "names another node": "do not name its seeds", "length": "2 translated seed ids"}
    for rank, (out, sub, ok, ok2, own) in enumerate(res):
        for name, needle in needles.items():
            kind, msg = out[name]
            assert kind == "SamplingInputError" and (needle in msg or rank == 1), (name, msg)
            kind, msg = sub[name]
            assert kind == "SamplingInputError" and needle in msg, (name, msg)
        want = as_arrays(ref.sample([SampleRequest(own, FAN, 7)])[0])
        assert_same(ok, want)
        assert_same(ok2, want)


def test_request_with_new_seeds_of_another_length_is_refused():
    with pytest.raises(SamplingInputError, match="2 translated seed ids for 3 seeds"):
        SampleRequest([1, 2, 3], FAN, 0, new_seeds=[4, 5])
    with pytest.raises(SamplingInputError, match="dtype float"):
        SampleRequest([1, 2, 3], FAN, 0, new_seeds=np.array([4.0, 5.0, 6.0]))
    r = SampleRequest(np.array([1, 2, 3], np.int32), FAN, 0, new_seeds=np.array([4, 5, 6]))
    assert r.new_seeds.dtype == np.int64
