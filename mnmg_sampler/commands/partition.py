"""``mnmg-sampler partition INPUT --parts N --method M --out DIR``: split a graph for N ranks.

Writes one part per rank (contiguous relabelled id ranges) and prints the edge cut, imbalance,
time taken and output directory. ``--weights NAME|FILE`` stores a float32 weight per CSR entry
for ``sample --partitions``. A typed INPUT (a saved ``HeteroData`` ``.pt`` or an OGB hetero
directory) writes typed parts with its own node data; homogeneous-only options are refused.

Under torchrun ``random``, ``range`` and ``hash`` run on every rank
(:mod:`mnmg_sampler.distributed.ingest`), writing the files one process writes; ``metis``, edge
weights and node data other than ``.npy`` features and labels run on rank 0 alone. See
docs/partitioning.md#distributed-partitioning.
"""

from __future__ import annotations

import argparse
import os

from ..graph.formats import is_ogb_hetero_dir
from ..system.console import add_json_flag, report
from .graph_args import (
    add_node_data_arguments,
    add_renumber_argument,
    add_time_column_argument,
    add_weights_argument,
    check_typed_options,
    check_typed_renumber,
    check_weights_file,
    node_data_kwargs,
    typed_graph_of,
)

METHODS = ("random", "range", "hash", "metis")


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
    p.add_argument("--parts", type=int, metavar="N",
                   help="number of parts: the world size of the job that will load them "
                   "(required without torchrun; under torchrun it defaults to, and must equal, "
                   "the number of ranks)")
    p.add_argument("--method", choices=METHODS, required=True,
                   help="range: contiguous chunks of the input order; random: seeded, balanced; "
                   "hash: a seeded hash of the id; metis: fewest cut edges (one process; needs "
                   "pip install 'mnmg-sampler[metis]')")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="output directory (must not exist, unless --overwrite)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of random, hash, metis and of rmat graphs (default 0)")
    p.add_argument("--undirected", action="store_const", const=True, default=None,
                   help="add the reverse of every edge (default: the input's own convention)")
    p.add_argument("--drop-self-loops", action="store_true", help="remove edges v -> v")
    p.add_argument("--drop-duplicates", action="store_true",
                   help="keep the first copy of repeated edges")
    p.add_argument("--metis-max-edges", type=int, metavar="E",
                   help="refuse METIS above E edges (default 2**30): it runs in one process")
    p.add_argument("--chunk-rows", type=int, default=None, metavar="R",
                   help="under torchrun: rows per rank per all-to-all round (default 1048576)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace DIR if it is an earlier partition directory (or empty), once "
                   "the new one is complete; any other existing DIR is refused")
    add_renumber_argument(p)
    add_node_data_arguments(p)
    add_weights_argument(p, "store them in every part (float32, checksummed) for weighted "
                         "sampling")
    add_time_column_argument(p)
    add_json_flag(p)
    p.set_defaults(func=run)
    return p


def _distributed() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def _source(args, parts: int) -> dict:
    from ..graph.partition_io import make_source

    src = make_source(args.input, method=args.method, seed=args.seed, parts=parts,
                      undirected=args.undirected, drop_self_loops=args.drop_self_loops,
                      drop_duplicates=args.drop_duplicates, graph_seed=args.seed,
                      renumber=args.renumber,
                      node_data={"features": args.features, "labels": args.labels,
                                 **{f"{s}_mask": getattr(args, f"{s}_mask")
                                    for s in ("train", "val", "test")}})
    if args.weights:  # recorded as a job records sampler.weights
        src["load"]["weights"] = args.weights
    return src


def run(args: argparse.Namespace) -> int:
    from ..errors import PartitionError

    check_weights_file(args.weights)
    check_typed_renumber(args.input, args.renumber)  # before torchrun's ranks start
    if _distributed():
        if args.time_column:
            raise PartitionError("--time-column under torchrun",
                                 "the distributed partitioner reads no edge times",
                                 "partition a table with time in one process (no torchrun)")
        return _run_distributed(args)
    if args.parts is None:
        raise PartitionError("--parts is missing", "the number of parts is unknown",
                             "pass --parts N (the world size of the job that will load them)")
    return _run_single(args)


