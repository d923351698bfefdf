"""Place by fit (``distributed/fit.py``): the budget takes other hosts' topology first, then
their rows, up to all of them; the decision is the same from every rank's inputs."""

from __future__ import annotations

from mnmg_sampler.distributed.fit import decide

# 4 ranks on 2 hosts; per rank: topology bytes 100, row bytes 1000
HOSTS, TOPO, ROWS = [0, 0, 1, 1], [100] * 4, [1000] * 4


def _host0(budget: int, can_map: bool = True):
    return decide(HOSTS, [budget, budget, 10**9, 10**9], TOPO, ROWS, can_map).hosts[0]


def test_budget_takes_topology_first_then_rows_up_to_all():
    zero, topo, part, full = (_host0(b) for b in (0, 200, 200 + 700, 200 + 2000))
    assert (zero.topology, zero.rows, zero.left) == (False, False, 0)
    assert (topo.topology, topo.rows, topo.left) == (True, False, 0)
    assert (part.topology, part.rows, part.left) == (True, False, 700)
    assert (full.topology, full.rows, full.left) == (True, True, 0)
    assert part.topology_bytes == 200 and part.row_bytes == 2000
    # a budget below the topology goes to the row cache
    below = _host0(150)
    assert (below.topology, below.left) == (False, 150)
    # ranks that cannot map other parts keep no topology, whatever the budget
    assert not _host0(10**9, can_map=False).topology


def test_cache_rows_fill_what_is_left_of_any_table():
    part = _host0(200 + 700)
    assert part.cache_rows(10, 10**6) == 70  # rows of 10 bytes in the 700 left
    assert part.cache_rows(10, 50) == 50  # at most the rows there are
    assert _host0(200 + 2000).cache_rows(10, 10**6) == 0  # every row mapped: no cache


def test_one_placement_for_every_rank_and_the_host_takes_its_smallest_budget():
    p = decide(HOSTS, [10**9, 250, 10**9, 10**9], TOPO, ROWS, True)
    assert p.of(0) == p.of(1) and p.of(0).budget == 250 and p.of(0).left == 50
    assert p.of(2).rows and not p.rows_local and p.hops_local
    assert [h["ranks"] for h in p.report()] == [[0, 1], [2, 3]]
    # one host: nothing is beyond its own parts, every budget holds it
    one = decide([0, 0], [0, 0], TOPO[:2], ROWS[:2], True)
    assert one.hops_local and one.rows_local
