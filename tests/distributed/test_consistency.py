"""Start-up agreement on real ranks: mismatched partition directories or parts fail every rank."""

from __future__ import annotations

import pytest

from mnmg_sampler.errors import PartitionMismatchError
from mnmg_sampler.graph.partition import partition

from .common import small_graph
from .harness import run_ranks


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


def _start_each(rank, world, cases):
    """``_start`` for every case in turn on the same ranks (one spawn for all): the error a
    rank raised, or its result. A mismatch is agreed on every rank, which leaves the group
    usable for the next case."""
    from mnmg_sampler.errors import PartitionMismatchError

    out = []
    for dirs, parts, via in cases:
        try:
            out.append(_start(rank, world, dirs, parts, via))
        except PartitionMismatchError as e:
            out.append(e)
    return out


@pytest.fixture(scope="module")
def started(tmp_path_factory) -> dict:
    """Each case's outcome by rank: different directories (through the service and the
    sampler), a rank loading another rank's part, and two copies of one directory."""
    import shutil

    tmp = tmp_path_factory.mktemp("consistency")
    g = small_graph()
    a = str(partition(g, 2, "random", tmp / "a", seed=1))
    b = str(partition(g, 2, "random", tmp / "b", seed=2))
    r = str(partition(g, 2, "range", tmp / "r"))
    d = partition(g, 2, "random", tmp / "p", seed=3)
    copy = str(shutil.copytree(d, tmp / "copy"))  # e.g. one copy per node
    cases = {"dirs service": ([a, b], [0, 1], "service"),
             "dirs sampler": ([a, b], [0, 1], "sampler"),
             "another part": ([r, r], [0, 0], "sampler"),
             "copies": ([str(d), copy], [0, 1], "service")}
    res = run_ranks(_start_each, 2, list(cases.values()), timeout=240)
    return {name: [by_rank[i] for by_rank in res] for i, name in enumerate(cases)}


def _errors(outcomes: list) -> list[PartitionMismatchError]:
    for e in outcomes:  # every rank raised
        assert isinstance(e, PartitionMismatchError), outcomes
    return outcomes


@pytest.mark.parametrize("via", ["service", "sampler"])
def test_ranks_given_different_partition_dirs_all_raise(started, via):
    errs = _errors(started[f"dirs {via}"])
    for e in errs:
        assert "the manifests differ: rank 0 (2 parts" in e.what and " vs rank 1 (" in e.what
    assert errs[0].what == errs[1].what  # the same diagnosis on every rank


def test_rank_loading_another_ranks_part_all_raise(started):
    for e in _errors(started["another part"]):
        assert "rank 1 loaded part 0" in e.what


def test_same_directory_copies_agree(started):
    assert started["copies"] == ["started"] * 2