def _run_distributed(args: argparse.Namespace) -> int:
    """Under torchrun: random/range/hash on every rank; metis on rank 0 while the others wait."""
    import torch.distributed as dist

    from ..distributed.collective import agree
    from ..distributed.ingest import (
        DEFAULT_CHUNK,
        partition_distributed,
        partition_typed_distributed,
    )
    from ..errors import WorldSizeError
    from ..system.runtime import init_distributed

    env, _ = init_distributed("gloo", "cpu")
    try:
        world = env.world_size
        if args.parts is not None and args.parts != world:
            raise WorldSizeError(f"--parts {args.parts} under torchrun with {world} ranks",
                                 "the distributed partitioner writes one part per rank",
                                 f"launch {args.parts} ranks, or drop --parts")
        node_files = [args.features, args.labels, args.train_mask, args.val_mask,
                      args.test_mask]
        npy_only = all(f is None or f.lower().endswith(".npy") for f in node_files[:2])
        from ..graph.temporal import saved_time
        from ..graph.typed_io import sliceable_typed_input

        typed = _is_typed_path(args.input)
        if (args.method == "metis" or args.weights or not npy_only
                or saved_time(args.input)  # the every-rank readers read no time
                or (typed and not sliceable_typed_input(args.input))
                or (not typed and any(f is not None for f in node_files[2:]))):
            def single() -> None:  # one process; the others wait for it
                if env.rank == 0:
                    args.parts = world
                    _run_single(args)

            agree(single)
            return 0
        if typed:
            agree(lambda: check_typed_options(
                argparse.Namespace(**{**vars(args), "graph": args.input})))
            stats = partition_typed_distributed(
                args.input, args.out, args.method, args.seed, overwrite=args.overwrite,
                source=_source(args, world), chunk=args.chunk_rows or DEFAULT_CHUNK)
            graph = _describe(stats["graph_name"], stats["num_nodes"], stats["num_edges"],
                              (stats["node_types"], stats["edge_types"]))
        else:
            stats = partition_distributed(
                args.input, args.out, args.method, args.seed, undirected=args.undirected,
                drop_self_loops=args.drop_self_loops, drop_duplicates=args.drop_duplicates,
                features=args.features, labels=args.labels, overwrite=args.overwrite,
                chunk=args.chunk_rows or DEFAULT_CHUNK, source=_source(args, world),
                renumber=args.renumber)
            graph = _describe(stats["graph_name"], stats["num_nodes"], stats["num_edges"],
                              renumbered=stats["renumbered"])
        if env.rank == 0:
            report(_rows(graph, stats, f"{stats['seconds']:.2f}s on {world} ranks", args.out,
                         ", every type split" if typed else ""),
                   {**stats, "output": stats["out"]}, args.json)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


def _is_typed_path(spec: str) -> bool:
    from pathlib import Path

    p = Path(spec)
    return is_ogb_hetero_dir(p) or (p.suffix in (".pt", ".pth") and p.is_file())


def _describe(name: str, nodes: int, edges: int, types: tuple[int, int] | None = None,
              renumbered: bool = False) -> str:
    """The report's graph line (``types``: node types and relations of a typed graph)."""
    if types is not None:
        return (f"{name}: {nodes:,} nodes of {types[0]} types, {edges:,} edges of {types[1]} "
                "relations")
    return f"{name}: {nodes:,} nodes, {edges:,} edges" + (
        " (renumbered; n_id shows the input's ids)" if renumbered else "")


