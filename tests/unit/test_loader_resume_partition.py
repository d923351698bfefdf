"""``load_state_dict`` of an owner-split loader checks the partitioning it resumes on: its
batches follow the partitioning, so a state saved on another one is refused with a typed error
(a global-split loader, whose batches do not depend on it, resumes anywhere)."""

from __future__ import annotations

import numpy as np
import pytest

from mnmg_sampler.errors import PartitionMismatchError
from mnmg_sampler.graph.csr import CSRGraph
from mnmg_sampler.graph.partition import partition


@pytest.fixture(autouse=True)
def _world_of_one(tmp_path):
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0,
                            world_size=1)
    yield
    dist.destroy_process_group()


def _graph(seed: int) -> CSRGraph:
    rng = np.random.default_rng(seed)
    return CSRGraph.from_edges(rng.integers(0, 60, 300), rng.integers(0, 60, 300), 60)


def _loader(d, split: str):
    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.graph.partition_io import load_partition
    from mnmg_sampler.loaders.neighbor import DistNeighborLoader

    svc = SamplingService(load_partition(d, 0, 1), seed=1, features=False)
    return svc, DistNeighborLoader(svc, None, [2, 2], 8, shuffle=True, seed=3, split=split,
                                   prefetch=1)


def _ids(batches) -> list[list[int]]:
    return [b.n_id.tolist() for b in batches]


def test_owner_split_state_refuses_another_partitioning(tmp_path):
    a = partition(_graph(1), 1, "random", tmp_path / "a", seed=1)
    b = partition(_graph(2), 1, "random", tmp_path / "b", seed=1)  # the same node count
    svc, first = _loader(a, "owner")
    try:
        first.set_epoch(1)
        full = list(first)
        first.set_epoch(1)
        it = iter(first)
        next(it)
        next(it)
        state = first.state_dict()
        assert len(state["partition"]) == 3
    finally:
        svc.shutdown()
    svc, other = _loader(b, "owner")
    try:
        with pytest.raises(PartitionMismatchError, match="saved on another partitioning"):
            other.load_state_dict(state)
        old = {k: v for k, v in state.items() if k != "partition"}  # saved by an older version
        with pytest.raises(PartitionMismatchError, match="records no partitioning"):
            other.load_state_dict(old)
    finally:
        svc.shutdown()
    svc, same = _loader(a, "owner")
    try:
        same.load_state_dict(state)  # the same partition directory: resumes exactly
        assert _ids(same) == _ids(full[2:])
    finally:
        svc.shutdown()


def test_global_split_state_resumes_on_any_partitioning(tmp_path):
    a = partition(_graph(1), 1, "random", tmp_path / "a", seed=1)
    b = partition(_graph(1), 1, "range", tmp_path / "b")
    svc, first = _loader(a, "global")
    try:
        first.set_epoch(2)
        full = list(first)
        first.set_epoch(2)
        it = iter(first)
        next(it)
        state = first.state_dict()
        assert "partition" not in state
    finally:
        svc.shutdown()
    svc, other = _loader(b, "global")
    try:
        other.load_state_dict(state)
        assert _ids(other) == _ids(full[1:])  # the same batches, whatever the partitioning
    finally:
        svc.shutdown()
