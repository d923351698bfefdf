"""dedup_hop's direct maps (ids in a small range) give exactly the hash tables' results."""

import numpy as np
import pytest

from mnmg_sampler.ops import dedup


def _case(rng, R, id_range):
    nid_sizes = rng.integers(0, 30, R)
    cand_sizes = rng.integers(0, 200, R)
    nid = np.concatenate([rng.choice(id_range, s, replace=False) for s in nid_sizes]
                         + [np.zeros(0, np.int64)]).astype(np.int64)
    cand = rng.integers(0, id_range, int(cand_sizes.sum())).astype(np.int64)
    off = lambda s: np.concatenate([[0], np.cumsum(s)]).astype(np.int64)  # noqa: E731
    return nid, off(nid_sizes), cand, off(cand_sizes)


@pytest.mark.parametrize("R", [1, 2, 7])
def test_dense_equals_hash(monkeypatch, R):
    rng = np.random.default_rng(R)
    nid, nid_off, cand, cand_off = _case(rng, R, 300)
    monkeypatch.setattr(dedup, "DENSE_FACTOR", 10**9)
    dense = dedup.dedup_hop(nid, nid_off, cand, cand_off)
    dense_again = dedup.dedup_hop(nid, nid_off, cand, cand_off)  # maps reset between requests
    monkeypatch.setattr(dedup, "DENSE_FACTOR", 0)
    hashed = dedup.dedup_hop(nid, nid_off, cand, cand_off)
    for d, d2, h in zip(dense, dense_again, hashed, strict=True):
        np.testing.assert_array_equal(d, h)
        np.testing.assert_array_equal(d2, h)
    new, new_off, local = hashed
    for r in range(R):  # and both are a first-occurrence renumbering
        ids = np.concatenate([nid[nid_off[r]:nid_off[r + 1]], new[new_off[r]:new_off[r + 1]]])
        np.testing.assert_array_equal(ids[local[cand_off[r]:cand_off[r + 1]]],
                                      cand[cand_off[r]:cand_off[r + 1]])


def test_renumbering_small_case():
    nid = np.arange(10, dtype=np.int64)
    cand = np.array([3, 11, 11, 12], np.int64)
    new, new_off, local = dedup.dedup_hop(nid, np.array([0, 10]), cand, np.array([0, 4]))
    assert new.tolist() == [11, 12] and local.tolist() == [3, 10, 10, 11]


def test_kept_maps_serve_calls_of_any_range_and_stay_clean(monkeypatch):
    """The thread's kept direct maps: calls over a small, a larger and a small id range again
    give the hash tables' results, the maps grow to the larger range and hold only -1 between
    calls; maps over the byte budget are not kept."""
    monkeypatch.setattr(dedup, "_kept", __import__("threading").local())
    rng = np.random.default_rng(5)
    for id_range in (300, 5000, 300, 5000):
        case = _case(rng, 3, id_range)
        monkeypatch.setattr(dedup, "DENSE_FACTOR", 10**9)
        dense = dedup.dedup_hop(*case)
        kept = dedup._kept.maps
        assert kept is not None and (kept == -1).all()
        monkeypatch.setattr(dedup, "DENSE_FACTOR", 0)
        for d, h in zip(dense, dedup.dedup_hop(*case), strict=True):
            np.testing.assert_array_equal(d, h)
    assert dedup._kept.maps.shape[1] > 1000  # grown to the larger range, kept after it
    monkeypatch.setattr(dedup, "MAPS_KEPT_BYTES", 0)
    monkeypatch.setattr(dedup, "DENSE_FACTOR", 10**9)
    dedup._kept.maps = None
    dedup.dedup_hop(*_case(rng, 3, 300))
    assert dedup._kept.maps is None
