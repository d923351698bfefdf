"""The typed kernel over every mapped part (the typed shared topology), in one process: one
call (serial or parallel) equals the typed kernel on each node's own part, bit for bit
(weighted relation, -1, 0, with and without replacement, several requests); x/y rows of every
type (float16 included) are read in place from the parts in any order; with edge or node time
bounds ("uniform" and "last") the call equals the timed kernel on each part."""

from __future__ import annotations

import numpy as np
import pytest

from mnmg_sampler.distributed.shared_topology import SharedTopology
from mnmg_sampler.graph.api import partition_graph
from mnmg_sampler.graph.partition_io import load_partition, part_graph
from mnmg_sampler.ops.typed import sample_typed_neighbors

from ..typed_graphs import typed_spec


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    d = partition_graph(typed_spec(3), num_parts=3, out=tmp_path_factory.mktemp("t") / "p",
                        method="random", seed=2)
    parts = [load_partition(d, r, 3) for r in range(3)]
    return parts, SharedTopology(parts[1], 1, 3)


def _per_node_reference(monkeypatch, serial, parts, graphs, nodes, keys, req, fan, rep, hop,
                        bounds=None, last=None):
    """The typed kernel on each node's own part, one node a call, with the serial kernels."""
    from mnmg_sampler.ops import cpu

    b = parts[0].boundaries
    ref = [[], [], [], []]
    with monkeypatch.context() as m:
        m.setattr(cpu, "PARALLEL_MIN_NODES", serial)
        for i, v in enumerate(nodes):
            p = int(np.searchsorted(b[1:-1], v, side="right"))
            row = np.array([v - b[p]])
            q = slice(req[i], req[i] + 1)
            timed = {} if bounds is None else {"bounds": bounds[i:i + 1], "last": last[q]}
            o = sample_typed_neighbors(graphs[p], row, np.asarray(parts[p].orig_ids)[row],
                                       keys[i:i + 1], np.zeros(1, np.int64), fan[q], rep[q], 5,
                                       hop, **timed)
            for k in range(4):
                ref[k].append(o[k])
    return [np.concatenate(r) for r in ref]


@pytest.mark.parametrize("parallel", [False, True])
def test_one_call_over_parts_equals_the_kernel_on_each_part(shared, parallel, monkeypatch):
    from mnmg_sampler.ops import cpu

    serial = cpu.PARALLEL_MIN_NODES
    if parallel:  # the parallel kernels (large frontiers) on this small one
        monkeypatch.setattr(cpu, "PARALLEL_MIN_NODES", 1)
    parts, ts = shared
    b = parts[0].boundaries
    rng = np.random.default_rng(0)
    R = len(parts[0].typed.edge_types)
    nodes = rng.integers(0, int(b[-1]), 300)
    req = rng.integers(0, 3, nodes.size)
    keys = req * 7 + 1
    fan = rng.integers(-1, 4, (3, R))
    fan[0, :] = [-1, 0, 2, 3, 1][:R]
    rep = np.array([0, 1, 0], np.uint8)
    peer0 = ts.peer_nodes
    for hop in (0, 1):
        got = ts.typed_hop(nodes, keys, req, fan, rep, 5, hop)
        ref = _per_node_reference(monkeypatch, serial, parts, [part_graph(p) for p in parts],
                                  nodes, keys, req, fan, rep, hop)
        for k in range(4):
            np.testing.assert_array_equal(got[k], ref[k])
        assert set(np.unique(got[2]).tolist()) == set(range(R))  # every relation sampled
    own = (nodes >= b[1]) & (nodes < b[2])
    assert ts.peer_nodes - peer0 == 2 * int((~own).sum())


def test_rows_of_every_type_read_in_place(shared):
    parts, ts = shared
    b = parts[0].boundaries
    assert set(ts.type_x) == {"author", "paper"} and set(ts.type_y) == {"paper"}
    for t, name in enumerate(ts.node_types):
        ids = np.concatenate([np.arange(b[p] + parts[p].typed.type_offset[t],
                                        b[p] + parts[p].typed.type_offset[t + 1])
                              for p in range(3)])
        perm = np.random.default_rng(t).permutation(ids.size)
        rows = ts.type_rows(name, t, ids[perm])
        for key in ("x", "y"):
            src = getattr(parts[0].typed, key)
            if name not in src:
                assert key not in rows
                continue
            whole = np.concatenate([np.asarray(getattr(p.typed, key)[name]) for p in parts])
            assert rows[key].dtype == whole.dtype and rows[key].shape == whole[perm].shape
            np.testing.assert_array_equal(rows[key], whole[perm])


def _timed_shared(tmp_path, kind: str):
    """A typed graph with edge or node time (time ties included), 3 parts, rank 1's view."""
    spec = typed_spec(4)
    g = np.random.default_rng(9)
    if kind == "edge":
        spec["edge_time"] = {et: g.integers(0, 12, ei.shape[1])
                             for et, ei in spec["edge_index"].items()}
    else:
        spec["node_time"] = {t: g.integers(0, 12, n) for t, n in spec["num_nodes"].items()}
    d = partition_graph(spec, num_parts=3, out=tmp_path / kind, method="random", seed=5)
    parts = [load_partition(d, r, 3) for r in range(3)]
    return parts, SharedTopology(parts[1], 1, 3)


@pytest.mark.parametrize("kind", ["edge", "node"])
def test_time_bounds_over_parts_equal_the_kernel_on_each_part(tmp_path, kind, monkeypatch):
    """With time bounds (uniform and "last" requests, a weighted relation, bounds cutting
    every segment anywhere from none to all), one call over the parts equals the typed kernel
    with ``bounds`` on each node's own part (edge times of that part, node times by new id)."""
    from mnmg_sampler.ops import cpu

    serial = cpu.PARALLEL_MIN_NODES
    monkeypatch.setattr(cpu, "PARALLEL_MIN_NODES", 1)  # the parallel kernels too
    parts, ts = _timed_shared(tmp_path, kind)
    b = parts[0].boundaries
    if kind == "node":
        whole = np.concatenate([np.asarray(p.typed.node_time) for p in parts])
        np.testing.assert_array_equal(ts.node_time, whole)
    rng = np.random.default_rng(1)
    R = len(parts[0].typed.edge_types)
    nodes = rng.integers(0, int(b[-1]), 400)
    req = rng.integers(0, 4, nodes.size)
    keys = req * 5 + 3
    fan = rng.integers(-1, 4, (4, R))
    rep = np.array([0, 1, 0, 0], np.uint8)
    last = np.array([0, 0, 1, 1], np.uint8)
    bounds = rng.integers(-1, 14, nodes.size)
    graphs = []
    for p in parts:
        gp = part_graph(p)
        gp.edge_time = None if p.typed.edge_time is None else np.asarray(p.typed.edge_time)
        gp.node_time = ts.node_time
        graphs.append(gp)
    for hop in (0, 1):
        got = ts.typed_hop(nodes, keys, req, fan, rep, 5, hop, bounds, last)
        ref = _per_node_reference(monkeypatch, serial, parts, graphs, nodes, keys, req, fan,
                                  rep, hop, bounds, last)
        for k in range(4):
            np.testing.assert_array_equal(got[k], ref[k])
        untimed = ts.typed_hop(nodes, keys, req, fan, rep, 5, hop)
        assert got[1].size < untimed[1].size  # the bounds cut some segments

