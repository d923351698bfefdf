"""Distributed multi-hop sampling: frontier exchange around one kernel call per hop per rank.

Every rank owns one partition. For each hop, a rank buckets the frontier of all its requests by
owner, sends (node, key, fanout, replace) rows with one all-to-all, runs **one** kernel call over
everything it received from all ranks, and sends counts and (neighbor, edge id) rows back. The
requester deduplicates and renumbers (:class:`~mnmg_sampler.sampler.MultiHopSampler`). Calls are
collective: every rank calls :meth:`DistSampler.sample` the same number of times, with any number
of requests, including none.

Ids: requests and minibatches use the **original** node ids of the input graph; the relabelled
ids of the partitioning stay inside. The RNG is keyed on original ids and neighbor lists keep
canonical order, so results are bit-identical to the single-process sampler for any world size
and partitioning.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import torch
import torch.distributed as dist

from ..batch import MiniBatch
from ..errors import SamplingInputError
from ..ops import cpu
from ..sampler import MultiHopSampler, SampleRequest, check_seed
from .collective import Exchanger, backend_device, raise_agreed
from .consistency import check_same_partitioning
from .partition_book import PartitionBook


def segment_gather_index(counts_perm: np.ndarray, inv: np.ndarray) -> np.ndarray:
    """Index that reorders variable-length segments from permuted to original node order.

    Segment ``p`` (length ``counts_perm[p]``) belongs to original node ``j`` with ``inv[j] == p``.
    """
    off = np.zeros(counts_perm.size + 1, np.int64)
    np.cumsum(counts_perm, out=off[1:])
    counts = counts_perm[inv]
    starts = off[:-1][inv]
    total = int(counts.sum())
    out_off = np.zeros(counts.size + 1, np.int64)
    np.cumsum(counts, out=out_off[1:])
    return np.repeat(starts - out_off[:-1], counts) + np.arange(total, dtype=np.int64)


class DistSampler:
    """Collective multi-hop sampler over a partitioned graph.

    Args:
        part: this rank's :class:`~mnmg_sampler.graph.partition_io.Partition`.
        seed: the job's sampling seed (the RNG's first counter).
        group: the process group to exchange over (the sampler's own group in the service).
    """

    def __init__(self, part, seed: int = 0, group: dist.ProcessGroup | None = None,
                 kernel: str = "cpu", device: torch.device | None = None) -> None:
        self.part = part
        # plain ndarray views of the memory-mapped arrays (no copy; cheaper to index)
        self._csr = tuple(np.asarray(a) for a in (part.indptr, part.indices, part.edge_ids,
                                                  part.orig_ids))
        self.kernel = kernel
        if kernel == "cuda":
            self._cuda = _CudaHop(self._csr, device)
        elif kernel != "cpu":
            raise SamplingInputError(f"unknown kernel {kernel!r}", "no hop can be sampled",
                                     "use kernel='cpu' or kernel='cuda'")
        self.seed = check_seed(seed)
        self.group = group
        self.ex = Exchanger(group)
        check_same_partitioning(part, group)  # collective: no rank samples a mixed partitioning
        self.book = PartitionBook(torch.from_numpy(np.asarray(part.boundaries, np.int64)))
        self.lo = int(part.boundaries[part.rank])
        self.new_to_orig = np.asarray(part.new_to_orig)  # plain views: faster fancy indexing
        self.orig_to_new = np.asarray(part.orig_to_new)
        self.sampler = MultiHopSampler(self._hop, int(part.num_nodes))
        self.kernel_calls = 0
        self.kernel_nodes = 0
        self.kernel_edges = 0
        self.t_kernel = 0.0

    # -- one hop ------------------------------------------------------------------------
    def _hop(self, nodes, keys, hop, fanouts, replace):
        W = self.ex.world_size
        t_nodes = torch.from_numpy(nodes)
        owner = self.book.owner(t_nodes).numpy()
        # small-int keys make numpy's stable sort a linear-time radix sort
        perm = np.argsort(owner.astype(np.int16 if W < 2**15 else np.int64), kind="stable")
        inv = np.empty_like(perm)
        inv[perm] = np.arange(perm.size)
        send_counts = torch.from_numpy(np.bincount(owner, minlength=W).astype(np.int64))
        payload = np.stack([nodes[perm], keys[perm], fanouts[perm],
                            replace[perm].astype(np.int64)], 1) if nodes.size else np.empty(
            (0, 4), np.int64)
        recv, recv_counts = self.ex.exchange(torch.from_numpy(payload), send_counts)
        recv = recv.numpy()
        rows = recv[:, 0] - self.lo
        t0 = time.perf_counter()
        if self.kernel == "cuda":
            c, nb, e = self._cuda(rows, recv[:, 1], self.seed, hop, recv[:, 2], recv[:, 3])
        else:
            indptr, indices, eids, orig = self._csr
            c, nb, e = cpu.sample_neighbors(indptr, indices, eids, rows, orig[rows], recv[:, 1],
                                            self.seed, hop, recv[:, 2],
                                            recv[:, 3].astype(np.uint8))
        self.t_kernel += time.perf_counter() - t0
        self.kernel_calls += 1
        self.kernel_nodes += int(rows.size)
        self.kernel_edges += int(nb.size)
        rc, sc = recv_counts.tolist(), send_counts.tolist()
        back = self.ex.payload(torch.from_numpy(c), rc, sc).numpy()
        seg_send, seg_recv = segment_sums(c, rc), segment_sums(back, sc)
        got = self.ex.payload(torch.from_numpy(np.stack([nb, e], 1)), seg_send.tolist(),
                              seg_recv.tolist()).numpy()
        idx = segment_gather_index(back, inv)
        return back[inv], np.ascontiguousarray(got[idx, 0]), np.ascontiguousarray(got[idx, 1])

    # -- public ---------------------------------------------------------------------------
    def sample(self, requests: Sequence[SampleRequest], features=None) -> list[MiniBatch]:
        """Collective: sample this rank's requests (original ids) together with every rank's.

        With a :class:`~mnmg_sampler.distributed.features.DistFeatureStore`, ``x`` and ``y`` of
        every minibatch are fetched in the same call (one more exchange each way).
        """
        err = None
        try:
            for r in requests:
                self._check(r.seeds)
        except SamplingInputError as e:
            err = e
        # one all-reduce agrees on both: did any rank fail, and how many hops this round has
        flags = torch.tensor([1 if err is not None else 0,
                              max((len(r.fanouts) for r in requests), default=0)],
                             device=backend_device(self.group))
        dist.all_reduce(flags, op=dist.ReduceOp.MAX, group=self.group)
        if int(flags[0]):
            raise_agreed(err, self.group)
        hops = flags[1]
        internal = [SampleRequest(self.orig_to_new[r.seeds], r.fanouts, r.key, r.replace,
                                  r.input_id) for r in requests]
        out = self.sampler.sample_checked(internal, num_hops=int(hops.item()))
        if features is not None and features.enabled:
            for b, (x, y) in zip(out, features.fetch([b.n_id.numpy() for b in out]),
                                 strict=True):
                b.x, b.y = x, y
        for b in out:
            b.n_id = torch.from_numpy(np.asarray(self.new_to_orig[b.n_id.numpy()], np.int64))
        return out

    def _check(self, seeds: np.ndarray,
               consequence: str = "no neighbors can be sampled for it; every rank stops this "
                                  "round") -> None:
        n = int(self.part.num_nodes)
        if seeds.size and (int(seeds.min()) < 0 or int(seeds.max()) >= n):
            bad = int(seeds.min()) if int(seeds.min()) < 0 else int(seeds.max())
            raise SamplingInputError(
                f"seed id {bad} is out of range for a graph with {n} nodes",
                consequence,
                f"pass original node ids in [0, {n})",
            )


class _CudaHop:
    """The hop kernel on a CUDA device: the partition's CSR lives there, draws run on a
    dedicated stream, results come back to the host for renumbering.

    Under Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) the same code runs on the CPU,
    which is how it is tested here; it has not run on a real GPU.
    """

    def __init__(self, csr: tuple, device: torch.device | None) -> None:
        from ..gpu import require_numba_cuda, simulator_enabled

        require_numba_cuda()
        if device is None:
            device = torch.device("cpu") if simulator_enabled() else torch.device(
                "cuda", torch.cuda.current_device())
        self.device = device
        # a writable host copy first: the mapped arrays are read-only, and the simulator writes
        # kernel arguments back to the host
        self.arrays = tuple(torch.from_numpy(np.array(a)).to(device) for a in csr)
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None

    def __call__(self, rows, keys, seed, hop, fanouts, replace):
        from ..ops.cuda import sample_neighbors_cuda

        indptr, indices, eids, orig = self.arrays
        dev = self.device

        def run():
            r = torch.from_numpy(rows).to(dev)
            out = sample_neighbors_cuda(indptr, indices, eids, r, orig[r],
                                        torch.from_numpy(keys).to(dev), seed, hop,
                                        torch.from_numpy(fanouts).to(dev),
                                        torch.from_numpy(replace.astype(np.uint8)).to(dev))
            return tuple(t.cpu().numpy() for t in out)  # waits for the stream's work

        if self.stream is None:
            return run()
        self.stream.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(self.stream):
            return run()


def segment_sums(values: np.ndarray, counts: list[int]) -> np.ndarray:
    """Sum of ``values`` over consecutive segments of the given lengths (empty segments -> 0)."""
    cs = np.zeros(values.size + 1, np.int64)
    np.cumsum(values, out=cs[1:])
    ends = np.cumsum(np.asarray(counts, np.int64))
    return cs[ends] - cs[ends - np.asarray(counts, np.int64)]
