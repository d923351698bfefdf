"""``mnmg-sampler sample``: sample every minibatch of one epoch and print the throughput.

In one process (no ``--partitions``) the whole graph is loaded here and sampled with the CPU
kernel. Seeds, their order and request keys are a distributed run's, so ``--out`` files from both
compare bit for bit. Seeds: every node with a neighbor (``--include-isolated``: every node) or
the ids of ``--seeds-file``, as a seed set (:mod:`mnmg_sampler.loaders.seeds`: no id array of
``num_nodes``). Batch ``i``: positions ``i*B .. (i+1)*B - 1`` of the loaders' keyed shuffle
(:func:`batch_seeds`), request key ``request_key(seed, epoch=0, batch=i)``.

Weights: ``--weights NAME|FILE`` (a job's ``sampler.weights``) in one process; with
``--partitions`` those stored by ``partition --weights`` (``--weights``, if given, must match).
"""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import ConfigError, SamplingInputError
from ..system.console import add_json_flag, report
from .graph_args import add_weights_argument, check_weights_file

if TYPE_CHECKING:
    from ..loaders.seeds import SeedSet

HELP = "sample one epoch of minibatches and print the throughput"


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        v = int(text)
    except ValueError:
        v = 0
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return v


def parse_fanouts(text: str) -> list[int]:
    """``"15,10,5"`` -> ``[15, 10, 5]`` (hop 1 first; -1 = all neighbors), validated."""
    from ..sampling.sampler import check_fanouts

    parts = [p.strip() for p in str(text).split(",")]
    try:
        values = [int(p) for p in parts]
    except ValueError:
        values = parts  # check_fanouts names the bad value in a SamplingInputError
    return check_fanouts(values)


def add_graph_arguments(p: argparse.ArgumentParser) -> None:
    """Options shared by ``sample`` and ``bench``: how to sample (fanouts, batch, seed, threads)."""
    p.add_argument("--fanouts", default="15,10,5",
                   help="neighbors per hop, hop 1 (nearest the seeds) first; -1 = all "
                        "(default: 15,10,5)")
    p.add_argument("--batch-size", type=positive_int, default=1024,
                   help="seeds per minibatch (default: 1024)")
    p.add_argument("--seed", type=int, default=0,
                   help="RNG seed: seed order and every draw (default: 0)")
    p.add_argument("--undirected", action="store_const", const=True, default=None,
                   help="add reverse edges when loading the graph (default: the dataset's own)")
    p.add_argument("--threads", type=positive_int, default=None,
                   help="sampling threads (numba); results do not depend on it "
                        "(default: the cores this process may use)")
    p.add_argument("--replace", action="store_true", help="sample with replacement")


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "sample", help=HELP, description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("graph", nargs="?", metavar="GRAPH",
                   help="cora, rmat:SCALE[:EDGE_FACTOR], or a graph file (.npz, edge list); "
                        "not needed with --partitions")
    add_graph_arguments(p)
    p.add_argument("--num-batches", type=positive_int, default=None,
                   help="stop after this many batches (default: the whole epoch)")
    p.add_argument("--include-isolated", action="store_true",
                   help="use nodes without neighbors as seeds too")
    p.add_argument("--seeds-file", metavar="FILE",
                   help="seed node ids (.npy, or text with one id per line) instead of all nodes")
    p.add_argument("--partitions", metavar="DIR",
                   help="partition directory from `mnmg-sampler partition`: sample distributed "
                        "(run under torchrun, one rank per partition)")
    p.add_argument("--out", metavar="DIR",
                   help="write every minibatch to DIR/batch_NNNNNN.npz (see save_batch); DIR "
                        "must be missing or empty, unless --overwrite")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the batches of an earlier `sample --out DIR` run (or an empty "
                        "DIR); a DIR holding other files is refused")
    p.add_argument("--collective-timeout", type=float, default=600.0, metavar="S",
                   help="with --partitions: seconds a rank waits for the others in a "
                        "collective before a typed error, as runtime.collective_timeout_s "
                        "(default: 600)")
    p.add_argument("--shared-topology", choices=("auto", "true", "false"), default="auto",
                   help="with --partitions: ranks on one host map each other's parts and sample "
                        "off the wire, as jobs always do where they can (default: auto, on "
                        "exactly when every rank runs on this host; false: the wire path)")
    add_weights_argument(p, "sample with probability proportional to them; with --partitions "
                         "the partition's stored weights are used and this must name them")
    add_json_flag(p)
    p.set_defaults(func=run)
    return p


