"""Cores of emulated hosts (``bench dist --hosts H``, :mod:`mnmg_sampler.bench.cores`)."""

from __future__ import annotations

import os
import threading

import pytest

from mnmg_sampler.bench.cores import host_cores, pinned, usable_cores


def test_each_host_takes_its_own_run_of_cores_and_its_ranks_share_it():
    assert host_cores(2, 2, [0, 1]) == [[0], [1]]
    assert host_cores(4, 2, [0, 1, 2, 3]) == [[0, 1], [0, 1], [2, 3], [2, 3]]
    assert host_cores(4, 2, [0, 1]) == [[0], [0], [1], [1]]
    # unsorted cores, uneven runs; more hosts than ranks: one host per rank
    assert host_cores(3, 3, [5, 3, 4, 2]) == [[2], [3], [4, 5]]
    assert host_cores(2, 8, [0, 1, 2, 3]) == [[0, 1], [2, 3]]


def test_no_pinning_on_one_host_without_cores_or_with_fewer_cores_than_hosts():
    assert host_cores(2, None, [0, 1]) is None
    assert host_cores(4, 1, [0, 1]) is None
    assert host_cores(2, 2, None) is None
    assert host_cores(4, 4, [0, 1, 2]) is None


@pytest.mark.skipif(usable_cores() is None, reason="no CPU affinity on this platform")
def test_pinned_holds_a_thread_and_its_new_threads_then_restores():
    before = usable_cores()
    one = before[-1:]
    seen = []
    with pinned(one):
        assert usable_cores() == one
        t = threading.Thread(target=lambda: seen.append(sorted(os.sched_getaffinity(0))))
        t.start()
        t.join()
    assert seen == [one] and usable_cores() == before
    with pinned(None):  # no cores: nothing changes
        assert usable_cores() == before
