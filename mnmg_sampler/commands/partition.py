"""``mnmg-sampler partition INPUT --parts N --method M --out DIR``: split a graph for N ranks.

Writes one part per rank (contiguous relabelled id ranges, see ``docs/partitioning.md``) and
prints the edge cut, the imbalance, the time taken and the output directory.
"""

from __future__ import annotations

import argparse

from ..console import add_json_flag, report

METHODS = ("random", "range", "metis")


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "partition",
        help="split a graph into one part per rank",
        description="Relabel the nodes so part r owns a contiguous id range, and write each "
        "part's CSR, edge ids and node data beside a manifest.json (written atomically).",
    )
    p.add_argument("input", metavar="INPUT",
                   help="graph: a built-in name (cora), rmat:SCALE[:EDGE_FACTOR], or a file or "
                   "OGB directory (formats: docs/formats.md)")
    p.add_argument("--parts", type=int, required=True, metavar="N",
                   help="number of parts: the world size of the job that will load them")
    p.add_argument("--method", choices=METHODS, required=True,
                   help="range: contiguous chunks of the input order; random: seeded, balanced; "
                   "metis: fewest cut edges (needs pip install 'mnmg-sampler[metis]')")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="output directory (must not exist, unless --overwrite)")
    p.add_argument("--seed", type=int, default=0, help="seed of random and metis (default 0)")
    p.add_argument("--undirected", action="store_const", const=True, default=None,
                   help="add the reverse of every edge (default: the input's own convention)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace DIR if it is an earlier partition directory (or empty), once "
                   "the new one is complete; any other existing DIR is refused")
    add_node_data_arguments(p)
    add_json_flag(p)
    p.set_defaults(func=run)
    return p


def add_node_data_arguments(p: argparse.ArgumentParser) -> None:
    """Separate node-data files and the node-id bound (shared with ``info``)."""
    p.add_argument("--features", metavar="FILE",
                   help="node features, one row per node (.npy, .npz, .pt, .csv)")
    p.add_argument("--labels", metavar="FILE", help="node labels, one per node")
    for split in ("train", "val", "test"):
        p.add_argument(f"--{split}-mask", metavar="FILE",
                       help=f"the {split} split: bool per node, or node ids")
    p.add_argument("--max-node-id", type=int, default=1 << 40, metavar="N",
                   help="refuse node ids above N (default 2**40)")


def node_data_kwargs(args: argparse.Namespace) -> dict:
    """``load_graph`` keyword arguments from :func:`add_node_data_arguments`."""
    masks = {s: getattr(args, f"{s}_mask") for s in ("train", "val", "test")}
    return {"x": args.features, "y": args.labels, "max_node_id": args.max_node_id,
            "masks": {k: v for k, v in masks.items() if v is not None}}


def run(args: argparse.Namespace) -> int:
    import time

    from ..graph.datasets import load_graph
    from ..graph.partition import partition_graph, write_partitions
    from ..graph.partition_io import check_replaceable, make_source

    if args.overwrite:  # refuse a foreign DIR before the (long) load and partitioning
        check_replaceable(args.out)
    t0 = time.perf_counter()
    graph = load_graph(args.input, undirected=args.undirected, seed=args.seed,
                       **node_data_kwargs(args))
    t1 = time.perf_counter()
    plan = partition_graph(graph, args.parts, args.method, seed=args.seed)
    t2 = time.perf_counter()
    source = make_source(args.input, method=plan.method, seed=plan.seed, parts=plan.parts,
                         undirected=args.undirected, graph_seed=args.seed,
                         node_data={"features": args.features, "labels": args.labels,
                                    **{f"{s}_mask": getattr(args, f"{s}_mask")
                                       for s in ("train", "val", "test")}})
    out = write_partitions(graph, plan, args.out, overwrite=args.overwrite, source=source)
    t3 = time.perf_counter()
    rows = [
        ("graph", f"{graph.name}: {graph.num_nodes:,} nodes, {graph.num_edges:,} edges"),
        ("method", f"{plan.method} (seed {plan.seed}), {plan.parts} parts"),
        ("edge cut", f"{plan.edge_cut:.4f} of edges cross parts"),
        ("imbalance", f"{plan.imbalance:.3f} nodes, {plan.edge_imbalance:.3f} edges (max/mean)"),
        ("part nodes", ", ".join(f"{v:,}" for v in plan.part_nodes)),
        ("time", f"load {t1 - t0:.2f}s, partition {t2 - t1:.2f}s, write {t3 - t2:.2f}s"),
        ("output", args.out),
    ]
    masks = {k: int(v.sum()) for k, v in graph.masks.items()} if graph.masks else {}
    if masks:
        rows.insert(-1, ("masks", ", ".join(f"{k} {v:,}" for k, v in masks.items())))
    data = {"graph": graph.name, "nodes": int(graph.num_nodes), "edges": int(graph.num_edges),
            "method": plan.method, "seed": plan.seed, "parts": plan.parts,
            "edge_cut": float(plan.edge_cut), "imbalance": float(plan.imbalance),
            "edge_imbalance": float(plan.edge_imbalance),
            "part_nodes": [int(v) for v in plan.part_nodes],
            "seconds": {"load": t1 - t0, "partition": t2 - t1, "write": t3 - t2},
            "masks": masks, "output": str(out)}
    report(rows, data, args.json)
    return 0
