"""Readers: edge lists (plain and gzip), npz edge arrays, the gnn-benchmark layout, and errors."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from mnmg_sampler.errors import GraphFormatError
from mnmg_sampler.graph.readers import (
    is_gnn_benchmark,
    parse_edge_list,
    read_edge_list,
    read_gnn_benchmark,
    read_npz,
)

EDGES = [(0, 1), (0, 2), (2, 1), (3, 3), (1, 0), (0, 1)]  # a self-loop and a duplicate
TEXT = (
    "# Directed graph: test\n"
    "# FromNodeId\tToNodeId\n"
    "0\t1\n"
    "0 2\n"
    "\n"
    "   2    1   \n"
    "3\t3  # trailing comment\n"
    "1 0\r\n"
    "0 1\n"
)


def csr_edges(g) -> list[tuple[int, int]]:
    """Every CSR entry as (src, dst), in edge-id order."""
    dst = np.repeat(np.arange(g.num_nodes), np.diff(g.indptr))
    order = np.argsort(g.edge_ids)
    return list(zip(g.indices[order].tolist(), dst[order].tolist(), strict=True))


def check_csr(g, edges, num_nodes):
    assert g.num_nodes == num_nodes
    assert g.num_edges == len(edges)
    assert g.indptr[0] == 0 and g.indptr[-1] == len(edges)
    assert sorted(g.edge_ids.tolist()) == list(range(len(edges)))
    assert csr_edges(g) == list(edges)


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_edge_list_exact(tmp_path):
    g = read_edge_list(write(tmp_path, "g.txt", TEXT))
    check_csr(g, EDGES, 4)
    assert g.name.endswith("g.txt")
    assert g.x is None and g.y is None


def test_edge_list_gz_same_as_plain(tmp_path):
    p = tmp_path / "g.txt.gz"
    with gzip.open(p, "wt") as f:
        f.write(TEXT)
    check_csr(read_edge_list(p), EDGES, 4)


def test_edge_list_options(tmp_path):
    p = write(tmp_path, "g.txt", TEXT)
    check_csr(read_edge_list(p, drop_self_loops=True), [e for e in EDGES if e[0] != e[1]], 4)
    check_csr(read_edge_list(p, drop_duplicates=True), EDGES[:5], 4)
    und = EDGES + [(d, s) for s, d in EDGES]
    check_csr(read_edge_list(p, undirected=True), und, 4)
    g = read_edge_list(p, undirected=True, drop_self_loops=True, drop_duplicates=True)
    assert sorted(csr_edges(g)) == [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)]
    assert read_edge_list(p, num_nodes=10).num_nodes == 10


def test_edge_list_empty_and_comments_only(tmp_path):
    g = read_edge_list(write(tmp_path, "e.txt", "# nothing\n\n"))
    assert g.num_nodes == 0 and g.num_edges == 0


@pytest.mark.parametrize(
    "body, line, needle",
    [
        ("0 1\n1 x\n", 2, "1 x"),
        ("0 1\n\n1 2.5\n", 3, "1 2.5"),
        ("# c\n0 1\n2 -3\n", 3, "negative node id -3"),
        ("0 1\n7\n1 2\n", 2, "1 field"),
        ("0 1\n1 2\n1 2 3\n", 3, "3 field"),
        ("0 1\n1 2-3\n", 2, "2-3"),
        ("0 1\n1 +\n", 2, "1 +"),
        ("0 1\n1 12345678901234567890\n", 2, "above 2**63 - 1"),
            ("0 1\n1 9223372036854775808\n", 2, "above 2**63 - 1"),
    ],
)
def test_edge_list_errors_name_file_and_line(tmp_path, body, line, needle):
    p = write(tmp_path, "bad.txt", body)
    with pytest.raises(GraphFormatError) as ei:
        read_edge_list(p)
    msg = str(ei.value)
    assert "bad.txt" in msg and f"line {line}" in msg and needle in msg


def test_edge_list_errors_in_gz(tmp_path):
    p = tmp_path / "bad.txt.gz"
    with gzip.open(p, "wt") as f:
        f.write("# h\n0 1\n1\n")
    with pytest.raises(GraphFormatError, match=r"bad\.txt\.gz, line 3"):
        read_edge_list(p)


def test_edge_list_missing_and_corrupt_gz(tmp_path):
    with pytest.raises(GraphFormatError, match="does not exist"):
        read_edge_list(tmp_path / "nope.txt")
    p = tmp_path / "notgz.txt.gz"
    p.write_text("0 1\n")
    with pytest.raises(GraphFormatError, match="notgz.txt.gz"):
        read_edge_list(p)


def test_parse_large_random_matches_python(tmp_path):
    rng = np.random.default_rng(1)
    e = rng.integers(0, 10**6, size=(5000, 2))
    text = "# x\n" + "\n".join(f"{a}\t{b}" for a, b in e) + "\n"
    src, dst = parse_edge_list(text.encode())
    np.testing.assert_array_equal(src, e[:, 0])
    np.testing.assert_array_equal(dst, e[:, 1])


def test_npz_edges_with_node_data(tmp_path):
    p = tmp_path / "g.npz"
    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    y = np.array([0, 1, 0, 1, 2, 2], dtype=np.int8)
    src = np.array([s for s, _ in EDGES], dtype=np.int32)
    dst = np.array([d for _, d in EDGES], dtype=np.int32)
    np.savez(p, src=src, dst=dst, num_nodes=np.int64(6), x=x, y=y)
    g = read_npz(p)
    check_csr(g, EDGES, 6)
    np.testing.assert_array_equal(g.x, x)
    assert g.y.dtype == np.int64 and g.y.tolist() == y.tolist()
    g = read_npz(p, undirected=True, drop_self_loops=True, drop_duplicates=True)
    assert sorted(csr_edges(g)) == [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)]


def test_npz_without_num_nodes(tmp_path):
    p = tmp_path / "g.npz"
    np.savez(p, src=np.array([0, 4]), dst=np.array([1, 2]))
    check_csr(read_npz(p), [(0, 1), (4, 2)], 5)


def test_npz_errors(tmp_path):
    p = tmp_path / "nosrc.npz"
    np.savez(p, source=np.array([0]), dst=np.array([1]))
    with pytest.raises(GraphFormatError, match=r"nosrc\.npz has no key 'src'"):
        read_npz(p)
    p = tmp_path / "len.npz"
    np.savez(p, src=np.array([0, 1, 2]), dst=np.array([1, 2]))
    with pytest.raises(GraphFormatError, match=r"len\.npz.*'src' has 3 entries but 'dst' has 2"):
        read_npz(p)
    p = tmp_path / "neg.npz"
    np.savez(p, src=np.array([0, -1]), dst=np.array([1, 2]))
    with pytest.raises(GraphFormatError, match="negative"):
        read_npz(p)
    p = tmp_path / "float.npz"
    np.savez(p, src=np.array([0.0, 1.0]), dst=np.array([1, 2]))
    with pytest.raises(GraphFormatError, match=r"float\.npz: 'src' is a 1-d float64"):
        read_npz(p)
    p = tmp_path / "x.npz"
    np.savez(p, src=np.array([0]), dst=np.array([1]), x=np.zeros((3, 2)))
    with pytest.raises(GraphFormatError, match=r"'x' has shape \(3, 2\) but the graph has 2"):
        read_npz(p)
    p = tmp_path / "pickled.npz"
    np.savez(p, src=np.array([0]), dst=np.array([1]), y=np.array([{}, 1], dtype=object))
    with pytest.raises(GraphFormatError, match="pickle"):
        read_npz(p)
    p = tmp_path / "junk.npz"
    p.write_bytes(b"not a zip")
    with pytest.raises(GraphFormatError, match=r"junk\.npz is not a readable"):
        read_npz(p)


def _gnn_npz(path, adj, attr, labels):
    np.savez(
        path,
        adj_data=adj.data, adj_indices=adj.indices, adj_indptr=adj.indptr,
        adj_shape=np.array(adj.shape),
        attr_data=attr.data, attr_indices=attr.indices, attr_indptr=attr.indptr,
        attr_shape=np.array(attr.shape),
        labels=labels.astype(np.int8),
        node_names=np.array([f"n{i}" for i in range(adj.shape[0])]),
    )


def test_gnn_benchmark_layout(tmp_path):
    sp = pytest.importorskip("scipy.sparse")
    rng = np.random.default_rng(0)
    n, f = 30, 7
    dense_adj = (rng.random((n, n)) < 0.15).astype(np.float32)
    adj = sp.csr_matrix(dense_adj)
    dense_x = (rng.random((n, f)) < 0.3) * rng.random((n, f)).astype(np.float32)
    attr = sp.csr_matrix(dense_x.astype(np.float32))
    labels = rng.integers(0, 3, n)
    p = tmp_path / "bench.npz"
    _gnn_npz(p, adj, attr, labels)
    assert is_gnn_benchmark(p)
    g = read_gnn_benchmark(p)
    coo = adj.tocoo()
    expected = sorted(zip(coo.row.tolist(), coo.col.tolist(), strict=True))  # i -> j
    assert g.num_nodes == n and g.num_edges == adj.nnz
    assert sorted(csr_edges(g)) == expected
    # edge ids follow the row-major order of the adjacency
    assert csr_edges(g) == sorted(expected)
    assert g.x.dtype == np.float32 and g.x.shape == (n, f)
    np.testing.assert_array_equal(g.x, attr.toarray())
    assert g.y.dtype == np.int64 and g.y.tolist() == labels.tolist()
    und = read_gnn_benchmark(p, undirected=True, drop_duplicates=True)
    sym = sp.csr_matrix(((dense_adj + dense_adj.T) > 0).astype(np.float32))
    assert und.num_edges == sym.nnz


def test_gnn_benchmark_errors(tmp_path):
    p = tmp_path / "plain.npz"
    np.savez(p, src=np.array([0]), dst=np.array([1]))
    assert not is_gnn_benchmark(p)
    with pytest.raises(GraphFormatError, match=r"plain\.npz has no key 'adj_indptr'"):
        read_gnn_benchmark(p)
    p = tmp_path / "badptr.npz"
    np.savez(p, adj_data=np.ones(2), adj_indices=np.array([1, 0]), adj_indptr=np.array([0, 1]),
             adj_shape=np.array([2, 2]))
    with pytest.raises(GraphFormatError, match=r"'adj_indptr' has 2 entries for 2 rows"):
        read_gnn_benchmark(p)
    p = tmp_path / "badcol.npz"
    np.savez(p, adj_data=np.ones(2), adj_indices=np.array([1, 5]),
             adj_indptr=np.array([0, 1, 2]), adj_shape=np.array([2, 2]))
    with pytest.raises(GraphFormatError, match=r"badcol\.npz: 'adj_indices' has a column"):
        read_gnn_benchmark(p)