def seed_order(nodes: np.ndarray, seed: int, epoch: int = 0) -> np.ndarray:
    """A permutation of ``nodes`` that depends only on (seed, epoch): the benchmarks' seed order
    (``sample`` reads its seeds batch by batch instead: :func:`batch_seeds`)."""
    nodes = np.asarray(nodes, np.int64)
    return nodes[np.random.default_rng([int(seed), int(epoch)]).permutation(nodes.size)]


def read_seeds_file(path: str) -> np.ndarray:
    """Seed ids from a ``.npy`` file or a text file with one integer per line."""
    p = Path(path)
    if not p.is_file():
        raise SamplingInputError(f"seeds file {path} does not exist",
                                 "there are no seeds to sample",
                                 "pass an existing .npy or text file to --seeds-file")
    try:
        arr = np.load(p, allow_pickle=False) if p.suffix == ".npy" else np.loadtxt(
            p, dtype=np.int64, ndmin=1, comments="#")
    except ValueError as e:
        raise SamplingInputError(f"seeds file {path} cannot be read: {e}", "there are no seeds",
                                 "write one integer node id per line, or a .npy int array") from e
    arr = np.asarray(arr)
    if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
        raise SamplingInputError(
            f"seeds file {path} holds a {arr.dtype} array of shape {arr.shape}",
            "seeds must be a flat list of integer node ids", "save a 1-D int64 array")
    return arr.astype(np.int64)


def save_batch(path: Path, batch) -> None:
    """Write one :class:`MiniBatch` as ``.npz`` (n_id, edge_index, e_id, counts, key), through
    a temporary name and a rename: no half-written batch is left."""
    import os

    tmp = path.with_name(f".{path.stem}.tmp-{os.getpid()}.npz")
    np.savez(tmp, n_id=batch.n_id.numpy(), edge_index=batch.edge_index.numpy(),
             e_id=batch.e_id.numpy(), input_id=batch.input_id.numpy(),
             batch_size=np.int64(batch.batch_size),
             num_sampled_nodes=np.asarray(batch.num_sampled_nodes, np.int64),
             num_sampled_edges=np.asarray(batch.num_sampled_edges, np.int64),
             key=np.int64(batch.key))
    os.replace(tmp, path)


def batch_request(seeds: SeedSet, i: int, fanouts: list[int], args: argparse.Namespace):
    """The request of global batch ``i`` of epoch 0: :func:`batch_seeds`, key
    ``request_key(seed, 0, i)``."""
    from ..sampling.sampler import SampleRequest, request_key

    return SampleRequest(batch_seeds(seeds, i, args.batch_size, args.seed), fanouts,
                         request_key(args.seed, 0, i), replace=args.replace)


def set_threads(threads: int | None) -> int:
    """``--threads``: :func:`mnmg_sampler.system.runtime.set_threads` (torch's and numba's;
    ``None``: the cores this process may use), refusing more than numba's limit."""
    import numba

    from ..system.runtime import set_threads as set_all

    limit = numba.config.NUMBA_NUM_THREADS
    if threads is not None and threads > limit:
        raise ConfigError(f"--threads {threads} exceeds numba's limit of {limit} threads",
                          "numba cannot start more threads than NUMBA_NUM_THREADS",
                          f"use --threads {limit} or fewer, or set NUMBA_NUM_THREADS={threads}")
    return set_all(threads)


def input_seeds(path: str, num_nodes: int, node_ids) -> np.ndarray:
    """The seeds of seeds file ``path``: for a renumbered graph the file holds the input's ids,
    translated here (:func:`~mnmg_sampler.sampling.sampler.check_input_nodes`)."""
    nodes = read_seeds_file(path)
    if node_ids is None:
        return nodes
    from ..sampling.sampler import check_input_nodes

    return check_input_nodes(nodes, num_nodes, node_ids=node_ids, name=f"seeds file {path}",
                             what="there are no seeds to sample")


def batch_seeds(seeds: SeedSet, i: int, batch_size: int, seed: int) -> np.ndarray:
    """Seed ids of batch ``i`` of epoch 0: positions ``i*B .. (i+1)*B - 1`` of the keyed shuffle
    of the seed set ``seeds`` (the loaders' :func:`~mnmg_sampler.loaders.neighbor.epoch_order`), in
    ``O(batch_size)`` memory."""
    from ..loaders.neighbor import epoch_order, shuffle_keys

    n = len(seeds)
    lo, hi = i * batch_size, min(n, (i + 1) * batch_size)
    return seeds.ids(epoch_order(lo, hi, n, shuffle_keys(True, seed, 0)))


