"""``mnmg-sampler partition INPUT --parts N --method M --out DIR``: split a graph for N ranks.

Writes one part per rank (contiguous relabelled id ranges, see ``docs/partitioning.md``) and
prints the edge cut, the imbalance, the time taken and the output directory.

Under torchrun (``torchrun --nproc-per-node N -m mnmg_sampler partition INPUT --method random
--out DIR``) the ``random``, ``range`` and ``hash`` methods run on every rank
(:mod:`mnmg_sampler.distributed.ingest`): each rank reads 1/N of the input and writes its own
part, with the same files as one process writes. ``metis`` runs on rank 0 alone.
"""

from __future__ import annotations

import argparse
import os

METHODS = ("random", "range", "hash", "metis")


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "partition",
        help="split a graph into one part per rank",
        description="Relabel the nodes so part r owns a contiguous id range, and write each "
        "part's CSR, edge ids and node data beside a manifest.json (written atomically). Under "
        "torchrun, random/range/hash partition on every rank (one part per rank).",
    )
    p.add_argument("input", metavar="INPUT",
                   help="graph: a built-in name (cora), rmat:SCALE[:EDGE_FACTOR], a file, or a "
                   "directory / glob of edge shards (.txt[.gz], .npy, .parquet)")
    p.add_argument("--parts", type=int, metavar="N",
                   help="number of parts: the world size of the job that will load them "
                   "(required without torchrun; under torchrun it defaults to, and must equal, "
                   "the number of ranks)")
    p.add_argument("--method", choices=METHODS, required=True,
                   help="range: contiguous chunks of the input order; random: seeded, balanced; "
                   "hash: a seeded hash of the id; metis: fewest cut edges (one process; needs "
                   "pip install 'mnmg-sampler[metis]')")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory (must not exist)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of random, hash, metis and of rmat graphs (default 0)")
    p.add_argument("--undirected", action="store_const", const=True, default=None,
                   help="add the reverse of every edge (default: the input's own convention)")
    p.add_argument("--drop-self-loops", action="store_true", help="remove edges v -> v")
    p.add_argument("--drop-duplicates", action="store_true",
                   help="keep the first copy of repeated edges")
    p.add_argument("--features", metavar="X.npy",
                   help="node feature rows (.npy, one row per node, memory-mapped)")
    p.add_argument("--labels", metavar="Y.npy", help="node labels (.npy, one per node)")
    p.add_argument("--metis-max-edges", type=int, metavar="E",
                   help="refuse METIS above E edges (default 2**30): it runs in one process")
    p.add_argument("--chunk-rows", type=int, default=None, metavar="R",
                   help="distributed: rows per rank per all-to-all round (default 4194304)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace DIR if it exists (only once the new one is complete)")
    p.set_defaults(func=run)
    return p


def _distributed() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def run(args: argparse.Namespace) -> int:
    from ..errors import PartitionError

    if _distributed():
        return _run_distributed(args)
    if args.parts is None:
        raise PartitionError("--parts is missing", "the number of parts is unknown",
                             "pass --parts N (the world size of the job that will load them)")
    return _run_single(args)


def _print_stats(name, num_nodes, num_edges, stats, times: str, out) -> None:
    print(f"graph       {name}: {num_nodes:,} nodes, {num_edges:,} edges")
    print(f"method      {stats['method']} (seed {stats['seed']}), {stats['parts']} parts")
    print(f"edge cut    {stats['edge_cut']:.4f} of edges cross parts")
    print(f"imbalance   {stats['imbalance']:.3f} nodes, {stats['edge_imbalance']:.3f} edges "
          "(max/mean)")
    print(f"part nodes  {', '.join(f'{v:,}' for v in stats['part_nodes'])}")
    print(f"time        {times}")
    print(f"output      {out}")


def _run_single(args: argparse.Namespace) -> int:
    import time

    from ..graph.datasets import load_graph
    from ..graph.partition import partition_graph, write_partitions
    from ..graph.sources import node_rows_file

    t0 = time.perf_counter()
    graph = load_graph(args.input, undirected=args.undirected, seed=args.seed,
                       drop_self_loops=args.drop_self_loops,
                       drop_duplicates=args.drop_duplicates)
    if args.features:
        graph.x = node_rows_file(args.features, graph.num_nodes, "features")
    if args.labels:
        graph.y = node_rows_file(args.labels, graph.num_nodes, "labels")
    t1 = time.perf_counter()
    plan = partition_graph(graph, args.parts, args.method, seed=args.seed,
                           metis_max_edges=args.metis_max_edges)
    t2 = time.perf_counter()
    out = write_partitions(graph, plan, args.out, overwrite=args.overwrite)
    t3 = time.perf_counter()
    _print_stats(graph.name, graph.num_nodes, graph.num_edges, plan.summary(),
                 f"load {t1 - t0:.2f}s, partition {t2 - t1:.2f}s, write {t3 - t2:.2f}s", out)
    return 0


def _run_distributed(args: argparse.Namespace) -> int:
    import torch.distributed as dist

    from ..distributed.collective import agree
    from ..distributed.ingest import DEFAULT_CHUNK, partition_distributed
    from ..errors import WorldSizeError
    from ..runtime import init_distributed

    env, _ = init_distributed("gloo", "cpu")
    try:
        world = env.world_size
        if args.parts is not None and args.parts != world:
            raise WorldSizeError(f"--parts {args.parts} under torchrun with {world} ranks",
                                 "the distributed partitioner writes one part per rank",
                                 f"launch {args.parts} ranks, or drop --parts")
        if args.method == "metis":  # one process; the others wait for it
            def single() -> None:
                if env.rank == 0:
                    args.parts = world
                    _run_single(args)

            agree(single)
            return 0
        stats = partition_distributed(
            args.input, args.out, args.method, args.seed, undirected=args.undirected,
            drop_self_loops=args.drop_self_loops, drop_duplicates=args.drop_duplicates,
            features=args.features, labels=args.labels, overwrite=args.overwrite,
            chunk=args.chunk_rows or DEFAULT_CHUNK)
        if env.rank == 0:
            _print_stats(stats["graph_name"], stats["num_nodes"], stats["num_edges"], stats,
                         f"{stats['seconds']:.2f}s on {world} ranks", stats["out"])
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0
