"""Start-up agreement on real ranks: mismatched partition directories or parts fail every rank."""

from __future__ import annotations

import pytest

from mnmg_sampler.errors import PartitionMismatchError
from mnmg_sampler.graph.partition import partition

from .common import small_graph
from .harness import RankFailure, run_ranks


def _start(rank, world, dirs, parts, via):
    from mnmg_sampler.graph.partition_io import load_partition

    part = load_partition(dirs[rank], parts[rank], world)
    if via == "service":
        from mnmg_sampler.distributed.service import SamplingService

        svc = SamplingService(part, seed=1, features=False)
        svc.shutdown()
    else:
        from mnmg_sampler.distributed.sampler import DistSampler

        DistSampler(part, seed=1)
    return "started"


def _errors(exc: RankFailure, world: int) -> dict[int, BaseException]:
    assert sorted(exc.errors) == list(range(world)), exc  # every rank raised
    out = {}
    for r, (e, tb) in exc.errors.items():
        assert isinstance(e, PartitionMismatchError), tb
        out[r] = e
    return out


@pytest.mark.parametrize("via", ["service", "sampler"])
def test_ranks_given_different_partition_dirs_all_raise(tmp_path, via):
    g = small_graph()
    a = str(partition(g, 2, "random", tmp_path / "a", seed=1))
    b = str(partition(g, 2, "random", tmp_path / "b", seed=2))
    with pytest.raises(RankFailure) as ei:
        run_ranks(_start, 2, [a, b], [0, 1], via, timeout=120)
    errs = _errors(ei.value, 2)
    for e in errs.values():
        assert "the manifests differ: rank 0 (2 parts" in e.what and " vs rank 1 (" in e.what
    assert errs[0].what == errs[1].what  # the same diagnosis on every rank


def test_rank_loading_another_ranks_part_all_raise(tmp_path):
    d = str(partition(small_graph(), 2, "range", tmp_path / "p"))
    with pytest.raises(RankFailure) as ei:
        run_ranks(_start, 2, [d, d], [0, 0], "sampler", timeout=120)
    for e in _errors(ei.value, 2).values():
        assert "rank 1 loaded part 0" in e.what


def test_same_directory_copies_agree(tmp_path):
    import shutil

    d = partition(small_graph(), 2, "random", tmp_path / "p", seed=3)
    copy = shutil.copytree(d, tmp_path / "copy")  # e.g. one copy per node
    assert run_ranks(_start, 2, [str(d), str(copy)], [0, 1], "service",
                     timeout=120) == ["started"] * 2
