"""DistNeighborLoader takes PyG NeighborLoader's arguments: those that apply work, the others are
accepted at PyG's default value and otherwise refused with a typed error."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from mnmg_sampler import DistNeighborLoader, SamplingInputError
from mnmg_sampler.loaders.seeds import AllNodes


@pytest.fixture(autouse=True)
def _world_of_one(tmp_path):
    # the loader checks its arguments collectively: a gloo world of one rank
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0,
                            world_size=1)
    yield
    dist.destroy_process_group()


def _loader(**kw):
    service = SimpleNamespace(num_nodes=10)  # construction needs only the node count here
    return DistNeighborLoader(service, rank=0, world_size=1, **kw)


def test_pyg_keywords_and_defaults():
    loader = _loader(num_neighbors=[5, 0], input_nodes=None, batch_size=4, shuffle=True,
                     drop_last=False, replace=True, subgraph_type="directional",
                     directed=True, disjoint=False, num_workers=0, transform=None,
                     input_time=None, is_sorted=False, filter_per_worker=None)
    # None = every node, as in PyG: a rule (position i is node i), never an array of num_nodes
    assert isinstance(loader.input_nodes, AllNodes) and len(loader.input_nodes) == 10
    assert np.array_equal(loader.input_nodes.ids(np.arange(10)), np.arange(10))
    assert loader.num_neighbors == [5, 0] and len(loader) == 3 and loader.replace
    assert _loader(num_neighbors=[3]).batch_size == 1  # PyG's DataLoader default


@pytest.mark.parametrize("kw, needle", [
    ({"subgraph_type": "induced"}, "subgraph_type='induced' is not supported"),
    ({"subgraph_type": "bidirectional"}, "directional"),
    ({"disjoint": True}, "disjoint=True is not supported"),
    ({"directed": False}, "directed=False"),
    ({"num_workers": 4}, "prefetch"),
    ({"input_time": np.zeros(3)}, "input_time"),
    ({"transform": print}, "transform"),
    ({"fanout": [3]}, "unexpected argument 'fanout'"),
])
def test_unsupported_arguments_are_typed_errors(kw, needle):
    with pytest.raises(SamplingInputError, match=needle):
        _loader(num_neighbors=[3], **kw)


def test_num_neighbors_is_required():
    with pytest.raises(SamplingInputError, match="num_neighbors is required"):
        _loader(input_nodes=[1, 2])