def epoch_seeds(graph, args: argparse.Namespace) -> SeedSet:
    """The seed set of the epoch (see the module docstring): a
    :class:`~mnmg_sampler.loaders.seeds.SeedSet`, read batch by batch with :func:`batch_seeds`."""
    from ..loaders.seeds import AllNodes, NodeBits, NodeIds

    if args.seeds_file:
        nodes = input_seeds(args.seeds_file, graph.num_nodes, graph.node_ids)
        graph.check_ids(nodes, "seed")
        seeds = NodeIds(nodes, graph.num_nodes)
    elif args.include_isolated:
        seeds = AllNodes(graph.num_nodes)
    else:
        seeds = NodeBits.nonisolated(graph)
    if len(seeds) == 0:
        raise SamplingInputError(f"graph '{graph.name}' has no seed nodes", "nothing to sample",
                                 "pass --include-isolated or a graph with edges")
    return seeds


_OUR_FILE = re.compile(r"^(batch_\d+\.npz|meta\.json|\.batch_\d+\.tmp-\d+\.npz|"
                       r"\.meta\.json\.tmp)$")


def check_out_dir(out: str | None, overwrite: bool) -> list[Path]:
    """Refuse ``--out DIR`` unless it is missing or empty, or (``--overwrite``) holds only what an
    earlier ``sample --out`` wrote; returns those earlier files (to remove before writing).

    Every rank calls it before any collective, so all of them refuse alike and none hangs.
    """
    if out is None:
        return []
    d = Path(out)
    if not d.exists() and not d.is_symlink():
        return []
    fix = "choose another --out, or pass --overwrite to replace an earlier run's batches"
    if not d.is_dir():
        raise ConfigError(f"--out {out} exists and is not a directory",
                          "the batches cannot be written there", "choose another --out")
    entries = sorted(d.iterdir())
    if entries and not overwrite:
        n = len(entries)
        raise ConfigError(f"--out {out} is not empty ({n} {'entry' if n == 1 else 'entries'})",
                          "batch files there would be overwritten", fix)
    foreign = [e.name for e in entries if not _OUR_FILE.match(e.name) or not e.is_file()]
    if foreign:
        raise ConfigError(
            f"--out {out} also holds {', '.join(foreign[:5])}" + (" ..." if len(foreign) > 5
                                                                 else ""),
            "these were not written by `sample --out`, so --overwrite leaves the directory "
            "untouched", f"move them out of {out}, or choose another --out")
    return entries


