"""The torch-ops dedup (any device) against the numba hash-table dedup: bit-identical."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mnmg_sampler.ops.dedup import dedup_hop
from mnmg_sampler.ops.dedup_torch import dedup_hop_torch


def _random_case(rng: np.random.Generator, R: int, id_range: int, unique_nid: bool = True):
    nid_parts, cand_parts = [], []
    for _ in range(R):
        k = int(rng.integers(0, 8))
        if unique_nid:
            nid_parts.append(rng.choice(id_range, size=min(k, id_range), replace=False))
        else:
            nid_parts.append(rng.integers(0, id_range, k))
        cand_parts.append(rng.integers(0, id_range, int(rng.integers(0, 20))))

    def flat(parts):
        off = np.zeros(len(parts) + 1, np.int64)
        np.cumsum([p.size for p in parts], out=off[1:])
        data = np.concatenate(parts).astype(np.int64) if parts else np.empty(0, np.int64)
        return data, off

    return (*flat(nid_parts), *flat(cand_parts))


def _compare(nid, nid_off, cand, cand_off):
    want = dedup_hop(nid, nid_off, cand, cand_off)
    got = dedup_hop_torch(*(torch.from_numpy(a) for a in (nid, nid_off, cand, cand_off)))
    for w, g in zip(want, got, strict=True):
        assert g.dtype == torch.int64
        np.testing.assert_array_equal(g.numpy(), w)
    return got


@pytest.mark.parametrize("trial", range(25))
def test_matches_hash_table_dedup(trial):
    rng = np.random.default_rng(trial)
    R = int(rng.integers(1, 7))
    id_range = int(rng.choice([5, 30, 1000]))
    _compare(*_random_case(rng, R, id_range, unique_nid=trial % 3 != 0))


def test_large_ids_do_not_overflow():
    big = np.array([2**62, 2**62 + 1, 5], np.int64)
    nid, nid_off = big[:1], np.array([0, 1, 1], np.int64)
    cand = np.array([2**62 + 1, 2**62, 2**62 + 1, 5, 2**62 + 1], np.int64)
    cand_off = np.array([0, 3, 5], np.int64)
    new, new_off, local = _compare(nid, nid_off, cand, cand_off)
    assert new.tolist() == [2**62 + 1, 5, 2**62 + 1]
    assert local.tolist() == [1, 0, 1, 0, 1]


def test_known_example_and_empty_requests():
    # request 0: n_id [7, 3], candidates [3, 9, 9, 7, 4]; request 1 empty; request 2: only cands.
    nid = np.array([7, 3], np.int64)
    nid_off = np.array([0, 2, 2, 2], np.int64)
    cand = np.array([3, 9, 9, 7, 4, 8, 8], np.int64)
    cand_off = np.array([0, 5, 5, 7], np.int64)
    new, new_off, local = _compare(nid, nid_off, cand, cand_off)
    assert new.tolist() == [9, 4, 8]
    assert new_off.tolist() == [0, 2, 2, 3]
    assert local.tolist() == [1, 2, 2, 0, 3, 0, 0]


def test_no_candidates_and_no_requests():
    _compare(np.array([1, 2], np.int64), np.array([0, 2], np.int64),
             np.empty(0, np.int64), np.array([0, 0], np.int64))
    e = np.empty(0, np.int64)
    new, new_off, local = dedup_hop_torch(torch.from_numpy(e), torch.zeros(1, dtype=torch.int64),
                                          torch.from_numpy(e), torch.zeros(1, dtype=torch.int64))
    assert new.numel() == 0 and local.numel() == 0 and new_off.tolist() == [0]
