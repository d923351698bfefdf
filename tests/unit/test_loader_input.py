"""check_input_nodes: what a loader accepts as seeds (PyG's conventions) and what it refuses."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mnmg_sampler.errors import SamplingInputError
from mnmg_sampler.loaders.neighbor import check_input_nodes


@pytest.mark.parametrize("ids", [[4, 0, 9], np.array([4, 0, 9], np.uint16), range(3),
                                 torch.tensor([4, 0, 9], dtype=torch.int32), (9,)])
def test_integer_ids_in_any_container(ids):
    got = check_input_nodes(ids, 10)
    assert got.dtype == np.int64 and np.array_equal(got, np.asarray(list(ids), np.int64))


def test_bool_mask_is_a_mask_not_ids_0_and_1():
    mask = torch.tensor([False, True, True, False, True])
    assert check_input_nodes(mask, 5).tolist() == [1, 2, 4]
    assert check_input_nodes(np.zeros(5, bool), 5).size == 0
    with pytest.raises(SamplingInputError, match="bool mask of length 2"):
        check_input_nodes(torch.tensor([True, False]), 5)


@pytest.mark.parametrize("empty", [[], np.empty(0), torch.empty(0),
                                   torch.empty(0, dtype=torch.long)])
def test_empty_input_is_valid(empty):
    got = check_input_nodes(empty, 5)
    assert got.dtype == np.int64 and got.size == 0


@pytest.mark.parametrize("bad, text", [
    (np.array([1.0, 2.0]), "dtype float64"),
    (torch.tensor([1.0]), "dtype float32"),
    (np.array([0.5]), "must be integers"),
    (np.array([1, 5]), "id 5, out of range"),
    (np.array([-2, 1]), "id -2"),
    (np.array([2**40]), "out of range"),
    (np.array([1, 2, 1, 2]), "2 repeated ids (e.g. 1)"),
    (np.array([[1, 2]]), "shape (1, 2)"),
    (np.int64(3), "shape ()"),
    (np.array(["1"]), "dtype <U1"),
])
def test_refused_with_a_typed_error(bad, text):
    with pytest.raises(SamplingInputError) as e:
        check_input_nodes(bad, 5)
    assert text in str(e.value) and "Fix:" in str(e.value)
