"""No num_nodes-sized seed array on any rank (issue 23): ``input_nodes=None`` and a random split
of all nodes are rules read batch by batch, shuffled by a keyed permutation. Under an address
space limit that no int64 array of num_nodes entries fits in, every seed is still seen exactly
once per epoch, and the batches are identical for W = 1 and 2."""

from __future__ import annotations

import hashlib

import numpy as np

from mnmg_sampler.graph.csr import CSRGraph
from mnmg_sampler.graph.partition import partition

from .harness import run_ranks
from .test_id_maps import _status

N = 1 << 18  # an int64 array of N entries is 2 MiB; the ranks may add 1.8 MiB while they sample
LIMIT = 0.9  # of 8 * N bytes: the headroom under the limits
B = 1 << 13  # N / (B * W) is an integer for W = 1, 2: the global batches do not depend on W
FAN = [1]  # a small round (the seeds are what is measured), well within the headroom
SEED = 5


def _graph() -> CSRGraph:
    rng = np.random.default_rng(4)
    src, dst = rng.integers(0, N, N // 4), rng.integers(0, N, N // 4)
    return CSRGraph.from_edges(src, dst, N, name="sparse-seeds")


def _hash_sum(ids: np.ndarray) -> int:
    """Sum of a keyed 64-bit hash of the ids, modulo 2**64: equal sums (with equal counts) mean
    the same multiset of ids, except with negligible probability."""
    from mnmg_sampler.graph.permute import hash_ids

    return int(hash_ids(ids, 99, 7).sum(dtype=np.uint64))


def _digest(mb) -> dict:
    seeds = mb.n_id[:mb.batch_size].numpy()
    h = hashlib.sha256(mb.n_id.numpy().tobytes() + mb.edge_index.numpy().tobytes())
    return {"count": int(seeds.size), "sum": int(seeds.sum()), "hash": _hash_sum(seeds),
            "digest": h.hexdigest(), "key": int(mb.key)}


def _epoch(loader, epoch: int) -> list[dict]:
    loader.set_epoch(epoch)
    return [_digest(mb) for mb in loader]


def _loader_epochs(svc, world: int, cap=lambda: None) -> dict:
    """One epoch of each seed set: every node, half the nodes by a random split, and (W > 1)
    every node and a quarter of them split by owner; one request per round (prefetch=1).
    ``cap()`` runs before each loader is built."""
    from mnmg_sampler.loaders.neighbor import DistNeighborLoader
    from mnmg_sampler.train.setup import split_ids

    splits = split_ids(N, [0.5, 0.25, 0.25], seed=2)
    sets = [("all", None, "global", 3), ("train", splits["train"], "global", 1)]
    if world > 1:  # (an owner split keeps the positions of the rank's own seeds: N / 8 here)
        sets += [("owner", None, "owner", 0), ("owner_val", splits["val"], "owner", 0)]
    out = {}
    for name, seeds, split, epoch in sets:
        cap()
        out[name] = _epoch(DistNeighborLoader(svc, seeds, FAN, B, shuffle=True, seed=SEED,
                                              split=split, prefetch=1), epoch)
    return out


def _cap(budget: int, bites: list) -> None:
    """Cap this process's address space and data segment at what it holds now (free heap
    returned first) plus ``budget`` (soft limits; the hard ones stay unlimited, so a later call
    may move them), and record whether an int64 array of num_nodes entries is refused."""
    import ctypes
    import gc
    import resource

    gc.collect()
    ctypes.CDLL(None).malloc_trim(0)
    for which, key in ((resource.RLIMIT_DATA, "VmData"), (resource.RLIMIT_AS, "VmSize")):
        resource.setrlimit(which, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        resource.setrlimit(which, (_status(key) + budget, resource.RLIM_INFINITY))
    try:
        np.ones(N, np.int64)
        bites.append(False)
    except MemoryError:
        bites.append(True)


def _under_limit(rank, world, d):
    import ctypes

    import torch
    import torch.distributed as dist

    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.graph.partition_io import load_partition
    from mnmg_sampler.loaders.neighbor import DistNeighborLoader

    ctypes.CDLL(None).mallopt(-3, 1 << 17)  # M_MMAP_THRESHOLD: big blocks go back on free
    svc = SamplingService(load_partition(d, rank, world), seed=SEED, features=False)
    budget = int(LIMIT * 8 * N)
    try:
        # warm up at full batch size (compiled kernels, the rounds' buffers; one request per
        # round, so no round merges two); then, before each loader is built, cap the address
        # space and data segment: what the loader and its epoch add must fit in less than one
        # int64 array of num_nodes entries
        warm = DistNeighborLoader(svc, np.arange(0, N, N // (2 * B * world)), FAN, B,
                                  shuffle=True, seed=1, prefetch=1)
        _epoch(warm, 0)
        bites: list[bool] = []
        out = _loader_epochs(svc, world, lambda: _cap(budget, bites))
        # every seed once: the ranks' counts and sums, reduced (the parent checks the totals)
        tot = torch.tensor([sum(b["count"] for b in out["all"]),
                            sum(b["sum"] for b in out["all"])], dtype=torch.int64)
        dist.all_reduce(tot)
    finally:
        svc.shutdown()
    return out, tot.tolist(), bites


def _one_rank_here(d: str, store: str) -> dict:
    """W = 1 in this process (no limit: the ranks above show the memory; this, the batches)."""
    import torch.distributed as dist

    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.graph.partition_io import load_partition

    dist.init_process_group("gloo", store=dist.FileStore(store, 1), rank=0, world_size=1)
    try:
        svc = SamplingService(load_partition(d, 0, 1), seed=SEED, features=False)
        try:
            return _loader_epochs(svc, 1)
        finally:
            svc.shutdown()
    finally:
        dist.destroy_process_group()


def _check_once(batches: list[dict], ids_hash: int, ids_sum: int, n: int) -> None:
    assert sum(b["count"] for b in batches) == n
    assert sum(b["sum"] for b in batches) == ids_sum
    assert sum(b["hash"] for b in batches) % (1 << 64) == ids_hash  # the same multiset


def test_seeds_and_splits_without_num_nodes_arrays(tmp_path):
    from mnmg_sampler.train.setup import split_ids

    g = _graph()
    every = np.arange(N, dtype=np.int64)
    splits = split_ids(N, [0.5, 0.25, 0.25], seed=2)
    want = {k: s.ids(np.arange(len(s))) for k, s in splits.items()}
    assert np.unique(want["train"]).size == len(splits["train"]) == N // 2
    d1 = str(partition(g, 1, "random", tmp_path / "w1", seed=1))
    d2 = str(partition(g, 2, "random", tmp_path / "w2", seed=1))
    res = run_ranks(_under_limit, 2, d2, timeout=600, env={"MNMG_SAMPLER_MALLOC": "default"})
    for _, tot, bites in res:
        assert bites == [True] * 4  # before each loader: no int64 array of num_nodes fits
        assert tot == [N, int(every.sum())]  # the all-reduced count and sum
    one = _one_rank_here(d1, str(tmp_path / "store"))
    by_world = {}
    for world, outs in ((1, [one]), (2, [out for out, _, _ in res])):
        for name in outs[0]:
            ranks = [out[name] for out in outs]
            assert len({len(r) for r in ranks}) == 1  # the same batch count on every rank
            ids = want["val"] if name == "owner_val" else want["train"] if name == "train" \
                else every
            _check_once([b for r in ranks for b in r], _hash_sum(ids), int(ids.sum()), ids.size)
        # global batch g = rank + j * W
        by_world[world] = {name: {r + j * world: b for r, out in enumerate(outs)
                                  for j, b in enumerate(out[name])} for name in ("all", "train")}
    assert by_world[1] == by_world[2]  # identical batches (seeds, n_id, edges, keys) for W = 1, 2
