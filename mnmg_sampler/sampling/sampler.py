"""Multi-hop neighbor sampling for a list of requests, one kernel call per hop for all of them.

:class:`MultiHopSampler` holds the PyG NeighborLoader semantics (seeds first, each node expanded
once per minibatch, per-request renumbering) and delegates one hop's draws to a *hop function*:
``hop_fn(nodes, keys, hop, fanouts, replace) -> (counts, neighbors, edge_ids)``. In one process
that is the CPU kernel over a :class:`CSRGraph`; in the distributed sampler it is an exchange
around the kernel on the owning ranks. Because every draw is keyed on (seed, key, hop, node,
slot), a request's output does not depend on which other requests share the call.

A hop is described per request (:class:`HopSegments`: one key, fanout and flags per request and
the concatenated frontier), so a distributed hop can send one small header per request instead
of constants repeated per node.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..errors import SamplingInputError
from ..graph.csr import CSRGraph
from ..graph.unique import has_duplicates
from ..ops import cpu
from ..ops.dedup import dedup_hop
from ..ops.rng import request_key
from ..system.host_malloc import tune_host_malloc
from .batch import MiniBatch

__all__ = ["HopSegments", "MultiHopSampler", "SampleRequest", "check_fanouts",
           "check_new_seeds", "check_seed", "local_hop_fn", "renumber_hop", "request_key",
           "run_cpu_kernel", "sample"]


@dataclass
class HopSegments:
    """One hop of several requests: the frontier of each, concatenated, and per-request constants.

    ``nodes[sum(sizes[:s]):sum(sizes[:s+1])]`` is request ``s``'s frontier; ``keys``, ``fanouts``
    and ``replace`` hold one entry per request (on a typed graph ``fanouts`` is ``[S, R]``, one
    per relation). ``edge_ids`` asks for edge ids (off: the hop function may return ``None`` for
    them and nothing is fetched). Time (typed graphs): ``bounds``, one time bound per node, and
    ``last``, per request ``"last"`` instead of ``"uniform"``; ``None`` without time.
    """

    nodes: np.ndarray
    sizes: np.ndarray
    keys: np.ndarray
    fanouts: np.ndarray
    replace: np.ndarray
    hop: int
    edge_ids: bool = True
    bounds: np.ndarray | None = None
    last: np.ndarray | None = None

    def per_node(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(keys, fanouts, replace)`` repeated for every node, as the kernels take them."""
        return (np.repeat(self.keys, self.sizes), np.repeat(self.fanouts, self.sizes, axis=0),
                np.repeat(self.replace, self.sizes))


# hop_fn(segments) -> (counts per node, neighbors, edge ids or None), nodes in input order
HopFn = Callable[[HopSegments], tuple[np.ndarray, np.ndarray, "np.ndarray | None"]]


def _kernel_takes_with_eids() -> bool:
    import inspect

    return "with_eids" in inspect.signature(cpu.sample_neighbors).parameters


_WITH_EIDS = _kernel_takes_with_eids()


def run_cpu_kernel(indptr, indices, eids, rows, nodes, keys, seed, hop, fanouts, replace,
                   edge_ids: bool = True):
    """Thin adapter over :func:`mnmg_sampler.ops.cpu.sample_neighbors`: skips edge ids in the
    kernel when it supports that (``with_eids``), else drops them; ``None`` when not asked."""
    if _WITH_EIDS:
        c, nb, e = cpu.sample_neighbors(indptr, indices, eids, rows, nodes, keys, seed, hop,
                                        fanouts, replace, with_eids=edge_ids)
    else:
        c, nb, e = cpu.sample_neighbors(indptr, indices, eids, rows, nodes, keys, seed, hop,
                                        fanouts, replace)
    return c, nb, (e if edge_ids else None)


