"""Typed partitions: every part holds its rows of every relation, node data per type, the
homogeneous checks and atomic writes; the one-type case is byte-identical to a homogeneous part;
the typed kernel on parts draws exactly what it draws on the whole graph."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mnmg_sampler.errors import GraphFormatError, PartitionError
from mnmg_sampler.graph.api import partition_graph
from mnmg_sampler.graph.csr import CSRGraph
from mnmg_sampler.graph.partition import partition_graph as typed_plan
from mnmg_sampler.graph.partition_io import load_partition, part_graph
from mnmg_sampler.graph.typed import typed_graph
from mnmg_sampler.ops.typed import sample_typed_neighbors

from ..typed_graphs import typed_spec


def _segments(g, owner_rows=None):
    """(dst internal id, relation) -> list of (src internal id, edge id) of the whole graph."""
    out = {}
    for t in range(len(g.node_types)):
        lo, hi = int(g.rel_offset[t]), int(g.rel_offset[t + 1])
        for i in range(int(g.node_type_offset[t + 1] - g.node_type_offset[t])):
            for j in range(hi - lo):
                s = int(g.seg_base[t] + i * (hi - lo) + j)
                a, b = g.indptr[s], g.indptr[s + 1]
                out[(int(g.node_type_offset[t] + i), lo + j)] = list(
                    zip(g.indices[a:b].tolist(), g.edge_ids[a:b].tolist(), strict=True))
    return out


@pytest.mark.parametrize("method", ["random", "range", "hash"])
@pytest.mark.parametrize("parts", [1, 3])
def test_parts_hold_every_relation_and_node_data(tmp_path, method, parts):
    spec = typed_spec()
    g = typed_graph(spec)
    out = partition_graph(spec, num_parts=parts, out=tmp_path / "p", method=method, seed=5)
    whole = _segments(g)
    seen, rows = {}, {t: [] for t in g.node_types}
    for r in range(parts):
        part = load_partition(out, r, parts)
        tp = part.typed
        assert tp.node_types == g.node_types and tp.edge_types == g.edge_types
        n2o = np.asarray(part.new_to_orig)
        # the part as a typed graph over its local rows, neighbors mapped back to internal ids
        pg = part_graph(part)
        local = _segments(pg)
        for (row, rel), nbrs in local.items():
            v = int(part.orig_ids[row])
            assert g.type_of(np.array([v]))[0] == g.rel_dst[rel]
            seen[(v, rel)] = [(int(n2o[u]), e) for u, e in nbrs]
        for t, name in enumerate(g.node_types):
            own = np.asarray(part.orig_ids[tp.type_offset[t]:tp.type_offset[t + 1]])
            ids = own - g.node_type_offset[t]
            assert np.all((ids >= 0) & (ids < g.num_nodes_of(name)))
            rows[name].append(ids)
            if name in g.x:
                np.testing.assert_array_equal(tp.x[name], g.x[name][ids])
                assert tp.x[name].dtype == g.x[name].dtype
            else:
                assert name not in tp.x
            if name in g.y:
                np.testing.assert_array_equal(tp.y[name], g.y[name][ids])
            for split, m in g.masks.get(name, {}).items():
                np.testing.assert_array_equal(tp.masks[name][split], m[ids])
            if parts == 3 and method in ("range", "random"):  # each type balanced to +-1
                n_t = g.num_nodes_of(name)
                assert abs(ids.size - n_t / parts) < 1
    assert seen == whole  # every (node, relation) row once, same neighbors, same order
    for name, chunks in rows.items():  # every node of every type in exactly one part
        np.testing.assert_array_equal(np.sort(np.concatenate(chunks)),
                                      np.arange(g.num_nodes_of(name)))
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["typed"]["node_types"] == list(g.node_types)
    assert manifest["typed"]["x"]["author"] == {"dtype": "<f2", "shape": [3]}
    assert manifest["typed"]["weighted"] == [int(v) for v in g.weighted]


def test_kernel_on_parts_draws_what_it_draws_on_the_graph(tmp_path):
    """RNG keyed on internal ids (fixed by the graph): one typed hop on each part of any
    partitioning equals the same hop on the whole graph, mapped back."""
    g = typed_graph(typed_spec(1))
    nodes = np.arange(g.num_nodes, dtype=np.int64)
    R = len(g.edge_types)
    fan = np.array([[3] * R, [-1] * R, [2] * R], np.int64)
    req = nodes % 3
    rep = np.array([0, 0, 1], np.uint8)
    keys = 100 + req
    ref = sample_typed_neighbors(g, nodes, nodes, keys, req, fan, rep, 7, 1)
    ref_at = np.concatenate([[0], np.cumsum(ref[0])])
    for parts, method in ((2, "random"), (3, "hash")):
        out = partition_graph(g, num_parts=parts, out=tmp_path / f"{method}", method=method)
        for r in range(parts):
            part = load_partition(out, r, parts)
            n2o = np.asarray(part.new_to_orig)
            rows = np.arange(part.num_local_nodes, dtype=np.int64)
            v = np.asarray(part.orig_ids)
            c, nb, rel, e = sample_typed_neighbors(part_graph(part), rows, v, keys[v], req[v],
                                                   fan, rep, 7, 1)
            at = np.concatenate([[0], np.cumsum(c)])
            for i, u in enumerate(v):
                a, b = ref_at[u], ref_at[u + 1]
                assert c[i] == ref[0][u]
                np.testing.assert_array_equal(n2o[nb[at[i]:at[i + 1]]], ref[1][a:b])
                np.testing.assert_array_equal(rel[at[i]:at[i + 1]], ref[2][a:b])
                np.testing.assert_array_equal(e[at[i]:at[i + 1]], ref[3][a:b])


def test_one_type_part_is_the_homogeneous_part(tmp_path):
    rng = np.random.default_rng(2)
    ei = np.stack([rng.integers(0, 40, 200), rng.integers(0, 40, 200)])
    x = rng.random((40, 3), dtype=np.float32)
    typed = partition_graph({"num_nodes": {"n": 40}, "edge_index": {("n", "e", "n"): ei},
                             "x": {"n": x}}, num_parts=3, out=tmp_path / "t", method="random")
    homo = partition_graph(CSRGraph.from_edges(ei[0], ei[1], 40, x=x), num_parts=3,
                           out=tmp_path / "h", method="random")
    for r in range(3):
        for f in ("indptr", "indices", "edge_ids", "orig_ids"):
            assert (typed / f"part{r}/{f}.npy").read_bytes() == \
                (homo / f"part{r}/{f}.npy").read_bytes()
        assert (typed / f"part{r}/x.n.npy").read_bytes()[128:] == \
            (homo / f"part{r}/x.npy").read_bytes()[128:]
        # the homogeneous part read as its one type: the typed kernel's tables of the typed part
        pt, ph = load_partition(typed, r), load_partition(homo, r)
        gt, gh = part_graph(pt), part_graph(ph)
        for f in ("indptr", "indices", "edge_ids", "node_type_offset", "rel_offset", "seg_base",
                  "rel_src", "rel_dst", "weighted"):
            np.testing.assert_array_equal(getattr(gt, f), getattr(gh, f))
        np.testing.assert_array_equal(ph.layout.x["node"], pt.typed.x["n"])
        assert ph.layout.edge_types == (("node", "to", "node"),)
    assert load_partition(homo, 0).typed is None


def test_corrupt_typed_part_fails_at_load(tmp_path):
    out = partition_graph(typed_spec(), num_parts=2, out=tmp_path / "p", method="range")
    f = out / "part1" / "x.paper.npy"
    data = bytearray(f.read_bytes())
    data[-1] ^= 0xFF
    f.write_bytes(bytes(data))
    load_partition(out, 0, 2)
    with pytest.raises(PartitionError, match="x.paper.npy"):
        load_partition(out, 1, 2)


def test_typed_input_refuses_homogeneous_options(tmp_path):
    with pytest.raises(GraphFormatError, match="x="):
        partition_graph(typed_spec(), x=np.zeros((3, 1)), num_parts=2, out=tmp_path / "p")
    assert not (tmp_path / "p").exists()


def test_metis_on_the_homogeneous_view(tmp_path):
    pytest.importorskip("pymetis")
    g = typed_graph(typed_spec())
    plan = typed_plan(g, 2, "metis", seed=1)
    assert sorted(set(plan.assignment.tolist())) == [0, 1]
    out = partition_graph(g, num_parts=2, out=tmp_path / "m", method="metis", seed=1)
    assert load_partition(out, 1, 2).typed is not None


def test_cli_partitions_a_saved_hetero_data(tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("torch_geometric")
    from torch_geometric.data import HeteroData

    from mnmg_sampler.commands.cli import main

    spec = typed_spec()
    d = HeteroData()
    for t, n in spec["num_nodes"].items():
        d[t].num_nodes = n
    for t, x in spec["x"].items():
        d[t].x = torch.from_numpy(x)
    for et, ei in spec["edge_index"].items():
        d[et].edge_index = torch.from_numpy(ei)
    torch.save(d, tmp_path / "g.pt")
    with pytest.raises(SystemExit) as e:
        main(["partition", str(tmp_path / "g.pt"), "--parts", "2", "--method", "hash",
              "--out", str(tmp_path / "p")])
    assert e.value.code == 0
    part = load_partition(tmp_path / "p", 1, 2)
    assert part.typed.node_types == ("author", "field", "paper")
    assert set(part.typed.x) == {"author", "paper"}


def test_damaged_typed_section_is_a_partition_error(tmp_path):
    out = partition_graph(typed_spec(), num_parts=2, out=tmp_path / "p", method="random")
    path = out / "manifest.json"
    m = json.loads(path.read_text())
    m["typed"]["node_type_offset"] = m["typed"]["node_type_offset"][:-1]
    path.write_text(json.dumps(m))
    with pytest.raises(PartitionError, match="typed"):
        load_partition(out, 0, 2)
    del m["typed"]["edge_types"]
    path.write_text(json.dumps(m))
    with pytest.raises(PartitionError, match="typed"):
        load_partition(out, 0, 2)


def test_typed_parts_have_their_own_format_version(tmp_path):
    """Typed manifests carry TYPED_FORMAT_VERSION (a reader of version 1 only refuses them by
    their version); homogeneous ones keep version 1; this reader checks the pair."""
    from mnmg_sampler.graph.partition_io import FORMAT_VERSION, TYPED_FORMAT_VERSION

    out = partition_graph(typed_spec(), num_parts=2, out=tmp_path / "p", method="random")
    homo = partition_graph(CSRGraph.from_edges(np.arange(4), np.arange(1, 5), 5), num_parts=2,
                           out=tmp_path / "h", method="range")
    assert json.loads((homo / "manifest.json").read_text())["format_version"] == 1 == \
        FORMAT_VERSION
    path = out / "manifest.json"
    m = json.loads(path.read_text())
    assert m["format_version"] == TYPED_FORMAT_VERSION != FORMAT_VERSION
    for version in (1, 3):  # typed, but not the typed format this reader knows
        path.write_text(json.dumps(m | {"format_version": version}))
        with pytest.raises(PartitionError, match=rf"is typed \(format {version}\)"):
            load_partition(out, 0, 2)
    path.write_text(json.dumps({k: v for k, v in m.items() if k != "typed"}))
    with pytest.raises(PartitionError, match="no 'typed' section"):
        load_partition(out, 0, 2)
    hm = json.loads((homo / "manifest.json").read_text())
    (homo / "manifest.json").write_text(json.dumps(hm | {"format_version": 3}))
    with pytest.raises(PartitionError, match="format version 3"):
        load_partition(homo, 0, 2)


def test_times_go_with_their_rows(tmp_path):
    spec = typed_spec()
    rng = np.random.default_rng(4)
    spec["edge_time"] = {et: rng.integers(0, 50, ei.shape[1]) for et, ei in
                         spec["edge_index"].items()}
    spec["node_time"] = {t: rng.integers(0, 50, n) for t, n in spec["num_nodes"].items()}
    g = typed_graph(spec)
    out = partition_graph(spec, num_parts=2, out=tmp_path / "p", method="hash")
    for r in range(2):
        part = load_partition(out, r, 2)
        tp = part.typed
        assert tp.time_attr == "time"
        np.testing.assert_array_equal(tp.node_time, g.node_time[np.asarray(part.orig_ids)])
        # each local entry keeps its time: (relation, edge id) names the input edge
        assert tp.edge_time.shape == part.indices.shape
        pg = part_graph(part)
        for t in range(len(g.node_types)):
            lo, hi = int(pg.rel_offset[t]), int(pg.rel_offset[t + 1])
            n_t = int(tp.type_offset[t + 1] - tp.type_offset[t])
            for i in range(n_t):
                for j in range(hi - lo):
                    s = int(pg.seg_base[t] + i * (hi - lo) + j)
                    a, b = part.indptr[s], part.indptr[s + 1]
                    et = g.edge_types[lo + j]
                    np.testing.assert_array_equal(
                        tp.edge_time[a:b], spec["edge_time"][et][part.edge_ids[a:b]])
