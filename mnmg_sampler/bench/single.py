"""``mnmg-sampler bench single``: one-process throughput, each number beside its reference.

Measured in one run, on one graph, with the same thread count:

1. **one-hop kernel** (:func:`mnmg_sampler.ops.cpu.sample_neighbors`, with edge ids, as the
   sampler calls it) over ``--kernel-nodes`` non-isolated seeds with the first fanout; beside it
   the kernel reporting CSR positions, the kernel without edge ids (the distributed data path),
   the **weighted kernel** (:mod:`mnmg_sampler.ops.weighted`, synthetic weights in
   [0.001, 1.001)) as its cost relative to the uniform one, and a **random gather**
   (:mod:`mnmg_sampler.bench.gather`) doing as many random reads of an array as large as
   ``indices`` as the kernel sampled edges: the machine's memory-latency limit. Weights and
   gather positions are drawn outside the timed region.
2. **multi-hop minibatches** (:class:`mnmg_sampler.sampling.sampler.MultiHopSampler`), ``--batches``
   batches of ``--batch-size`` seeds in the order ``mnmg-sampler sample`` uses; and, with a peer
   venv built by ``../shared/peers/setup.sh``, **DGL 2.1's** ``NeighborSampler`` on the same
   graph (a subprocess running ``dgl_bench.py``). DGL re-samples every layer's destination nodes
   and draws its seeds from all nodes, so its edges per batch differ: compare sampled edges per
   second.

Every figure is the median over ``--repeats`` runs (DGL: over ``--peer-repeats`` subprocesses).
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Callable
from pathlib import Path

from ..commands.sample import positive_int
from ..system.console import JSON_OUT_HELP
from ._launch import add_graph_option
from .peers import add_peer_options, peer_python, repo_root, run_peer, save_graph
from .timing import MultiHopBench, median_rate

log = logging.getLogger(__name__)

HELP = "one process: kernel vs random gather, multi-hop vs DGL (same run)"
KERNEL_TARGET = 0.5  # kernel edges/s >= 0.5x the random-gather reads/s
DGL_TARGET = 2.0  # multi-hop edges/s >= 2x DGL's sampled edges/s
NO_PEER = "DGL peer: not available (run ../shared/peers/setup.sh)"


def timed_parser(subparsers, mode: str, help: str, doc: str) -> argparse.ArgumentParser:
    """The parser of a one-process mode (``single``, ``link``) with the options they share."""
    p = subparsers.add_parser(mode, help=help, description=doc,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    add_graph_option(p, "rmat:20")
    p.set_defaults(threads=1)
    p.add_argument("--batches", type=positive_int, default=30,
                   help="timed minibatches per repeat, ours and DGL's (default: 30)")
    p.add_argument("--repeats", type=positive_int, default=3,
                   help="repeats of each timed measurement; the median is reported (default: 3)")
    return p


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = timed_parser(subparsers, "single", HELP, __doc__)
    p.add_argument("--kernel-nodes", type=positive_int, default=1 << 18,
                   help="seeds of the one-hop kernel call (default: 262144)")
    add_peer_options(p, dgl_bench=True)
    p.add_argument("--hetero", action="store_true",
                   help="instead: the typed kernel and sampler against the homogeneous ones on "
                        "the same edges, typed into 3 node types and 9 relations, and against "
                        "DGL's heterograph NeighborSampler (mnmg_sampler/bench/hetero.py)")
    p.add_argument("--temporal", action="store_true",
                   help="instead: the temporal kernel (random edge times, seeds at the median "
                        "time) against the non-temporal typed kernel, cost per sampled edge "
                        "(mnmg_sampler/bench/temporal.py)")
    p.add_argument("--json", metavar="OUT", nargs="?", const="-", help=JSON_OUT_HELP)
    p.set_defaults(bench_run=run)
    return p


def find_peer(venv: str | None, script: str | None) -> tuple[Path, Path] | None:
    """The (python, dgl_bench.py) pair of a peer venv, or ``None`` when either is missing."""
    scripts = [Path(script)] if script else [
        repo_root().parent / "shared" / "peers" / "dgl_bench.py",
        Path.cwd().parent / "shared" / "peers" / "dgl_bench.py",
    ]
    py = peer_python(venv)
    sc = next((s for s in scripts if s.is_file()), None)
    return (py, sc) if py and sc else None


def bench_kernel(graph, nodes, fanout: int, replace: bool, seed: int, batch_size: int,
                 repeats: int) -> dict:
    """One-hop kernel (with and without edge ids) and the random gather, same read count."""
    import numpy as np

    from ..ops import cpu
    from ..ops.weighted import sample_neighbors_weighted
    from .gather import gather_sum, random_positions
    from .timing import block_keys, interleaved_runs

    keys = block_keys(seed, nodes.size, batch_size)

    def kernel(eids, with_eids=True):
        return cpu.sample_neighbors(graph.indptr, graph.indices, eids, nodes, nodes, keys,
                                    seed, 0, fanout, replace, with_eids=with_eids)

    weights = (np.random.default_rng(seed).random(graph.num_edges, dtype=np.float32)
               + np.float32(1e-3))

    def weighted():
        return sample_neighbors_weighted(graph.indptr, graph.indices, graph.edge_ids, weights,
                                         nodes, nodes, keys, seed, 0, fanout, replace)

    kernel(graph.edge_ids)  # warm-up: load compiled code, touch the arrays
    kernel(graph.edge_ids, False)
    w_edges = int(weighted()[0].sum())
    counts = kernel(graph.edge_ids)[0]
    edges = int(counts.sum())
    pos = random_positions(graph.num_edges, edges, seed)
    gather_sum(graph.indices, pos[:1000])
    # interleaved, so drifts in machine state hit all of them alike
    runs, _ = interleaved_runs({
        "kernel": lambda: kernel(graph.edge_ids), "kernel_positions": lambda: kernel(None),
        "kernel_no_eids": lambda: kernel(graph.edge_ids, False), "kernel_weighted": weighted,
        "gather": lambda: gather_sum(graph.indices, pos)}, repeats)
    out = {k: median_rate(w_edges if k == "kernel_weighted" else edges, v)
           for k, v in runs.items()}
    out["nodes"] = int(nodes.size)
    out["fanout"] = fanout
    out["full_rows"] = int((graph.degrees()[nodes] <= fanout).sum()) if fanout >= 0 else int(
        nodes.size)
    out["indices_bytes"] = int(graph.indices.nbytes)
    out["ratio"] = out["kernel"]["per_s"] / out["gather"]["per_s"]
    out["ratio_positions"] = out["kernel_positions"]["per_s"] / out["gather"]["per_s"]
    out["ratio_no_eids"] = out["kernel_no_eids"]["per_s"] / out["gather"]["per_s"]
    # cost per sampled edge, weighted over uniform (both with edge ids)
    out["weighted_cost"] = out["kernel"]["per_s"] / out["kernel_weighted"]["per_s"]
    out["ratio_best"] = out["kernel"]["best_per_s"] / out["gather"]["best_per_s"]
    return out


def bench_dgl(graph, peer: tuple[Path, Path], args, fanouts,
              before_each: Callable[[], None] | None = None) -> dict:
    """Run DGL's sampler on the same graph in a subprocess; returns its JSON (median of runs).

    ``before_each`` runs before every DGL run (one of our own repeats, interleaved).
    """
    python, script = peer
    return run_peer(python, script, lambda path: save_graph(graph, path), fanouts,
                    threads=args.threads, batch_size=args.batch_size, replace=args.replace,
                    repeats=args.peer_repeats, before_each=before_each, wall=True,
                    options=("--batches", args.batches, "--seed", args.seed),
                    python=str(python), script=str(script))


def _fmt(x: float) -> str:
    return f"{x / 1e6:,.2f} M/s"


def _verdict(ratio: float | None, target: float) -> str:
    if ratio is None:
        return "not measured"
    return f"{ratio:.2f}x (target >= {target:g}x: {'met' if ratio >= target else 'MISSED'})"


def run(args: argparse.Namespace) -> int:
    from ..commands.sample import parse_fanouts
    from ._launch import base_result, graph_line, load_for_bench, set_bench_threads, write_json

    fanouts = parse_fanouts(args.fanouts)
    threads = set_bench_threads(args.threads)  # torch too: idle intra-op threads slow sampling
    graph, seeds, load_s = load_for_bench(args)
    # no one target: each figure prints its own
    res = base_result("single", args, graph, seeds, load_s, fanouts, threads, None)
    print(graph_line(args, graph, seeds, load_s))
    print(f"threads {threads}, fanouts {fanouts}, batch size {args.batch_size}, "
          f"replace {args.replace}, median of {args.repeats}; "
          f"load average {res['machine']['loadavg_1m'] or 0:.2f} on {os.cpu_count()} cores")

    if args.temporal:
        from .temporal import bench_temporal, print_temporal

        res["temporal"] = bench_temporal(graph, seeds, fanouts, args.replace, args.seed,
                                         args.batch_size, args.kernel_nodes, args.repeats)
        print_temporal(res["temporal"])
    elif args.hetero:
        from .hetero import bench_hetero, print_hetero

        peer = None if args.no_peers else peer_python(args.peers_venv)
        if peer is not None:
            print("\nmulti-hop: our repeats interleaved with DGL heterograph runs ...",
                  flush=True)
        res["hetero"] = bench_hetero(
            graph, seeds, fanouts, args.replace, args.seed, args.batch_size, args.batches,
            args.kernel_nodes, args.repeats, peer=peer, peer_repeats=args.peer_repeats,
            threads=threads, peer_missing="skipped (--no-peers)" if args.no_peers else NO_PEER)
        print_hetero(res["hetero"])
    else:
        _homogeneous(args, graph, seeds, fanouts, res)
    write_json(args.json, res)
    return 0


def _homogeneous(args, graph, seeds, fanouts, res: dict) -> None:
    """The one-hop kernel and the multi-hop minibatches (against DGL): their lines and ``res``."""
    k = bench_kernel(graph, seeds[:args.kernel_nodes], fanouts[0], args.replace, args.seed,
                     args.batch_size, args.repeats)
    res["kernel"] = k
    print(f"\none-hop kernel, {k['nodes']:,} seeds, fanout {k['fanout']} "
          f"({k['full_rows']:,} take all neighbors), {k['kernel']['work']:,} sampled edges")
    print(f"  kernel (with edge ids)      {_fmt(k['kernel']['per_s'])} edges")
    print(f"  kernel (CSR positions)      {_fmt(k['kernel_positions']['per_s'])} edges")
    print(f"  kernel (no edge ids)        {_fmt(k['kernel_no_eids']['per_s'])} edges, "
          f"{k['ratio_no_eids']:.2f}x gather")
    print(f"  weighted kernel (edge ids)  {_fmt(k['kernel_weighted']['per_s'])} edges, "
          f"{k['weighted_cost']:.2f}x the uniform kernel's time per edge")
    print(f"  random gather, {k['indices_bytes'] / 2**20:,.0f} MiB array "
          f"{_fmt(k['gather']['per_s'])} reads")
    print(f"  kernel / gather             {_verdict(k['ratio'], KERNEL_TARGET)}; "
          f"best runs: {k['ratio_best']:.2f}x")

    mh = MultiHopBench(graph, seeds, fanouts, args.replace, args.seed, args.batch_size,
                       args.batches)
    peer = None if args.no_peers else find_peer(args.peers_venv, args.dgl_bench)
    res["dgl"] = {"available": False, "error": "skipped (--no-peers)" if args.no_peers
                  else "no peer venv or dgl_bench.py found"}
    if peer is not None:
        print("\nmulti-hop: our repeats interleaved with DGL runs (each loads the graph) ...",
              flush=True)
        res["dgl"] = bench_dgl(graph, peer, args, fanouts, before_each=mh.run_once)
    while len(mh.seconds) < args.repeats:
        mh.run_once()
    m = res["multihop"] = mh.result()
    print(f"\nmulti-hop minibatches, {m['batches']} batches, {m['edges_per_batch']:,.0f} "
          f"edges/batch, median of {len(m['seconds'])}")
    print(f"  mnmg-sampler                {_fmt(m['per_s'])} edges, "
          f"{m['batches_per_s']:,.1f} batches/s, {_fmt(m['nodes_per_s'])} nodes")
    d = res["dgl"]
    if d.get("available"):
        res["multihop_vs_dgl"] = m["per_s"] / d["sampled_edges_per_s"]
        res["multihop_vs_dgl_best"] = m["best_per_s"] / d["best_per_s"]
        print(f"  DGL {d.get('version', '?')} NeighborSampler    "
              f"{_fmt(d['sampled_edges_per_s'])} edges, {d['batches_per_s']:,.1f} batches/s, "
              f"{d['edges_per_batch']:,.0f} edges/batch, median of {args.peer_repeats}")
        print(f"  mnmg-sampler / DGL          {_verdict(res['multihop_vs_dgl'], DGL_TARGET)}; "
              f"best runs: {res['multihop_vs_dgl_best']:.2f}x")
        print("  note: DGL re-samples every layer's destination nodes (seeds are sampled again at "
              "each hop) and draws seeds from all nodes, isolated ones included, so its edges "
              "per batch differ; compare sampled edges per second")
    else:
        res["multihop_vs_dgl"] = res["multihop_vs_dgl_best"] = None
        print(f"  {NO_PEER}" + (f" [{d['error']}]" if not args.no_peers and peer else ""))
        if peer is None and not args.no_peers:
            log.debug("peer search: %s", d["error"])