@dataclass
class SampleRequest:
    """One minibatch to sample: its seeds, fanouts per hop and RNG key.

    ``edge_ids=False`` leaves ``e_id`` empty and lets the sampler skip fetching edge ids.
    ``new_seeds`` (optional, distributed only): the seeds' ids in the partitioning, translated
    once by their loader, so a round needs no seed lookup; one per seed (checked here), and
    checked again by the sampler that takes the request
    (:meth:`~mnmg_sampler.distributed.sampler.DistSampler.check_request`).
    """

    seeds: np.ndarray
    fanouts: Sequence[int]
    key: int
    replace: bool = False
    input_id: np.ndarray | None = None
    edge_ids: bool = True
    new_seeds: np.ndarray | None = None

    def __post_init__(self) -> None:
        if torch.is_tensor(self.seeds):
            self.seeds = self.seeds.detach().cpu().numpy()
        self.seeds = np.ascontiguousarray(self.seeds, dtype=np.int64).ravel()
        self.fanouts = check_fanouts(self.fanouts)
        if has_duplicates(self.seeds):
            raise SamplingInputError(
                "a request has duplicate seed ids",
                "n_id[:batch_size] could not equal the seeds",
                "deduplicate the seeds of each minibatch (loaders do this for you)",
            )
        if int(self.key) < 0:
            raise SamplingInputError(f"request key {self.key} is negative", "",
                                     "use a key in [0, 2**63)")
        if self.new_seeds is not None:
            if torch.is_tensor(self.new_seeds):
                self.new_seeds = self.new_seeds.detach().cpu().numpy()
            new = np.asarray(self.new_seeds)
            if new.size and not np.issubdtype(new.dtype, np.integer):
                raise SamplingInputError(f"new_seeds has dtype {new.dtype}; ids are integers",
                                         "its seeds cannot be located in the partitioning",
                                         "pass integer ids or new_seeds=None")
            self.new_seeds = np.ascontiguousarray(new, dtype=np.int64).ravel()
            check_new_seeds(self)


def check_new_seeds(r: SampleRequest) -> None:
    """:class:`SamplingInputError` unless ``r.new_seeds`` (when given) has one id per seed."""
    if r.new_seeds is not None and np.shape(r.new_seeds) != r.seeds.shape:
        raise SamplingInputError(
            f"a request has {np.size(r.new_seeds)} translated seed ids for {r.seeds.size} seeds",
            "its seeds cannot be located in the partitioning",
            "pass new_seeds=None (the sampler translates the seeds) or one new id per seed")


