"""``ops.typed.group_hops_by_relation``: one counting-sort pass gives what a stable sort by
relation and a gather per relation give (edge_index rows in local ids, edge ids, counts per hop);
and ``group_nodes_by_type`` gives what a mask per type gives."""

from __future__ import annotations

import numpy as np
import pytest

from mnmg_sampler.ops.typed import group_hops_by_relation, group_nodes_by_type


def _reference(src, dst, rel, eid, edge_hop, loc, R, H):
    order = np.argsort(rel, kind="stable")
    out = []
    for r in range(R):
        sel = order[rel[order] == r]
        out.append((np.stack([loc[src[sel]], loc[dst[sel]]]), eid[sel],
                    np.bincount(edge_hop[sel], minlength=H)))
    return out


@pytest.mark.parametrize("run", [1, 7])
def test_group_hops_by_relation_equals_a_stable_sort_and_gathers(run):
    g = np.random.default_rng(3)
    R, H, N = 5, 3, 300
    front = [0, 40, 130, 300]  # hop h's frontier: batch indices front[h] .. front[h + 1] - 1
    counts = [g.integers(0, 12, front[h + 1] - front[h]) for h in range(H)]  # zeros too
    dst = np.concatenate([np.repeat(np.arange(front[h], front[h + 1]), counts[h])
                          for h in range(H)])
    E = dst.size
    # relation R - 1 gets no edge; run > 1: runs of one relation (as a node's draws come)
    rel = np.repeat(g.integers(0, R - 1, E), g.integers(1, run + 1, E))[:E]
    src = g.integers(0, N, E)
    eid = g.permutation(E).astype(np.int64)
    edge_hop = np.repeat(np.arange(H), [c.sum() for c in counts])
    loc = g.permutation(N).astype(np.int64)
    cut = np.cumsum([0] + [int(c.sum()) for c in counts])
    hops = [(src[cut[h]:cut[h + 1]], front[h], counts[h], rel[cut[h]:cut[h + 1]],
             eid[cut[h]:cut[h + 1]]) for h in range(H)]
    ei, eid_o, bounds, per_hop = group_hops_by_relation(hops, loc, R)
    assert bounds[0] == 0 and bounds[-1] == E
    for r, (ref_ei, ref_eid, ref_hop) in enumerate(_reference(src, dst, rel, eid, edge_hop, loc,
                                                              R, H)):
        a, b = bounds[r], bounds[r + 1]
        got = ei[2 * a:2 * b].reshape(2, b - a)
        np.testing.assert_array_equal(got, ref_ei)
        np.testing.assert_array_equal(eid_o[a:b], ref_eid)
        np.testing.assert_array_equal(per_hop[r], ref_hop)
    assert bounds[R] - bounds[R - 1] == 0


def test_group_hops_by_relation_of_no_edges():
    z = np.zeros(0, np.int64)
    ei, eid_o, bounds, per_hop = group_hops_by_relation([(z, 0, np.zeros(4, np.int64), z, z),
                                                         (z, 4, z, z, z)], np.arange(4), 3)
    assert ei.size == 0 and eid_o.size == 0 and bounds.tolist() == [0, 0, 0, 0]
    assert per_hop.shape == (3, 2) and not per_hop.any()


def test_group_nodes_by_type_equals_a_mask_per_type():
    g = np.random.default_rng(5)
    off = np.array([0, 40, 40, 100, 130], np.int64)  # type 1 is empty
    nid = g.permutation(130)[:90].astype(np.int64)
    n_nodes = [10, 50, 0, 30]
    ids, at, per_hop, loc = group_nodes_by_type(nid, off, n_nodes)
    types = np.searchsorted(off, nid, side="right") - 1
    hop = np.repeat(np.arange(len(n_nodes)), n_nodes)
    for t in range(4):
        sel = np.flatnonzero(types == t)
        np.testing.assert_array_equal(ids[at[t]:at[t + 1]], nid[sel] - off[t])
        np.testing.assert_array_equal(loc[sel], np.arange(sel.size))
        np.testing.assert_array_equal(per_hop[t], np.bincount(hop[sel], minlength=4))
    with pytest.raises(ValueError):
        group_nodes_by_type(nid, off, [10, 50])
