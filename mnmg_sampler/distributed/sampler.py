"""Distributed multi-hop sampling: frontier exchange around one kernel call per hop per rank.

Every rank owns one partition. For each hop, a rank splits the frontier of all its requests by
owner. Nodes it owns never touch the wire; the others go to their owners in one all-to-all, as
wire ids (int32 whenever the graph's node and edge counts fit, decided once per job) behind one
small header per request and destination (node count, key, fanout, flags) instead of constants
repeated per node. **One** kernel call per rank serves its own nodes and every node received from
all ranks; counts, neighbor ids and (only when some request asked) edge ids go back in one more
all-to-all, and the requester puts them back in frontier order. The requester deduplicates and
renumbers (:class:`~mnmg_sampler.sampler.MultiHopSampler`). Calls are collective: every rank calls
:meth:`DistSampler.sample` the same number of times, with any number of requests, including none.

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
from ..ops.segments import reorder_segments
from ..sampler import HopSegments, MultiHopSampler, SampleRequest, check_seed, run_cpu_kernel
from .collective import Exchanger, backend_device, raise_agreed
from .consistency import check_same_partitioning

_I64 = np.dtype(np.int64)
# header flags of a request on the wire
_REPLACE, _EDGE_IDS = 1, 2


def wire_dtype(num_nodes: int, num_edges: int) -> np.dtype:
    """int32 when every node id and every per-node count fits, else int64 (once per job)."""
    return np.dtype(np.int32 if max(int(num_nodes), int(num_edges)) < 2**31 else np.int64)


class DistSampler:
    """Collective multi-hop sampler over a partitioned graph.

    Args:
        part: this rank's :class:`~mnmg_sampler.graph.partition_io.Partition`.
        seed: the job's sampling seed (the RNG's first counter).
        group: the process group to exchange over (the sampler's own group in the service).
        kernel: ``cpu`` or ``cuda`` (numba.cuda; CSR on ``device``).
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
        self.rank = self.ex.rank
        bounds = np.asarray(part.boundaries, np.int64)
        self._inner = np.ascontiguousarray(bounds[1:-1])  # owner(v) = #inner bounds <= v
        self.lo = int(bounds[part.rank])
        self.wire = wire_dtype(part.num_nodes, part.num_edges)
        self._k = _I64.itemsize // self.wire.itemsize  # wire words per int64
        self.new_to_orig = np.asarray(part.new_to_orig)  # plain views: faster fancy indexing
        self.orig_to_new = np.asarray(part.orig_to_new)
        self.sampler = MultiHopSampler(self._hop, int(part.num_nodes))
        self.kernel_calls = 0
        self.kernel_nodes = 0
        self.kernel_edges = 0
        self.t_kernel = 0.0

    # -- one hop ------------------------------------------------------------------------
    def owner(self, nodes: np.ndarray) -> np.ndarray:
        """Owner rank of each new id (int64)."""
        return np.searchsorted(self._inner, nodes, side="right")

    def _kernel(self, rows, keys, hop, fanouts, replace, edge_ids):
        t0 = time.perf_counter()
        if self.kernel == "cuda":
            c, nb, e = self._cuda(rows, keys, self.seed, hop, fanouts, replace)
            e = e if edge_ids else None
        else:
            indptr, indices, eids, orig = self._csr
            c, nb, e = run_cpu_kernel(indptr, indices, eids, rows, orig[rows], keys, self.seed,
                                      hop, fanouts, replace, edge_ids)
        self.t_kernel += time.perf_counter() - t0
        self.kernel_calls += 1
        self.kernel_nodes += int(rows.size)
        self.kernel_edges += int(nb.size)
        return c, nb, e

    def _hop(self, h: HopSegments):
        W, me = self.ex.world_size, self.rank
        nodes = h.nodes
        keys_n, fan_n, rep_n = h.per_node()
        if W == 1:  # everything is local: no exchange at all
            return self._kernel(nodes - self.lo, keys_n, h.hop, fan_n, rep_n, h.edge_ids)
        wire, k = self.wire, self._k
        owner = self.owner(nodes)
        ocount = np.bincount(owner, minlength=W)
        # small-int keys make numpy's stable sort a linear-time radix sort
        perm = np.argsort(owner.astype(np.int16 if W < 2**15 else np.int64), kind="stable")
        ooff = np.zeros(W + 1, np.int64)
        np.cumsum(ocount, out=ooff[1:])
        mine = perm[ooff[me]:ooff[me + 1]]

        # outbound: per destination, one header row per request, then the wire ids
        S = h.sizes.size
        seg = np.repeat(np.arange(S, dtype=np.int64), h.sizes)
        per_dest = np.bincount(owner * S + seg, minlength=W * S).reshape(W, S)
        flags = h.replace.astype(np.int64) | (_EDGE_IDS if h.edge_ids else 0)
        hlen = (1 + 4 * S) * k
        sizes = np.where(ocount > 0, ocount + hlen, 0)
        sizes[me] = 0
        buf = np.empty(int(sizes.sum()), wire)
        p = 0
        for d in np.flatnonzero(sizes):
            hdr = np.empty(1 + 4 * S, np.int64)
            hdr[0] = S
            hdr[1:].reshape(S, 4)[:] = np.stack([per_dest[d], h.keys, h.fanouts, flags], 1)
            buf[p:p + hlen] = hdr.view(wire)
            buf[p + hlen:p + sizes[d]] = nodes[perm[ooff[d]:ooff[d + 1]]]
            p += int(sizes[d])
        recv, rsizes = self.ex.exchange(torch.from_numpy(buf), torch.from_numpy(sizes), "ids")
        recv = recv.numpy()

        # one kernel call: own nodes first, then every received block
        rows = [nodes[mine] - self.lo]
        keys, fans, reps = [keys_n[mine]], [fan_n[mine]], [rep_n[mine]]
        srcs = []  # (source rank, nodes, wants edge ids)
        p = 0
        for src, size in enumerate(rsizes.tolist()):
            if size == 0:
                continue
            blk = recv[p:p + size]
            p += size
            s2 = int(blk[:k].view(np.int64)[0])
            hl = (1 + 4 * s2) * k
            hdr = blk[:hl].view(np.int64)[1:].reshape(s2, 4)
            cnt = hdr[:, 0]
            rows.append(blk[hl:].astype(np.int64) - self.lo)
            keys.append(np.repeat(hdr[:, 1], cnt))
            fans.append(np.repeat(hdr[:, 2], cnt))
            reps.append(np.repeat((hdr[:, 3] & _REPLACE).astype(np.uint8), cnt))
            srcs.append((src, size - hl, bool((hdr[:, 3] & _EDGE_IDS).any())))
        want_e = h.edge_ids or any(w for _, _, w in srcs)
        c, nb, e = self._kernel(np.concatenate(rows), np.concatenate(keys), h.hop,
                                np.concatenate(fans), np.concatenate(reps), want_e)
        coff = np.zeros(c.size + 1, np.int64)
        np.cumsum(c, out=coff[1:])

        # replies: counts, neighbors and (when asked) edge ids, one block per requester
        rsz = np.zeros(W, np.int64)
        a = mine.size
        spans = []
        for src, n, w in srcs:
            e0, e1 = int(coff[a]), int(coff[a + n])
            rsz[src] = n + (e1 - e0) * (1 + (k if w else 0))
            spans.append((src, a, n, e0, e1, w))
            a += n
        out = np.empty(int(rsz.sum()), wire)
        p = 0
        for _src, a, n, e0, e1, w in spans:
            E = e1 - e0
            out[p:p + n] = c[a:a + n]
            out[p + n:p + n + E] = nb[e0:e1]
            if w:
                out[p + n + E:p + n + E + E * k] = e[e0:e1].view(wire)
            p += n + E * (1 + (k if w else 0))
        back, bsizes = self.ex.exchange(torch.from_numpy(out), torch.from_numpy(rsz), "ids")
        back = back.numpy()

        # the requester's view, in owner order (own block at its place), then frontier order
        nl, el = mine.size, int(coff[mine.size])
        if nl == nodes.size:  # nothing was remote
            return c[:nl], nb[:el], (e[:el] if h.edge_ids else None)
        cnt_parts, nb_parts, e_parts = [], [], []
        p = 0
        bs = bsizes.tolist()
        for d in range(W):
            if d == me:
                cnt_parts.append(c[:nl])
                nb_parts.append(nb[:el])
                if h.edge_ids:
                    e_parts.append(e[:el])
                continue
            if ocount[d] == 0:
                continue
            blk = back[p:p + bs[d]]
            p += bs[d]
            n = int(ocount[d])
            cd = blk[:n]
            E = int(cd.sum())
            cnt_parts.append(cd)
            nb_parts.append(blk[n:n + E])
            if h.edge_ids:
                e_parts.append(blk[n + E:n + E + E * k].view(np.int64))
        counts_perm = np.concatenate(cnt_parts).astype(np.int64, copy=False)
        inv = np.empty_like(perm)
        inv[perm] = np.arange(perm.size)
        counts, nbr = reorder_segments(counts_perm, _cat64(nb_parts), inv)
        eid = reorder_segments(counts_perm, _cat64(e_parts), inv)[1] if h.edge_ids else None
        return counts, nbr, eid

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
                                  r.input_id, r.edge_ids) for r in requests]
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


def _cat64(parts: list[np.ndarray]) -> np.ndarray:
    """Concatenate into one int64 array (wire int32 blocks are widened on the way)."""
    out = np.empty(sum(int(a.size) for a in parts), np.int64)
    p = 0
    for a in parts:
        out[p:p + a.size] = a
        p += a.size
    return out
