"""Loader input checked at construction on real ranks: a bad input on one rank fails every rank
(no hang), masks are PyG masks, and an empty input gives no batch anywhere."""

from __future__ import annotations

import numpy as np

from mnmg_sampler.graph.partition import partition

from .common import as_arrays, assert_same, small_graph
from .harness import run_ranks

N = 240  # nodes of small_graph()

BAD = {  # rank 1's input; rank 0 always passes np.arange(40)
    "out_of_range": np.array([1, 2, N]),
    "negative": np.array([3, -1]),
    "duplicate": np.array([5, 6, 5]),
    "float": np.array([1.0, 2.0]),
    "short_mask": np.ones(N - 1, dtype=bool),
    "two_d": np.arange(6).reshape(2, 3),
    "other_seeds": np.arange(1, 41),  # valid, but not what rank 0 has
}


def _cases(rank, world, d):
    import torch

    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.errors import SamplingInputError
    from mnmg_sampler.graph.partition_io import load_partition
    from mnmg_sampler.loaders.neighbor import DistNeighborLoader

    svc = SamplingService(load_partition(d, rank, world), seed=2, features=False)
    out = {}
    for name, bad in BAD.items():
        seeds = bad if rank == 1 else np.arange(40)
        try:
            DistNeighborLoader(svc, seeds, [3, 2], 8)
            out[name] = None
        except SamplingInputError as e:
            out[name] = str(e)
    # a bool mask is PyG's: its True positions are the seeds
    mask = torch.zeros(N, dtype=torch.bool)
    mask[[3, 17, 40, 41, 99, 200]] = True
    by_mask = [as_arrays(b) for b in DistNeighborLoader(svc, mask, [3, 2], 2)]
    by_ids = [as_arrays(b) for b in DistNeighborLoader(svc, torch.tensor([3, 17, 40, 41, 99,
                                                                           200]), [3, 2], 2)]
    # empty input: no batch on any rank, and the service goes on serving
    empty = DistNeighborLoader(svc, torch.empty(0, dtype=torch.long), [3, 2], 8)
    empty_len, empty_items = len(empty), list(empty)
    after = len(list(DistNeighborLoader(svc, np.arange(30), [3], 8)))
    svc.shutdown()
    return out, by_mask, by_ids, empty_len, empty_items, after


def test_bad_input_on_one_rank_fails_every_rank_and_masks_and_empty(tmp_path):
    d = str(partition(small_graph(), 2, "random", tmp_path / "p", seed=4))
    res = run_ranks(_cases, 2, d, timeout=180)
    for rank, (out, by_mask, by_ids, empty_len, empty_items, after) in enumerate(res):
        for name in BAD:
            assert out[name] is not None, (rank, name)  # every rank raised, none hung
        if rank == 0:  # the valid rank names the one whose input is bad
            for name in ("out_of_range", "negative", "duplicate", "float", "short_mask"):
                assert "rank 1" in out[name], (name, out[name])
        expect = {"out_of_range": f"id {N}, out of range", "negative": "id -1",
                  "duplicate": "repeated ids", "float": "dtype float64",
                  "short_mask": f"bool mask of length {N - 1}", "two_d": "shape (2, 3)",
                  "other_seeds": "differs between ranks: rank 0 vs rank 1"}
        for name, text in expect.items():
            assert text in out[name], (rank, name, out[name])
        assert len(by_mask) == len(by_ids) > 0
        for a, b in zip(by_mask, by_ids, strict=True):
            assert_same(a, b)
        assert empty_len == 0 and empty_items == []
        assert after == 2  # 30 seeds, batch 8, 2 ranks: 4 global batches, 2 per rank
