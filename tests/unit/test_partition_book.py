"""PartitionBook: owner/local of ids in any integer dtype, on the ids' device, pure torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mnmg_sampler.distributed.partition_book import PartitionBook
from mnmg_sampler.errors import PartitionError, SamplingInputError

INT_DTYPES = [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64]


def reference(boundaries: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    owner = np.array([int(np.nonzero(boundaries[:-1] <= v)[0].max()) for v in ids])
    return owner, ids - boundaries[owner]


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_owner_and_local_every_dtype(dtype):
    b = np.array([0, 3, 3, 7, 10, 40])  # part 1 is empty
    book = PartitionBook(b)
    ids_np = np.arange(40)
    ids = torch.tensor(ids_np, dtype=dtype)
    own, loc = reference(b, ids_np)
    got = book.owner(ids)
    assert got.dtype == torch.int64 and got.device == ids.device
    assert got.tolist() == own.tolist()
    assert 1 not in got.tolist()
    assert book.local(ids).tolist() == loc.tolist()
    o2, l2 = book.locate(ids)
    assert o2.tolist() == own.tolist() and l2.tolist() == loc.tolist()
    assert ids.dtype == dtype  # inputs are not modified


@pytest.mark.parametrize("dtype", [torch.int16, torch.int32, torch.int64])
def test_ids_wider_than_dtype_range_of_boundaries(dtype):
    # num_nodes does not fit int16: boundaries cannot be cast down, ids are widened instead
    b = [0, 20_000, 32_767, 70_000, 3_000_000_000]
    book = PartitionBook(b)
    vals = [0, 19_999, 20_000, 32_766, 32_767]
    ids = torch.tensor(vals, dtype=dtype)
    assert book.owner(ids).tolist() == [0, 0, 1, 1, 2]
    assert book.local(ids).tolist() == [0, 19_999, 0, 12_766, 0]
    book.check(ids)
    if dtype == torch.int64:
        big = torch.tensor([69_999, 70_000, 2_999_999_999])
        assert book.owner(big).tolist() == [2, 3, 3]
        assert book.local(big).tolist() == [37_232, 0, 2_999_929_999]


def test_random_ids_against_numpy_reference():
    rng = np.random.default_rng(0)
    sizes = rng.integers(0, 50, 8)
    b = np.concatenate([[0], np.cumsum(sizes)])
    book = PartitionBook(torch.tensor(b))
    ids_np = rng.integers(0, b[-1], 500)
    for dtype in (torch.int32, torch.int64):
        own, loc = reference(b, ids_np)
        ids = torch.tensor(ids_np, dtype=dtype)
        assert np.array_equal(book.owner(ids).tolist(), own)
        assert np.array_equal(book.local(ids).tolist(), loc)


def test_shape_is_kept_and_boundaries_are_cached_per_device_and_dtype():
    book = PartitionBook([0, 2, 4])
    ids = torch.tensor([[0, 1], [2, 3]], dtype=torch.int32)
    assert book.owner(ids).tolist() == [[0, 0], [1, 1]]
    assert book.owner(torch.tensor([], dtype=torch.int64)).shape == (0,)
    first = book._on(ids.device, torch.int32)
    book.owner(ids)
    assert book._on(ids.device, torch.int32) is first
    assert (book.num_parts, book.num_nodes) == (2, 4)
    assert book.boundaries.dtype == torch.int64


def test_check_rejects_out_of_range_ids():
    book = PartitionBook([0, 5, 10])
    book.check(torch.tensor([0, 9], dtype=torch.int32))
    book.check(torch.tensor([], dtype=torch.int64))
    for bad in ([10], [-1], [3, 11]):
        with pytest.raises(SamplingInputError, match=r"out of range.*10 nodes"):
            book.check(torch.tensor(bad, dtype=torch.int16))
    with pytest.raises(SamplingInputError, match="dtype"):
        book.owner(torch.tensor([1.0]))
    # without check, out-of-range ids map outside [0, num_parts)
    assert book.owner(torch.tensor([-1, 10])).tolist() == [-1, 2]


@pytest.mark.parametrize("bad", [[], [0], [1, 5], [0, 5, 3], [[0, 1], [1, 2]]])
def test_invalid_boundaries(bad):
    with pytest.raises(PartitionError):
        PartitionBook(bad)


def test_matches_a_written_partition(tmp_path):
    from mnmg_sampler.graph.csr import CSRGraph
    from mnmg_sampler.graph.partition import partition
    from mnmg_sampler.graph.partition_io import load_partition

    rng = np.random.default_rng(1)
    g = CSRGraph.from_edges(rng.integers(0, 60, 300), rng.integers(0, 60, 300), 60)
    out = partition(g, 3, "random", tmp_path / "p", seed=2)
    parts = [load_partition(out, r) for r in range(3)]
    book = PartitionBook(parts[0].boundaries)
    new_ids = torch.arange(60, dtype=torch.int32)
    own, loc = book.locate(new_ids)
    for v in range(60):
        p = parts[int(own[v])]
        assert p.orig_ids[int(loc[v])] == p.new_to_orig[v]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_ids_stay_on_device():
    book = PartitionBook([0, 3, 7, 10])
    ids = torch.tensor([0, 3, 9], dtype=torch.int32, device="cuda")
    own = book.owner(ids)
    assert own.device == ids.device and own.cpu().tolist() == [0, 1, 2]
    assert book.local(ids).cpu().tolist() == [0, 0, 2]
