"""``mnmg-sampler info GRAPH``: load a graph and print its size, degrees and node data.

A quick check that a file parses and of what a sampler will see (isolated nodes give empty
neighborhoods; the degree tail sets the cost of ``-1`` fanouts).
"""

from __future__ import annotations

import argparse

from ..system.console import add_json_flag, report


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "info",
        help="load a graph and print nodes, edges, degree statistics and node data",
        description="Load GRAPH and print nodes, edges, isolated nodes, degree statistics "
        "(of the sampling CSR: in-degree, i.e. neighbors a node samples from), "
        "features/labels and the load time.",
    )
    p.add_argument("graph", metavar="GRAPH",
                   help="cora, rmat:SCALE[:EDGE_FACTOR], a file or OGB directory (formats: "
                   "docs/formats.md), or a partition directory (its parts and placements)")
    p.add_argument("--undirected", action=argparse.BooleanOptionalAction, default=None,
                   help="add every reverse edge (default: the dataset's own; cora: yes)")
    p.add_argument("--drop-self-loops", action="store_true", help="remove edges v -> v")
    p.add_argument("--drop-duplicates", action="store_true",
                   help="keep one copy of each repeated (src, dst) edge")
    p.add_argument("--seed", type=int, default=0, help="seed of rmat: graphs (default 0)")
    from .graph_args import add_node_data_arguments, add_renumber_argument

    add_renumber_argument(p)
    add_node_data_arguments(p)
    add_json_flag(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import time
    from pathlib import Path

    import numpy as np

    from ..graph.datasets import load_graph
    from ..graph.partition_io import MANIFEST
    from .graph_args import node_data_kwargs, typed_graph_of

    t0 = time.perf_counter()
    if (Path(args.graph) / MANIFEST).is_file():
        return _run_parts(args)
    typed = typed_graph_of(args)
    if typed is not None:
        return _run_typed(args, typed, time.perf_counter() - t0)
    g = load_graph(args.graph, undirected=args.undirected, drop_self_loops=args.drop_self_loops,
                   drop_duplicates=args.drop_duplicates, seed=args.seed,
                   renumber=args.renumber, **node_data_kwargs(args))
    load_s = time.perf_counter() - t0
    deg = g.degrees()
    out_deg = np.bincount(g.indices, minlength=g.num_nodes)
    isolated = int(np.count_nonzero((deg == 0) & (out_deg == 0)))
    no_nbr = int(np.count_nonzero(deg == 0))
    n = max(g.num_nodes, 1)
    data: dict = {"graph": g.name, "nodes": int(g.num_nodes), "edges": int(g.num_edges),
                  "isolated_nodes": isolated, "nodes_without_neighbors": no_nbr}
    rows = [
        ("graph", g.name),
        ("nodes", f"{g.num_nodes:,}"),
        ("edges", f"{g.num_edges:,} (CSR entries)"),
        ("isolated nodes", f"{isolated:,} ({100 * isolated / n:.1f}%)"),
        ("nodes with no neighbor to sample", f"{no_nbr:,} ({100 * no_nbr / n:.1f}%)"),
    ]
    data["header"] = None if g.header is None else {"line": g.header[0], "text": g.header[1]}
    if g.header is not None:
        rows.append(("header row", f"line {g.header[0]}: {g.header[1]!r}"))
    if g.node_ids is None:
        data["renumbered"] = None
        rows.append(("renumbered", "no (node ids are the input's)"))
    else:
        top = int(g.node_ids[-1]) if g.num_nodes else -1
        data["renumbered"] = {"nodes": int(g.num_nodes), "largest_id": top}
        rows.append(("renumbered", f"yes: {g.num_nodes:,} distinct ids (largest {top}) -> "
                     f"0..{g.num_nodes - 1}; n_id shows the input's ids"))
    if g.num_nodes:
        stats = {"min": int(deg.min()), "mean": float(deg.mean()), "median": float(np.median(deg)),
                 "max": int(deg.max()), "p99": float(np.percentile(deg, 99))}
        data["in_degree"] = stats
        rows.append((
            "in-degree min/mean/median/max/p99",
            f"{stats['min']} / {stats['mean']:.2f} / {stats['median']:g} / {stats['max']} / "
            f"{stats['p99']:g}",
        ))
    data["features"] = _array(rows, "features x", g.x)
    data["labels"] = _array(rows, "labels y", g.y, g.y)
    if g.masks:
        rows.append(("split masks", ", ".join(f"{k} {int(v.sum()):,}" for k, v in g.masks.items())))
    row = sum(int(a.nbytes) for a in (g.x, g.y) if a is not None)
    return _report(args, rows, data, g, row, load_s)


def _run_parts(args: argparse.Namespace) -> int:
    """A partition directory: its parts and the placements written beside them
    (docs/formats.md#placements-beside-the-parts)."""
    from ..distributed.placement_files import listing
    from ..graph.partition_io import read_manifest
    from ..system.host_limits import format_bytes

    m, hosts = read_manifest(args.graph), listing(args.graph)
    rows = [("partition", f"{m['num_parts']} parts of {m['num_nodes']:,} nodes"), *(
        (f"placement {h['key']} host {h['host']}", f"ranks {h['ranks']}, topology "
         f"{h['topology']}, rows {h['rows']}, {h['cache_rows']:,} cache rows, "
         f"{format_bytes(h['bytes'])}") for h in hosts)]
    report(rows, {"parts": m["num_parts"], "nodes": m["num_nodes"], "placements": hosts},
           args.json)
    return 0


# --- typed (heterogeneous) inputs: node counts per type, edges per relation, features per type ---


def _run_typed(args: argparse.Namespace, g, load_s: float) -> int:
    import numpy as np

    et_name = "__".join
    nodes = g.num_nodes_dict()
    edges = {et_name(et): n for et, n in g.num_edges_dict().items()}
    data: dict = {"graph": g.name, "nodes": g.num_nodes, "edges": g.num_edges,
                  "node_types": nodes, "edge_types": edges, "features": {}, "labels": {},
                  "weighted_edge_types": [et_name(et) for r, et in enumerate(g.edge_types)
                                          if g.weighted[r]]}
    rows = [("graph", g.name), ("nodes", f"{g.num_nodes:,} of {len(nodes)} types"),
            ("edges", f"{g.num_edges:,} of {len(edges)} relations")]
    rows += [(f"  nodes {t}", f"{n:,}") for t, n in nodes.items()]
    rows += [(f"  edges {t}", f"{n:,}" + (" (weighted)" if t in data["weighted_edge_types"]
                                          else "")) for t, n in edges.items()]
    for t in g.node_types:
        x, y = g.x.get(t), g.y.get(t)
        data["features"][t] = _array(rows, f"  features x {t}", x)
        if y is not None:
            data["labels"][t] = _array(rows, f"  labels y {t}", y, y[y >= 0])
        if g.masks.get(t):
            rows.append((f"  split masks {t}",
                         ", ".join(f"{k} {int(v.sum()):,}" for k, v in g.masks[t].items())))
    data["features"] = {t: v for t, v in data["features"].items() if v is not None}
    row = sum(int(np.asarray(a).nbytes) for d in (g.x, g.y) for a in d.values())
    return _report(args, rows, data, g, row, load_s)


def _array(rows: list, label: str, a, classes=None) -> dict | None:
    """Shape and dtype of node data ``a`` (and for integer labels, the classes among
    ``classes``), with its row of the table."""
    import numpy as np

    if a is None:
        rows.append((label, "none"))
        return None
    d = {"shape": list(a.shape), "dtype": str(a.dtype)}
    text = f"{tuple(a.shape)} {a.dtype}"
    if classes is not None and a.dtype.kind in "iub":
        d["classes"] = int(np.unique(classes).size)
        text += f", {d['classes']} classes"
    rows.append((label, text))
    return d


def _report(args: argparse.Namespace, rows: list, data: dict, g, row: int, load_s: float) -> int:
    """The placement and load-time lines, then the table (or JSON). Placement: what a host's
    budget must hold to keep every part (distributed/fit.py), the parts' CSR (int64 row
    pointers, neighbors, edge ids, original ids) and their ``row`` bytes as stored."""
    from ..system.host_limits import format_bytes

    topo = 8 * (2 * int(g.num_nodes) + 1 + 2 * int(g.num_edges))
    data["placement"] = {"topology_bytes": topo, "row_bytes": row}
    rows.append(("whole graph on one host", f"topology {format_bytes(topo)}, feature rows "
                 f"{format_bytes(row)} (a features.host_memory_mb that holds the other hosts' "
                 "share of both: hosts sample and read rows independently)"))
    data["load_s"] = load_s
    rows.append(("load time", f"{load_s:.2f} s"))
    report(rows, data, args.json)
    return 0
