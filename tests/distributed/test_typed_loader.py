"""DistNeighborLoader on typed parts, real gloo ranks: HeteroMiniBatch with x/y per type, equal
to the single-process HeteroSampler's batches; every seed once per epoch (all-reduced)."""

from __future__ import annotations

import numpy as np
import pytest

from mnmg_sampler.errors import SamplingInputError
from mnmg_sampler.graph.api import partition_graph
from mnmg_sampler.graph.typed import typed_graph
from mnmg_sampler.hetero_sampler import HeteroSampler, HeteroSampleRequest
from mnmg_sampler.loader import global_batches
from mnmg_sampler.ops.rng import request_key

from ..typed_graphs import typed_spec
from .harness import run_ranks
from .test_typed_service import NUM, _plain

SEED, LOADER_SEED, EPOCH, B = 4, 3, 2, 4


def _load(rank, world, d, mask):
    import torch
    import torch.distributed as dist

    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.graph.partition_io import load_partition
    from mnmg_sampler.loader import DistNeighborLoader

    svc = SamplingService(load_partition(d, rank, world), seed=SEED)
    errors = []
    for bad in (np.arange(3), ("venue", None), ("paper", np.array([0, 99]))):
        try:
            DistNeighborLoader(svc, bad, [2], batch_size=B)
        except SamplingInputError as e:
            errors.append(str(e).split(".")[0])
    loader = DistNeighborLoader(svc, ("paper", torch.from_numpy(mask)), NUM, batch_size=B,
                                shuffle=True, seed=LOADER_SEED)
    loader.set_epoch(EPOCH)
    out = []
    seen = torch.zeros(mask.size, dtype=torch.int64)
    for b in loader:
        out.append(_plain(b) | {"input_id": b.input_id.numpy()})
        seen[b.n_id["paper"][:b.batch_size]] += 1
        b.to_pyg()  # lays out as PyG's hetero loader (checked in the unit tests)
    dist.all_reduce(seen)
    every = DistNeighborLoader(svc, ("author", None), [2, 1], batch_size=8)
    n_every = sum(b.batch_size for b in every)
    svc.shutdown()
    return out, len(loader), seen.numpy(), n_every, errors


@pytest.mark.parametrize("world", [2])
def test_typed_loader_batches_and_every_seed_once(tmp_path, world):
    spec = typed_spec(5)
    g = typed_graph(spec)
    d = str(partition_graph(spec, num_parts=world, out=tmp_path / "p", method="random"))
    mask = spec["masks"]["paper"]["train"]
    seeds = np.flatnonzero(mask)
    res = run_ranks(_load, world, d, mask, timeout=240)
    gb = global_batches(seeds.size, B, world, shuffle=True, drop_last=False, seed=LOADER_SEED,
                        epoch=EPOCH)
    ref = HeteroSampler(g, SEED)
    for rank, (out, n, seen, _, errors) in enumerate(res):
        assert len(errors) == 3  # each bad input is a typed error on every rank
        assert n == len(out) == len(range(rank, len(gb), world))
        for gidx, got in zip(range(rank, len(gb), world), out, strict=True):
            want = _plain(ref.sample([HeteroSampleRequest(
                "paper", seeds[gb[gidx]], NUM, request_key(LOADER_SEED, EPOCH, gidx))])[0])
            np.testing.assert_array_equal(got["input_id"], gb[gidx])
            for key in ("n_id", "edge_index", "e_id", "x", "y"):
                assert got[key].keys() == want[key].keys()
                for k in want[key]:
                    np.testing.assert_array_equal(got[key][k], want[key][k])
            assert set(got["x"]) == {"author", "paper"} and set(got["y"]) == {"paper"}
        np.testing.assert_array_equal(seen, mask.astype(np.int64))  # every seed once, all ranks
    assert sum(r[3] for r in res) == g.num_nodes_of("author")  # ("author", None): every one
