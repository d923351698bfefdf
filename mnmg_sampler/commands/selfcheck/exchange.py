"""Exchange lines, under torchrun (world size > 1); every rank runs them together.

* ``exchange.all_to_all``: requests packed in the service's wire layout
  (:func:`mnmg_sampler.ops.wire.pack_requests`) through the service's
  :class:`~mnmg_sampler.distributed.collective.Exchanger`, each field checked by the receiver
  (:func:`~mnmg_sampler.ops.wire.gather_work`); the latency of one exchange and the bandwidth
  of a large payload (docs/gpu.md#run-selfcheck-and-send-us-the-report);
* ``exchange.sampling``: a 2-hop round of :class:`~mnmg_sampler.distributed.sampler.DistSampler`
  on a generated graph partitioned in memory, every batch equal to the single process's.
"""

from __future__ import annotations

import numpy as np
import torch

from .result import FAIL, PASS, Check, compare, inject, median_seconds, quiet_wraparound

SEED = 11
PER_RANK = 1000  # node ids per rank in the wire check
RUN_UNDER = "single process: run under torchrun --nproc-per-node N"
MIB = 1 << 20


def _requests(src: int, world: int) -> tuple[np.ndarray, ...]:
    """Rank ``src``'s frontier of the wire check: three requests over every rank's nodes
    (a function of ``src`` only, so every receiver knows what it must get)."""
    from ...ops import wire
    from ...ops.rng import request_key

    rng = np.random.default_rng([SEED, src])
    sizes = rng.integers(40, 160, 3).astype(np.int64)
    nodes = rng.integers(0, world * PER_RANK, int(sizes.sum())).astype(np.int64)
    keys = np.array([request_key(SEED, src, s) for s in range(3)], np.int64)  # full 63 bits
    fanouts = np.array([10, -1, 3], np.int64)
    flags = np.array([0, wire.REPLACE | wire.EDGE_IDS, wire.ORIG_IDS], np.int64)
    return nodes, sizes, keys, fanouts, flags


