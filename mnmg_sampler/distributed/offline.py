"""Offline sample generation under torchrun (``mnmg-sampler sample --partitions DIR``).

Global batch ``i`` takes ``seeds[i*B:(i+1)*B]`` of the epoch's seed order and is sampled by rank
``i % W`` with key ``request_key(seed, 0, i)``; each rank writes its batches as
``OUT/batch_{i:06d}.npz`` (original node ids; layout in ``docs/formats.md``). Files are written
atomically, so an interrupted run never leaves a half-written batch.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import torch
import torch.distributed as dist

from ..ops.rng import request_key
from ..sampler import SampleRequest
from .collective import agree, all_gather_1d


def global_nonisolated(part, group=None) -> np.ndarray:
    """Sorted original ids of nodes with at least one neighbor, gathered from every rank."""
    deg = np.diff(np.asarray(part.indptr))
    mine = np.asarray(part.orig_ids)[deg > 0]
    allv = all_gather_1d(torch.from_numpy(np.ascontiguousarray(mine, np.int64)), group)
    return np.sort(np.concatenate([t.numpy() for t in allv]))


def run_distributed(args: argparse.Namespace) -> int:
    """Sample one epoch across all ranks and write every batch; rank 0 prints a summary."""
    from ..commands.sample import (
        epoch_plan,
        parse_fanouts,
        read_seeds_file,
        save_batch_atomic,
        seed_order,
    )
    from ..graph.partition_io import load_partition
    from ..runtime import init_distributed
    from .sampler import DistSampler

    fanouts = parse_fanouts(args.fanouts)
    env, _ = init_distributed("gloo", "cpu")
    rank, world = env.rank, env.world_size
    try:
        part = agree(lambda: load_partition(args.partitions, rank, world))
        if args.threads:
            import numba

            numba.set_num_threads(args.threads)
        if args.seeds_file:
            nodes = agree(lambda: read_seeds_file(args.seeds_file))
        elif getattr(args, "include_isolated", False):
            nodes = np.arange(int(part.num_nodes), dtype=np.int64)
        else:
            nodes = global_nonisolated(part)
        seeds = seed_order(nodes, args.seed)
        B = args.batch_size
        n_batches, out = epoch_plan(seeds.size, args)
        sampler = DistSampler(part, seed=args.seed)
        mine = list(range(rank, n_batches, world))
        rounds = -(-n_batches // world)
        edges = 0
        t0 = time.perf_counter()
        for r in range(rounds):
            todo = mine[r:r + 1]
            reqs = [SampleRequest(seeds[i * B:(i + 1) * B], fanouts,
                                  request_key(args.seed, 0, i), replace=args.replace)
                    for i in todo]
            for i, b in zip(todo, sampler.sample(reqs), strict=True):
                edges += int(b.e_id.numel())
                if out is not None:
                    save_batch_atomic(out / f"batch_{i:06d}.npz", b)
        dt = time.perf_counter() - t0
        tot = torch.tensor([edges, sampler.ex.bytes_sent], dtype=torch.float64)
        dist.all_reduce(tot)
        if rank == 0:
            if out is not None:
                meta = {"num_batches": n_batches, "batch_size": B, "fanouts": fanouts,
                        "seed": args.seed, "replace": bool(args.replace),
                        "num_nodes": int(part.num_nodes), "format": "mnmg-sampler-batches/1"}
                tmp = out / ".meta.json.tmp"
                tmp.write_text(json.dumps(meta, indent=1, sort_keys=True))
                os.replace(tmp, out / "meta.json")
            _summary(world, n_batches, int(tot[0]), float(tot[1]), dt, out,
                     getattr(args, "json", False))
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


def _summary(world: int, batches: int, edges: int, sent: float, dt: float, out, as_json: bool):
    """Rank 0's summary: a table, or JSON with ``--json``."""
    from ..console import report

    eps, per_edge = edges / max(dt, 1e-9), sent / max(edges, 1)
    rows = [("ranks", world), ("batches", f"{batches:,}"), ("sampled edges", f"{edges:,}"),
            ("time", f"{dt:.3f}s"), ("edges/s", f"{eps:,.0f} (all ranks)"),
            ("bytes exchanged", f"{per_edge:.1f} per sampled edge")]
    if out is not None:
        rows.append(("wrote", f"{batches} batches to {out}"))
    report(rows, {"ranks": world, "batches": batches, "sampled_edges": edges, "seconds": dt,
                  "edges_per_s": eps, "bytes_exchanged_per_edge": per_edge,
                  "out": None if out is None else str(out)}, as_json)