def epoch_plan(num_seeds: int, args: argparse.Namespace) -> tuple[int, Path | None]:
    """How many batches of ``--batch-size`` this run samples, and the ``--out`` dir (created)."""
    n_batches = -(-num_seeds // args.batch_size)
    if args.num_batches is not None:
        n_batches = min(n_batches, args.num_batches)
    out = Path(args.out) if args.out else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    return n_batches, out


def run(args: argparse.Namespace) -> int:
    from ..sampling.sampler import check_seed

    check_seed(args.seed)
    check_weights_file(getattr(args, "weights", None))
    for old in check_out_dir(args.out, getattr(args, "overwrite", False)):
        old.unlink(missing_ok=True)  # another rank may have removed it already
    if getattr(args, "partitions", None):
        from ..system.runtime import timeout_delta

        timeout_delta(args.collective_timeout, "--collective-timeout")  # before any collective
        return run_distributed(args)
    if not args.graph:
        raise ConfigError("no GRAPH given", "there is nothing to sample",
                          "pass a graph (e.g. cora, rmat:16, edges.npz) or --partitions DIR")
    return run_single(args)


def partition_weights(part, spec: str | None, where: str) -> str | None:
    """What the partition samples with: ``None`` (uniform) or the name its weights were stored
    under (``"stored"`` if unrecorded); a :class:`ConfigError` if ``--weights`` names others."""
    man = part.manifest or {}
    stored = part.weights is not None
    name = ((man.get("source") or {}).get("load") or {}).get("weights")
    if spec and not stored:
        raise ConfigError(f"--weights {spec} but the partition directory {where} holds no edge "
                          "weights", "its parts can only be sampled uniformly",
                          f"partition again with `mnmg-sampler partition ... --weights {spec}`, "
                          "or drop --weights")
    if spec and name is not None and name != spec:
        raise ConfigError(f"--weights {spec} but {where} stores the weights {name!r}",
                          "the stored weights are not the ones asked for",
                          f"pass --weights {name}, or partition again with --weights {spec}")
    return (name or "stored") if stored else None


def sample_epoch(sampler, seeds: SeedSet, batches, rounds: int, fanouts: list[int],
                 args: argparse.Namespace, out: Path | None, ids=None,
                 step: list[str] | None = None) -> tuple[int, int, float]:
    """Sample global batches ``batches``, one a round for ``rounds`` rounds (a rank with none
    left still joins the round's collectives), each written to ``out`` with ``n_id`` mapped by
    ``ids``; ``step[0]`` names the round. Returns sampled edges, nodes and seconds sampling."""
    edges = nodes = 0
    busy = 1e-9
    for r in range(rounds):
        if step is not None:
            step[0] = f"sampling round {r + 1} of {rounds}"
        todo = batches[r:r + 1]
        reqs = [batch_request(seeds, i, fanouts, args) for i in todo]
        t = time.perf_counter()
        got = sampler.sample(reqs)
        busy += time.perf_counter() - t
        for i, b in zip(todo, got, strict=True):
            edges += int(b.e_id.numel())
            nodes += b.num_nodes
            if out is not None:
                if ids is not None:
                    b.n_id = b.n_id.new_tensor(ids(b.n_id.numpy()))
                save_batch(out / f"batch_{i:06d}.npz", b)
    return edges, nodes, busy


def run_distributed(args: argparse.Namespace) -> int:
    """Sample one epoch under torchrun over a partition directory; rank 0 prints a summary.

    Global batch ``i`` (the module's seeds and key) is sampled by rank ``i % W``, which writes it
    atomically as ``OUT/batch_{i:06d}.npz`` (original node ids; layout in ``docs/formats.md``).
    A dead or silent peer is a :class:`~mnmg_sampler.errors.PeerError` naming the step.
    """
    import json
    import os

    import torch
    import torch.distributed as dist

    from ..distributed.collective import agree, is_peer_failure, peer_error
    from ..distributed.offline import nonisolated_bits_everywhere
    from ..distributed.sampler import DistSampler
    from ..graph.partition_io import load_partition
    from ..loaders.seeds import AllNodes, NodeBits, NodeIds
    from ..system.runtime import init_distributed

    fanouts = parse_fanouts(args.fanouts)
    env, _ = init_distributed("gloo", "cpu", args.collective_timeout)
    rank, world = env.rank, env.world_size
    step = ["the start-up (loading and checking the partitions)"]
    try:
        part = agree(lambda: load_partition(args.partitions, rank, world))
        weights = agree(lambda: partition_weights(part, getattr(args, "weights", None),
                                                  args.partitions))
        if args.threads:
            set_threads(args.threads)
        n = int(part.num_nodes)
        if args.seeds_file:
            seeds = NodeIds(agree(lambda: input_seeds(args.seeds_file, n, part.node_ids)), n)
        elif getattr(args, "include_isolated", False):
            seeds = AllNodes(n)
        else:  # the union of the parts' bitmaps: N / 8 bytes per rank, no id array
            seeds = NodeBits(nonisolated_bits_everywhere(part), n)
        n_batches, out = epoch_plan(len(seeds), args)
        shared = {"auto": "auto", "true": True, "false": False}[args.shared_topology]
        sampler = DistSampler(part, seed=args.seed, shared_topology=shared)
        t0 = time.perf_counter()
        edges, _, _ = sample_epoch(sampler, seeds, range(rank, n_batches, world),
                                   -(-n_batches // world), fanouts, args, out, step=step)
        dt = max(time.perf_counter() - t0, 1e-9)
        step[0] = "the summary (totals over ranks)"
        tot = torch.tensor([edges, sampler.ex.bytes_sent], dtype=torch.float64)
        dist.all_reduce(tot)
        if rank == 0:
            if out is not None:
                meta = {"num_batches": n_batches, "batch_size": args.batch_size,
                        "fanouts": fanouts, "seed": args.seed, "replace": bool(args.replace),
                        "num_nodes": n, "format": "mnmg-sampler-batches/1"}
                if weights is not None:
                    meta["weights"] = weights
                tmp = out / ".meta.json.tmp"
                tmp.write_text(json.dumps(meta, indent=1, sort_keys=True))
                os.replace(tmp, out / "meta.json")
            edges, per_edge = int(tot[0]), float(tot[1]) / max(int(tot[0]), 1)
            head = [("ranks", world)] + ([("weights", weights)] if weights is not None else [])
            summary(head, {"ranks": world, "weights": weights}, n_batches, edges, dt, out,
                    args, ["", " (all ranks)"],
                    [("bytes exchanged", f"{per_edge:.1f} per sampled edge")],
                    {"bytes_exchanged_per_edge": per_edge})
        dist.barrier()
    except RuntimeError as e:  # a collective failed: a peer died or hangs
        if not is_peer_failure(e):
            raise
        raise peer_error(e, f"{step[0]} of `sample --partitions`") from e
    finally:
        dist.destroy_process_group()
    return 0


def run_single(args: argparse.Namespace) -> int:
    """Sample the epoch in this process; prints one summary block."""
    from ..graph.datasets import load_graph
    from ..sampling.sampler import MultiHopSampler, local_hop_fn

    fanouts = parse_fanouts(args.fanouts)
    threads = set_threads(args.threads)
    t0 = time.perf_counter()
    graph = load_graph(args.graph, undirected=args.undirected)
    spec = getattr(args, "weights", None)
    if spec:
        from ..graph.weights import resolve_edge_weights
        from ..ops.weighted import local_weighted_hop_fn

        hop = local_weighted_hop_fn(
            graph, resolve_edge_weights(spec, args.graph, graph, key="--weights"), args.seed)
    else:
        hop = local_hop_fn(graph, args.seed)
    load_s = time.perf_counter() - t0
    seeds = epoch_seeds(graph, args)
    n_batches, out = epoch_plan(len(seeds), args)
    sampler = MultiHopSampler(hop, graph.num_nodes)
    sampler.sample([batch_request(seeds, 0, fanouts, args)])  # warm-up (compiled kernels)
    edges, nodes, busy = sample_epoch(sampler, seeds, range(n_batches), n_batches, fanouts,
                                      args, out, graph.original_ids)
    head = [("graph", f"{graph.name}: {graph.num_nodes:,} nodes, {graph.num_edges:,} edges "
                      f"(loaded in {load_s:.1f}s)"),
            ("seeds", f"{len(seeds):,}, batch size {args.batch_size}, fanouts {fanouts}, "
                      f"replace {args.replace}, seed {args.seed}, threads {threads}"
                      + (f", weights {spec}" if spec else ""))]
    data = {"graph": graph.name, "nodes": int(graph.num_nodes), "edges": int(graph.num_edges),
            "load_s": load_s, "seeds": len(seeds), "batch_size": args.batch_size,
            "fanouts": fanouts, "replace": bool(args.replace), "seed": args.seed,
            "threads": threads, "weights": spec or None, "sampled_nodes": nodes}
    summary(head, data, n_batches, edges, busy, out, args,
            [" (sampling only, after one warm-up batch)", ""],
            [("nodes/s", f"{nodes / busy:,.0f}"), ("batches/s", f"{n_batches / busy:,.1f}")],
            {"nodes_per_s": nodes / busy, "batches_per_s": n_batches / busy},
            [("sampled nodes", f"{nodes:,}")])
    return 0


def summary(head: list, data: dict, batches: int, edges: int, seconds: float, out, args,
            notes: list[str], rates: list, rate_data: dict, counts: list = ()) -> None:
    """The run's summary: ``head`` rows, then batches, sampled edges (and ``counts``), time
    (``notes[0]``), edges/s (``notes[1]``) and ``rates``; a table, or JSON with ``--json``."""
    eps = edges / seconds
    rows = [*head, ("batches", f"{batches:,}"), ("sampled edges", f"{edges:,}"), *counts,
            ("time", f"{seconds:.3f}s{notes[0]}"), ("edges/s", f"{eps:,.0f}{notes[1]}"), *rates]
    if out is not None:
        rows.append(("wrote", f"{batches} batches to {out}"))
    report(rows, {**data, "batches": batches, "sampled_edges": edges, "seconds": seconds,
                  "edges_per_s": eps, **rate_data, "out": None if out is None else str(out)},
           getattr(args, "json", False))