def _expected(me: int, world: int) -> tuple[np.ndarray, ...]:
    """What :func:`gather_work` must return on rank ``me``: its own nodes, then every other
    rank's nodes owned by ``me`` in rank order; per node its row, key, fanout and replace flag."""
    from ...ops import wire

    lo = me * PER_RANK
    parts: list[list[np.ndarray]] = [[], [], [], []]
    counts = np.zeros(world, np.int64)
    for src in [me] + [s for s in range(world) if s != me]:
        nodes, sizes, keys, fanouts, flags = _requests(src, world)
        req = np.repeat(np.arange(sizes.size), sizes)
        own = (nodes // PER_RANK) == me
        if src != me:
            counts[src] = int(own.sum())
        for out, v in zip(parts, (nodes[own] - lo, keys[req][own], fanouts[req][own],
                                  (flags[req][own] & wire.REPLACE).astype(np.uint8)),
                          strict=True):
            out.append(v)
    return (*(np.concatenate(p) for p in parts), counts)


def _wire_once(ex, me: int, world: int, dtype, name: str) -> str | None:
    """One exchange of the wire check in ``dtype`` words; the first difference or ``None``."""
    from ...ops import wire

    nodes, sizes, keys, fanouts, flags = _requests(me, world)
    inner = np.arange(1, world, dtype=np.int64) * PER_RANK
    k = 8 // np.dtype(dtype).itemsize
    none = np.empty(0, np.int64)
    buf, send, _, _, mine = wire.pack_requests(nodes, sizes, keys, fanouts[:, None], flags,
                                               inner, me, np.empty(0, dtype), k,
                                               np.zeros(world, np.int64), False, none)
    recv, rsizes = ex.exchange(torch.from_numpy(buf), torch.from_numpy(send), "selfcheck")
    rows, kk, ff, rr, _, _, _, _, _, src_nodes, _, _ = wire.gather_work(
        nodes, sizes, keys, fanouts[:, None], flags, mine, recv.numpy(), rsizes.numpy(),
        me * PER_RANK, k, none, 0, np.array([0, 1], np.int64))
    want = _expected(me, world)
    return compare(want, (inject(name, rows, me), kk, ff, rr, src_nodes),
                   ("rows", "keys", "fanouts", "replace", "nodes per source"))


def all_to_all(rank: int, world: int, mib: float, repeats: int) -> Check:
    from ...distributed.collective import Exchanger
    from ...system.console import fmt_count

    name = "exchange.all_to_all"
    ex = Exchanger()
    # a difference is reported after every exchange has run: the peers wait for this rank
    bad = [f"{np.dtype(t).name} wire words: {d}" for t in (np.int32, np.int64)
           if (d := _wire_once(ex, rank, world, t, name))]
    sync = ((lambda: torch.cuda.synchronize(ex.device)) if ex.device.type == "cuda"
            else (lambda: None))
    lat = median_seconds(lambda: _wire_once(ex, rank, world, np.int32, ""), max(repeats, 5),
                         sync)
    # bandwidth: MIB-sized int64 rows to every other rank, made on the backend's device
    per = max(1, int(mib * MIB) // 8)
    send = [0 if d == rank else per for d in range(world)]
    recv = [0 if s == rank else per for s in range(world)]
    ar = torch.arange(per, dtype=torch.int64, device=ex.device)
    payload = torch.cat([ar + ((rank << 40) | (d << 32)) for d in range(world) if d != rank])
    want = torch.cat([ar + ((s << 40) | (rank << 32)) for s in range(world) if s != rank])
    got = ex.payload(payload, send, recv, "selfcheck")
    if not torch.equal(got.to(want.device), want):
        bad.append(f"a {mib:g} MiB payload arrived changed")
    bw_s = median_seconds(lambda: ex.payload(payload, send, recv, "selfcheck"), repeats, sync)
    sent = per * 8 * (world - 1)
    backend = str(torch.distributed.get_backend()).lower()
    how = "all_to_all_single"
    data = {"backend": backend, "transport": how, "device": str(ex.device),
            "latency_s": lat, "payload_bytes_per_peer": per * 8, "bandwidth_s": bw_s,
            "bytes_per_s_sent": sent / max(bw_s, 1e-12)}
    if bad:
        return Check(name, FAIL, "; ".join(bad), data=data)
    return Check(name, PASS, f"{backend} {how}: wire requests decoded exactly (int32 and int64 "
                 f"words); {lat * 1e3:.2f} ms per wire exchange (pack, counts and payload, "
                 f"decode); {fmt_count(sent / bw_s)}B/s sent per rank ({mib:g} MiB to each of "
                 f"{world - 1} peer(s))", data=data)


def _graph(scale: int):
    from ...graph.csr import CSRGraph
    from ...graph.rmat import rmat_edges

    src, dst = rmat_edges(scale, edge_factor=8, seed=5)
    return CSRGraph.from_edges(src, dst, 1 << scale, name=f"rmat:{scale}")


def sampling(rank: int, world: int, device: torch.device | None, sim: bool) -> Check:
    """Two rounds of 2-hop batches over an in-memory partition, against the single process."""
    with quiet_wraparound():
        return _sampling(rank, world, device, sim)


def _sampling(rank: int, world: int, device: torch.device | None, sim: bool) -> Check:
    from ...distributed.sampler import DistSampler
    from ...graph.datasets import nonisolated_nodes
    from ...graph.partition import part_arrays, partition_graph
    from ...graph.partition_io import Partition
    from ...graph.typed import TypedGraph
    from ...ops.rng import request_key
    from ...sampling.sampler import MultiHopSampler, SampleRequest, local_hop_fn

    name = "exchange.sampling"
    g = _graph(9)
    plan = partition_graph(g, world, "random", seed=1)
    a = part_arrays(TypedGraph.from_csr(g), plan, rank, named=False)
    part = Partition(rank=rank, num_parts=world, boundaries=plan.boundaries,
                     num_nodes=g.num_nodes, num_edges=g.num_edges, indptr=a["indptr"],
                     indices=a["indices"], edge_ids=a["edge_ids"], orig_ids=a["orig_ids"])
    kernel = "cuda" if device is not None else "cpu"
    ds = DistSampler(part, seed=SEED, kernel=kernel, shared_topology=False,
                     device=device if device is not None and device.type == "cuda" else None)
    fanouts, bs = ([3, 2], 8) if sim else ([10, 5], 64)
    seeds = np.random.default_rng(SEED).permutation(nonisolated_nodes(g))
    n_batches = 2 * world
    batch = [seeds[i * bs:(i + 1) * bs] for i in range(n_batches)]
    ref = MultiHopSampler(local_hop_fn(g, SEED), g.num_nodes)
    edges = 0
    bad = []  # reported after both rounds: the peers wait for this rank in every round
    for r in range(2):
        i = r * world + rank
        (mb,) = ds.sample([SampleRequest(batch[i], fanouts, request_key(SEED, 0, i))])
        (want,) = ref.sample([SampleRequest(batch[i], fanouts, request_key(SEED, 0, i))])
        keys = ("n_id", "edge_index", "e_id", "num_sampled_nodes", "num_sampled_edges")
        got = [np.asarray(getattr(mb, k)) for k in keys]
        got[0] = inject(name, got[0], rank)
        diff = compare([np.asarray(getattr(want, k)) for k in keys], got, keys)
        if diff:
            bad.append(f"batch {i}: {diff}")
        edges += int(mb.e_id.numel())
    if bad:
        return Check(name, FAIL, "; ".join(bad))
    where = "cuda (Numba's simulator)" if sim and kernel == "cuda" else kernel
    data = {"graph": f"rmat:9 ({g.num_nodes} nodes, {g.num_edges} edges)", "kernel": where,
            "fanouts": fanouts, "batch_size": bs, "batches": n_batches,
            "bytes_sent": int(ds.ex.bytes_sent), "sampled_edges_this_rank": edges}
    return Check(name, PASS, f"{n_batches} batches of {bs} seeds, fanouts {fanouts}, "
                 f"{where} kernel: every batch equals the single process; "
                 f"{ds.ex.bytes_sent:,} bytes sent by this rank", data=data)