def _cat(arrays: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(arrays) if arrays else np.empty(0, np.int64)


def _edge_index(rows: list[np.ndarray], cols: list[np.ndarray]) -> np.ndarray:
    """``[2, E]`` int64 of the hops' rows over their columns, each written once in place (no
    concatenation then stack: one copy of the edges fewer; torch.stack of two small tensors
    costs ms of CPU with intra-op threads)."""
    E = sum(int(r.size) for r in rows)
    out = np.empty((2, E), np.int64)
    if rows:
        np.concatenate(rows, out=out[0])
        np.concatenate(cols, out=out[1])
    return out


def renumber_hop(nids: list[np.ndarray], sizes: np.ndarray, counts: np.ndarray,
                 nbr: np.ndarray) -> tuple[np.ndarray, ...]:
    """One hop's renumbering for several requests (their ``n_id`` so far in ``nids``, their
    frontier sizes, the kernel's per-node counts and neighbors): ``(node_off, cand_off, new,
    new_off, local)``, the per-request offsets of frontier nodes and of sampled neighbors, then
    :func:`~mnmg_sampler.ops.dedup.dedup_hop`'s results."""
    node_off = np.zeros(len(nids) + 1, np.int64)
    np.cumsum(sizes, out=node_off[1:])
    cnt_cum = np.zeros(counts.size + 1, np.int64)
    np.cumsum(counts, out=cnt_cum[1:])
    cand_off = cnt_cum[node_off]
    nid_off = np.zeros(len(nids) + 1, np.int64)
    np.cumsum([n.size for n in nids], out=nid_off[1:])
    new, new_off, local = dedup_hop(_cat(nids), nid_off, nbr, cand_off)
    return node_off, cand_off, new, new_off, local


FANOUT_MAX = 2**31 - 1
"""Largest fanout of one hop (a larger one would overflow the kernels' integers; -1 takes all)."""


def check_fanouts(fanouts: Sequence[int]) -> list[int]:
    """Validate PyG-style fanouts: hop i from the seeds; ``-1`` = all neighbors, ``0`` = none."""
    try:
        out = [int(f) for f in fanouts]
    except (TypeError, ValueError):
        out = None
    if not out or any(f < -1 or f > FANOUT_MAX for f in out) or any(
        int(f) != f for f in fanouts
    ):
        raise SamplingInputError(
            f"invalid fanouts {list(fanouts) if out is not None else fanouts!r}",
            "each hop needs a number of neighbors in [0, 2**31 - 1], or -1 for all",
            "pass e.g. [15, 10, 5]; hop 1 (nearest the seeds) comes first",
        )
    return out


def check_seed(seed: int) -> int:
    """The RNG seed as an int in ``[0, 2**63)``, or :class:`SamplingInputError`."""
    try:
        ok = int(seed) == seed and 0 <= int(seed) < 2**63
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise SamplingInputError(f"seed {seed!r} is not an integer in [0, 2**63)",
                                 "the counter-based RNG is keyed on a 63-bit seed",
                                 "pass a non-negative integer seed, e.g. 0")
    return int(seed)


def local_hop_fn(graph: CSRGraph, seed: int) -> HopFn:
    """The hop function of a whole graph in this process (ids are rows and RNG node ids)."""
    seed = check_seed(seed)

    def hop_fn(h: HopSegments):
        keys, fanouts, replace = h.per_node()
        return run_cpu_kernel(graph.indptr, graph.indices, graph.edge_ids, h.nodes, h.nodes,
                              keys, seed, h.hop, fanouts, replace, h.edge_ids)

    return hop_fn


class MultiHopSampler:
    """Samples lists of requests hop by hop through one ``hop_fn`` call per hop.

    Args:
        hop_fn: draws one hop of several requests (:class:`HopSegments`).
        num_nodes: number of nodes in the (global) graph, for seed validation.
    """

    def __init__(self, hop_fn: HopFn, num_nodes: int) -> None:
        tune_host_malloc()  # reuse the hops' buffers instead of faulting them in each batch
        self.hop_fn = hop_fn
        self.num_nodes = int(num_nodes)
        self.hop_calls = 0

    def check_seeds(self, seeds: np.ndarray) -> None:
        if seeds.size and (int(seeds.min()) < 0 or int(seeds.max()) >= self.num_nodes):
            bad = int(seeds.min()) if int(seeds.min()) < 0 else int(seeds.max())
            raise SamplingInputError(
                f"seed id {bad} is out of range for a graph with {self.num_nodes} nodes",
                "no neighbors can be sampled for it",
                f"pass seed ids in [0, {self.num_nodes})",
            )

    def sample(self, requests: Sequence[SampleRequest]) -> list[MiniBatch]:
        """Sample every request; each result equals sampling that request alone."""
        for r in requests:
            self.check_seeds(r.seeds)
        return self.sample_checked(requests)

    def sample_checked(self, requests: Sequence[SampleRequest],
                       num_hops: int | None = None) -> list[MiniBatch]:
        """Sample validated requests; ``num_hops`` forces that many ``hop_fn`` calls (a rank in a
        distributed round must join every hop even when its own requests are done)."""
        R = len(requests)
        n_hops = max((len(r.fanouts) for r in requests), default=0)
        if num_hops is not None:
            n_hops = num_hops
        nid = [r.seeds for r in requests]  # each request's n_id so far, per request
        frontier = [r.seeds for r in requests]
        front_start = [0] * R  # local index of each request's first frontier node
        rows: list[list[np.ndarray]] = [[] for _ in requests]
        cols: list[list[np.ndarray]] = [[] for _ in requests]
        eids: list[list[np.ndarray]] = [[] for _ in requests]
        n_nodes = [[r.seeds.size] for r in requests]
        n_edges: list[list[int]] = [[] for _ in requests]
        for hop in range(n_hops):
            active = [i for i, r in enumerate(requests) if hop < len(r.fanouts)]
            sizes = np.array([frontier[i].size for i in active], np.int64)
            want_eids = any(requests[i].edge_ids for i in active)
            counts, nbr, eid = self.hop_fn(HopSegments(
                _cat([frontier[i] for i in active]), sizes,
                np.array([requests[i].key for i in active], np.int64),
                np.array([requests[i].fanouts[hop] for i in active], np.int64),
                np.array([requests[i].replace for i in active], np.uint8), hop, want_eids))
            self.hop_calls += 1
            node_off, cand_off, new, new_off, local = renumber_hop(
                [nid[i] for i in active], sizes, counts, nbr)
            for j, i in enumerate(active):
                c0, c1 = cand_off[j], cand_off[j + 1]
                cnt = counts[node_off[j]:node_off[j + 1]]
                rows[i].append(local[c0:c1])
                cols[i].append(np.repeat(np.arange(front_start[i], front_start[i] + cnt.size), cnt))
                if requests[i].edge_ids:
                    eids[i].append(eid[c0:c1])
                fresh = new[new_off[j]:new_off[j + 1]]
                front_start[i] = nid[i].size
                nid[i] = np.concatenate([nid[i], fresh])
                frontier[i] = fresh
                n_nodes[i].append(int(fresh.size))
                n_edges[i].append(int(c1 - c0))
        return [self._batch(requests[i], nid[i], rows[i], cols[i], eids[i], n_nodes[i],
                            n_edges[i]) for i in range(R)]

    @staticmethod
    def _batch(req, n_id, rows, cols, eids, n_nodes, n_edges) -> MiniBatch:
        def cat(a):
            return torch.from_numpy(_cat(a))

        input_id = req.input_id if req.input_id is not None else np.arange(req.seeds.size)
        return MiniBatch(
            n_id=torch.from_numpy(n_id),
            edge_index=torch.from_numpy(_edge_index(rows, cols)),
            e_id=cat(eids),
            input_id=torch.as_tensor(np.asarray(input_id, np.int64)),
            batch_size=int(req.seeds.size),
            num_sampled_nodes=n_nodes,
            num_sampled_edges=n_edges,
            key=int(req.key),
        )


def check_input_nodes(input_nodes, num_nodes: int, *, node_ids: np.ndarray | None = None,
                      name: str = "input_nodes",
                      what: str = "the loader cannot be built; every rank raises this before "
                                  "sampling") -> np.ndarray:
    """``input_nodes`` as a flat int64 array of distinct ids in ``[0, num_nodes)``, or a
    :class:`SamplingInputError` saying what is wrong (the same on every rank for the same input).

    Accepted, as in PyG's ``NeighborLoader``: integer node ids (any int dtype, tensor, array or
    sequence) or a bool mask of length ``num_nodes`` (its ``True`` positions are the seeds).
    Refused: float ids (never cast silently), other shapes, out-of-range or repeated ids.
    An empty input is valid and gives no batch. For a renumbered graph (``node_ids``: the
    original id of each node, ascending) integer ids are original ids, translated here; a mask
    has one entry per node, in ascending original id. ``name`` and ``what`` word the errors.
    """
    if torch.is_tensor(input_nodes):
        input_nodes = input_nodes.detach().cpu().numpy()
    arr = np.asarray(input_nodes)
    if arr.size == 0 and arr.ndim <= 1:
        return np.empty(0, np.int64)
    if arr.ndim != 1:
        raise SamplingInputError(f"{name} has shape {arr.shape}", what,
                                 "pass a 1-D array of node ids or a bool mask")
    if arr.dtype == np.bool_:
        if arr.shape[0] != num_nodes:
            raise SamplingInputError(
                f"{name} is a bool mask of length {arr.shape[0]}, but the graph has "
                f"{num_nodes} nodes", what,
                f"pass a mask of length {num_nodes} (True = seed), or integer node ids")
        return np.flatnonzero(arr).astype(np.int64)
    if not np.issubdtype(arr.dtype, np.integer):
        raise SamplingInputError(
            f"{name} has dtype {arr.dtype}; node ids must be integers", what,
            "pass integer ids (e.g. ids.long() or ids.astype(np.int64)) or a bool mask")
    if node_ids is not None:
        arr = renumbered_ids(arr, node_ids, name, what)
    lo, hi = arr.min(), arr.max()
    if lo < 0 or hi >= num_nodes:
        bad = lo if lo < 0 else hi
        raise SamplingInputError(f"{name} holds id {bad}, out of range for a graph with "
                                 f"{num_nodes} nodes", what, f"pass ids in [0, {num_nodes})")
    ids = arr.astype(np.int64)
    uniq, counts = np.unique(ids, return_counts=True)
    if uniq.size != ids.size:
        dup = uniq[counts > 1]
        raise SamplingInputError(
            f"{name} holds {ids.size - uniq.size} repeated ids (e.g. "
            f"{int(dup[0]) if node_ids is None else int(node_ids[dup[0]])})", what,
            "pass each seed once, no duplicate (e.g. np.unique(ids))")
    return ids


def renumbered_ids(arr: np.ndarray, node_ids: np.ndarray, name: str, what: str) -> np.ndarray:
    """Node ids of the original ids ``arr`` (``node_ids`` ascending, memory-mapped is fine); a
    :class:`SamplingInputError` naming ``name`` for an id that is not a node of the graph."""
    if arr.dtype.kind == "u" and arr.size and int(arr.max()) >= 2**63:
        raise SamplingInputError(f"{name} holds id {int(arr.max())}, above 2**63 - 1", what,
                                 "pass original node ids of the graph")
    arr = arr.astype(np.int64, copy=False)
    pos = np.minimum(np.searchsorted(node_ids, arr), max(int(node_ids.shape[0]) - 1, 0))
    bad = np.asarray(node_ids[pos]) != arr if node_ids.shape[0] else np.ones(arr.shape, bool)
    if bad.any():
        raise SamplingInputError(
            f"{name} holds id {int(arr[np.argmax(bad)])}, which is not a node of the graph "
            "(its ids were renumbered; seeds are original ids)", what,
            "pass original node ids that occur in the graph's edges")
    return pos.astype(np.int64)


def sample(graph: CSRGraph, seeds, fanouts: Sequence[int], *, seed: int = 0, key: int = 0,
           replace: bool = False, weights: np.ndarray | None = None) -> MiniBatch:
    """Sample one minibatch from ``graph`` in this process (convenience wrapper); ``weights``
    (one per CSR entry) samples neighbors with probability proportional to weight.

    ``seeds`` are node ids (original ids for a renumbered graph; ``n_id`` shows original ids
    too) or a bool mask of length ``num_nodes`` whose ``True`` positions are the seeds, as in
    PyG; a mask of another length is refused (:func:`check_input_nodes`)."""
    ids = check_input_nodes(seeds, graph.num_nodes, node_ids=graph.node_ids, name="seeds",
                            what="no minibatch can be sampled")
    if weights is not None:
        from ..ops.weighted import local_weighted_hop_fn

        hop_fn = local_weighted_hop_fn(graph, weights, seed)
    else:
        hop_fn = local_hop_fn(graph, seed)
    s = MultiHopSampler(hop_fn, graph.num_nodes)
    batch = s.sample([SampleRequest(ids, fanouts, key, replace)])[0]
    if graph.node_ids is not None:
        batch.n_id = torch.from_numpy(graph.original_ids(batch.n_id.numpy()))
    return batch