def _rows(graph: str, s: dict, took: str, out: str, split: str = "") -> list[tuple[str, str]]:
    """The report of a partitioning (``s``: the statistics of the manifest)."""
    return [
        ("graph", graph),
        ("method", f"{s['method']} (seed {s['seed']}), {s['parts']} parts{split}"),
        ("edge cut", f"{s['edge_cut']:.4f} of edges cross parts"),
        ("imbalance", f"{s['imbalance']:.3f} nodes, {s['edge_imbalance']:.3f} edges (max/mean)"),
        ("part nodes", ", ".join(f"{v:,}" for v in s["part_nodes"])),
        ("time", took),
        ("output", out),
    ]


def _run_single(args: argparse.Namespace) -> int:
    """One process: a homogeneous or a typed INPUT, one partitioner and writer for both."""
    import time

    from ..graph.datasets import load_graph
    from ..graph.partition import partition_graph, write_partitions
    from ..graph.partition_io import check_replaceable

    if args.overwrite:  # refuse a foreign DIR before the (long) load and partitioning
        check_replaceable(args.out)
    t0 = time.perf_counter()
    graph = typed_graph_of(argparse.Namespace(**{**vars(args), "graph": args.input}))
    typed, weights = graph is not None, None
    if typed and args.weights:
        from ..errors import GraphFormatError

        raise GraphFormatError(f"{args.input} is a typed graph; --weights applies to "
                               "homogeneous graphs only", "it would be ignored",
                               "give edge weights per relation inside the typed graph "
                               "(edge_weight, docs/hetero.md)")
    if not typed:
        graph = load_graph(args.input, undirected=args.undirected, seed=args.seed,
                           drop_self_loops=args.drop_self_loops,
                           drop_duplicates=args.drop_duplicates, renumber=args.renumber,
                           **node_data_kwargs(args))
    if args.weights:
        from ..graph.weights import resolve_edge_weights

        weights = resolve_edge_weights(args.weights, args.input, graph, seed=args.seed,
                                       key="--weights")
    t1 = time.perf_counter()
    plan = partition_graph(graph, args.parts, args.method, seed=args.seed,
                           metis_max_edges=args.metis_max_edges)
    t2 = time.perf_counter()
    out = write_partitions(graph, plan, args.out, overwrite=args.overwrite,
                           source=_source(args, plan.parts), weights=weights)
    t3 = time.perf_counter()
    stats = plan.summary()
    if typed:
        rows = _rows(_describe(graph.name, graph.num_nodes, graph.num_edges,
                               (len(graph.node_types), len(graph.edge_types))), stats,
                     f"load {t1 - t0:.2f}s, partition and write {t3 - t1:.2f}s", args.out,
                     ", every type split")
        masks, more = {}, {}
    else:
        rows = _rows(_describe(graph.name, graph.num_nodes, graph.num_edges,
                               renumbered=graph.node_ids is not None), stats,
                     f"load {t1 - t0:.2f}s, partition {t2 - t1:.2f}s, write {t3 - t2:.2f}s",
                     args.out)
        masks = {k: int(v.sum()) for k, v in graph.masks.items()} if graph.masks else {}
        more = {"seconds": {"load": t1 - t0, "partition": t2 - t1, "write": t3 - t2},
                "masks": masks, "weights": args.weights}
    if masks:
        rows.insert(-1, ("masks", ", ".join(f"{k} {v:,}" for k, v in masks.items())))
    if weights is not None:
        rows.insert(-1, ("weights", f"{args.weights}: {int((weights > 0).sum()):,} of "
                         f"{weights.size:,} positive"))
    data = {"graph": graph.name, "nodes": int(graph.num_nodes), "edges": int(graph.num_edges),
            **({"node_types": graph.num_nodes_dict()} if typed else {}),
            "method": plan.method, "seed": plan.seed, "parts": plan.parts,
            "edge_cut": float(plan.edge_cut), "imbalance": float(plan.imbalance),
            "edge_imbalance": float(plan.edge_imbalance),
            "part_nodes": [int(v) for v in plan.part_nodes], **more, "output": str(out)}
    report(rows, data, args.json)
    return 0
