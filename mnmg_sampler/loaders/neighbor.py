"""DistNeighborLoader: per-rank minibatches of a seed set, sampled by the SamplingService.

Each epoch the seeds are put in one global order (a keyed Feistel permutation when
``shuffle``) and cut into a multiple of ``W`` global batches; batch ``g`` goes to rank
``g % W`` and is keyed ``request_key(seed, epoch, g)``. So ``len(loader)`` is the same on every
rank (DDP steps line up) and a batch does not depend on the world size. A rank computes one
batch's positions when it requests it (``O(batch)``), so a seed set that is a rule is never an
array of ``num_nodes``. ``split="owner"`` (DistDGL's ``node_split``) gives each rank the seeds
its partition owns instead. See docs/loader.md#how-seeds-are-split-across-ranks.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch

from ..distributed.collective import Exchanger, agree, backend_device, peer_errors
from ..distributed.consistency import check_same_on_every_rank, manifest_fingerprint
from ..distributed.id_maps import IdMaps
from ..errors import SamplingInputError
from ..graph.permute import feistel, feistel_keys
from ..sampling.batch import MiniBatch
from ..sampling.sampler import (
    SampleRequest,
    check_fanouts,
    check_input_nodes,
    fanout_table,
    request_key,
)
from .epoch_cursor import PREFETCH, EpochCursor
from .seeds import AllNodes, NodeIds, SeedSet, as_seed_set

__all__ = ["DistNeighborLoader", "batch_positions", "batch_span", "check_batching",
           "check_input_nodes", "check_pyg_arguments", "epoch_order", "global_batches",
           "num_global_batches", "shuffle_keys", "translate_seeds"]

SPLITS = ("global", "owner")


def typed_input(sampler, input_nodes, num_neighbors):
    """``(input type, seed set, num_neighbors)`` of a loader on a typed part: ``input_nodes``
    is PyG's ``(node type, ids or bool mask or None)``; ``num_neighbors`` a list (every
    relation) or a dict per edge type, checked against the graph's relations."""
    what = "the loader cannot be built; every rank raises this before sampling"
    tp = sampler.tp
    if len(tp.node_types) == 1 and not isinstance(input_nodes, tuple):
        input_nodes = (tp.node_types[0], input_nodes)  # a one-type graph: plain ids
    if not (isinstance(input_nodes, tuple) and len(input_nodes) == 2
            and isinstance(input_nodes[0], str)):
        raise SamplingInputError(
            f"input_nodes is a {type(input_nodes).__name__}, not a (node type, ids) pair", what,
            f"pass input_nodes=(type, ids) with type one of {list(tp.node_types)} "
            "(ids None = every node of the type), as PyG's NeighborLoader on HeteroData")
    name, ids = input_nodes
    if name not in tp.node_types:
        raise SamplingInputError(f"input_nodes names node type {name!r}, not in the graph",
                                 what, f"use one of {list(tp.node_types)}")
    t = tp.node_types.index(name)
    nodes = as_seed_set(ids, int(tp.node_type_offset[t + 1] - tp.node_type_offset[t]))
    fanout_table(sampler.graph, num_neighbors)
    if not isinstance(num_neighbors, dict):
        num_neighbors = check_fanouts(num_neighbors)
    return name, nodes, num_neighbors


def translate_seeds(ids: IdMaps, seeds: np.ndarray) -> np.ndarray:
    """Collective on the default group: the new ids of ``seeds`` (original ids), translated by
    the sampler's id maps over an exchanger of the default group (the service thread owns the
    sampler's group). Nothing travels for a ``range`` partitioning, replicated maps or one
    rank; otherwise one lookup (3 collectives), whose arrays are at most ``seeds``-sized."""
    with peer_errors("the loader's translation of its seeds to the partitioning's ids"):
        return ids.with_exchanger(Exchanger(None)).to_new(seeds)


TEMPORAL_ARGS = ("time_attr", "input_time", "temporal_strategy", "disjoint")
"""PyG's temporal loader arguments, taken on typed parts (``docs/temporal.md``)."""


def typed_time_options(sampler, options: dict, n: int) -> dict:
    """The request fields of PyG's temporal ``options`` for ``n`` seeds, checked
    (:class:`SamplingInputError`); ``input_time`` as int64 per seed. As PyG, temporal sampling
    is disjoint whatever ``disjoint`` says."""
    from ..sampling.temporal import check_time_options, input_times

    time_attr = options.get("time_attr")
    strategy = options.get("temporal_strategy", "uniform")
    disjoint = bool(options.get("disjoint", False)) or None
    if time_attr is not None:
        disjoint = None
    check_time_options(sampler.graph, time_attr, strategy, disjoint,
                       options.get("input_time"), n)
    return {"time_attr": time_attr, "temporal_strategy": strategy, "disjoint": disjoint,
            "input_time": input_times(options.get("input_time"), n)}


SHUFFLE_SALT = 0x5EED
_OWN_CHUNK = 1 << 13  # own ids per step when an owner split looks its seeds up


def num_global_batches(n: int, batch_size: int, world_size: int, *, drop_last: bool) -> int:
    """Global batches of an epoch of ``n`` seeds: a multiple of ``world_size`` (0 for no seed)."""
    per_round = batch_size * world_size
    if drop_last:
        return (n // per_round) * world_size
    return world_size * -(-n // per_round)


def batch_span(j: int, n: int, nb: int, batch_size: int, drop_last: bool) -> tuple[int, int]:
    """Positions ``[start, stop)`` in the epoch's order of batch ``j`` of ``nb`` over ``n`` seeds:
    ``batch_size`` each with ``drop_last``, else sizes as ``numpy.array_split`` makes them."""
    if drop_last:
        return j * batch_size, (j + 1) * batch_size
    q, rem = divmod(n, nb)
    start = j * q + min(j, rem)
    return start, start + q + (1 if j < rem else 0)


def epoch_order(start: int, stop: int, n: int, keys: np.ndarray | None) -> np.ndarray:
    """Entries ``start .. stop - 1`` of an epoch's order of ``n`` positions: the keyed
    permutation with round ``keys`` (:func:`~mnmg_sampler.graph.permute.feistel`), or the
    positions themselves for ``keys=None`` (no shuffle); ``O(stop - start)`` memory."""
    idx = np.arange(start, stop, dtype=np.int64)
    return idx if keys is None else feistel(idx, n, keys)


def shuffle_keys(shuffle: bool, seed: int, epoch: int, *more: int) -> np.ndarray | None:
    """Round keys of the epoch's shuffle (``None`` without shuffling)."""
    return feistel_keys(seed, epoch, SHUFFLE_SALT, *more) if shuffle else None


def batch_positions(g: int, n: int, batch_size: int, world_size: int, *, shuffle: bool,
                    drop_last: bool, seed: int, epoch: int) -> np.ndarray:
    """Positions (into the seed set) of global batch ``g`` of an epoch, in ``O(batch)``."""
    nb = num_global_batches(n, batch_size, world_size, drop_last=drop_last)
    lo, hi = batch_span(g, n, nb, batch_size, drop_last)
    return epoch_order(lo, hi, n, shuffle_keys(shuffle, seed, epoch))


def global_batches(n: int, batch_size: int, world_size: int, *, shuffle: bool, drop_last: bool,
                   seed: int, epoch: int) -> list[np.ndarray]:
    """Positions of every global batch of an epoch, in global order (for tests and docs: a
    loader computes only its own batches, one at a time, with :func:`batch_positions`)."""
    nb = num_global_batches(n, batch_size, world_size, drop_last=drop_last)
    return [batch_positions(g, n, batch_size, world_size, shuffle=shuffle, drop_last=drop_last,
                            seed=seed, epoch=epoch) for g in range(nb)]


# PyG NeighborLoader / DataLoader arguments and the value each must have here (PyG's default);
# anything else asks for a behaviour this loader does not have.
_PYG_DEFAULTS = {"input_time": None, "time_attr": None, "temporal_strategy": "uniform",
                 "weight_attr": None, "transform": None, "transform_sampler_output": None,
                 "is_sorted": False, "filter_per_worker": None, "neighbor_sampler": None,
                 "directed": True, "num_workers": 0, "disjoint": False}
SUBGRAPH_TYPES = ("directional",)
"""PyG ``subgraph_type`` values supported: sampled edges point neighbor -> target only."""


def check_batching(batch_size: int, prefetch: int) -> None:
    """A :class:`SamplingInputError` unless ``batch_size >= 1`` and ``prefetch >= 0``."""
    if int(batch_size) <= 0:
        raise SamplingInputError(f"batch_size must be positive, got {batch_size}",
                                 "no minibatch can be formed", "pass batch_size >= 1")
    if int(prefetch) < 0:
        raise SamplingInputError(f"prefetch must be >= 0, got {prefetch}",
                                 "it is the number of requests kept in flight",
                                 "pass prefetch >= 0 (0 = sample each batch on demand)")


def check_pyg_arguments(num_neighbors, subgraph_type: str, extra: dict) -> None:
    """Raise :class:`SamplingInputError` for PyG loader arguments this loader does not support.

    Arguments at PyG's default value are accepted, so code written for ``NeighborLoader``
    runs unchanged as long as it uses only what the service can do.
    """
    if num_neighbors is None:
        raise SamplingInputError("num_neighbors is required", "the hops to sample are unknown",
                                 "pass e.g. num_neighbors=[10, 5] (hop 1 first, as in PyG)")
    if subgraph_type not in SUBGRAPH_TYPES:
        raise SamplingInputError(
            f"subgraph_type={subgraph_type!r} is not supported",
            "the service returns the directional subgraph (sampled neighbor -> target)",
            "use subgraph_type='directional' (PyG's default)")
    for key, value in extra.items():
        if key not in _PYG_DEFAULTS:
            raise SamplingInputError(
                f"DistNeighborLoader got an unexpected argument {key!r}", "it has no effect here",
                "see docs/api.md for the arguments (those of PyG's NeighborLoader that apply)")
        default = _PYG_DEFAULTS[key]
        try:
            same = value is default or (default is not None and bool(value == default))
        except (TypeError, ValueError):  # e.g. an array compared with a scalar
            same = False
        if not same:
            fix = ("sampling already runs in the service thread; use prefetch=N to sample ahead"
                   if key == "num_workers" else f"leave {key} at {default!r}")
            raise SamplingInputError(f"{key}={value!r} is not supported",
                                     "the sampling service has no such feature", fix)


class DistNeighborLoader(EpochCursor):
    """Iterates this rank's minibatches of ``input_nodes``, with features, via a service.

    PyG's ``NeighborLoader`` arguments; those it has no use for are accepted at PyG's default
    value only (:func:`check_pyg_arguments`).

    Args:
        service: this rank's :class:`~mnmg_sampler.distributed.service.SamplingService`.
        input_nodes: seed node ids (original ids, each once) or a bool mask of length
            ``num_nodes``, the same on every rank; ``None`` = every node, or a
            :class:`~mnmg_sampler.loaders.seeds.SeedSet` (both read batch by batch). Kept as
            ``self.input_nodes``. Construction is collective on the default group: a bad or
            differing input on any rank raises :class:`SamplingInputError` on every rank.
        num_neighbors: fanouts per hop, hop 1 first (PyG order); ``-1`` = all neighbors,
            ``0`` = none at that hop.
        batch_size: seeds per minibatch (at most; PyG's default 1).
        shuffle: reshuffle every epoch (deterministic from ``seed`` and the epoch).
        drop_last: skip the tail so every batch has exactly ``batch_size`` seeds.
        seed: seed of the shuffle and the request keys.
        prefetch: requests kept in flight ahead of the consumer, so sampling overlaps training.
        rank, world_size: default: those of the service's process group.
        subgraph_type: ``"directional"`` only (PyG's default).
        split: ``global`` (the global order above) or ``owner`` (each rank's own seeds;
            docs/loader.md#seeds-by-owner-splitowner).
        edge_ids: return ``e_id``; off, ``e_id`` is empty and no edge id is fetched.

    On a typed part ``input_nodes`` is PyG's ``(node type, ids or bool mask)`` (plain ids on a
    one-type graph), ``num_neighbors`` a list or a dict per edge type, items have ``x``/``y``
    per type, and PyG's ``time_attr``, ``input_time``, ``temporal_strategy`` and ``disjoint``
    are taken (docs/hetero.md#over-ranks-the-service-and-the-loader,
    docs/temporal.md#over-ranks).

    Each item is a :class:`~mnmg_sampler.sampling.batch.MiniBatch` with ``n_id`` (seeds first),
    ``edge_index`` (local, row = neighbor, col = target), ``e_id``, ``input_id`` (positions in
    ``input_nodes``), ``batch_size``, ``num_sampled_nodes``, ``num_sampled_edges``, ``x``, ``y``.

    Example::

        service = SamplingService(load_partition("parts", rank), seed=0)
        loader = DistNeighborLoader(service, train_idx, [10, 10], batch_size=512, shuffle=True)
        for epoch in range(epochs):
            loader.set_epoch(epoch)
            for batch in loader:
                out = model(batch.x, batch.edge_index)[: batch.batch_size]
                loss = F.cross_entropy(out, batch.y[: batch.batch_size])
        service.shutdown()
    """

    def __init__(self, service, input_nodes=None, num_neighbors: Sequence[int] | None = None,
                 batch_size: int = 1, shuffle: bool = False, drop_last: bool = False,
                 seed: int = 0, prefetch: int = PREFETCH, replace: bool = False,
                 rank: int | None = None, world_size: int | None = None, *,
                 subgraph_type: str = "directional", split: str = "global",
                 edge_ids: bool = True, **pyg_kwargs) -> None:
        import torch.distributed as dist

        self.split, self.edge_ids = split, bool(edge_ids)
        self._owned: tuple[np.ndarray, np.ndarray] | None = None
        self._partition: list[int] | None = None
        typed = getattr(getattr(service, "sampler", None), "tp", None)  # a typed part's types
        self.input_type: str | None = None
        temporal = {k: pyg_kwargs.pop(k) for k in TEMPORAL_ARGS
                    if typed is not None and k in pyg_kwargs}
        self._time: dict = {}

        def check() -> tuple[SeedSet, list[int]]:
            check_pyg_arguments(num_neighbors, subgraph_type, pyg_kwargs)
            if split not in SPLITS:
                raise SamplingInputError(f"unknown seed split {split!r}",
                                         "the loader cannot assign seeds to ranks",
                                         f"use one of {SPLITS}")
            if typed is not None:
                self.input_type, nodes, nn = typed_input(service.sampler, input_nodes,
                                                         num_neighbors)
                self._time = typed_time_options(service.sampler, temporal, len(nodes))
                check_batching(batch_size, prefetch)
                return nodes, nn
            # PyG: input_nodes=None is every node of the graph (a rule, not an array)
            nodes = as_seed_set(input_nodes, int(service.num_nodes),
                                node_ids=getattr(service, "node_ids", None))
            check_batching(batch_size, prefetch)
            return nodes, check_fanouts(num_neighbors)

        # Collective on the default group (the service thread owns its own): a bad or differing
        # input on any rank raises on every rank here, before any round (batch counts differ).
        self.input_nodes, self.num_neighbors = agree(check)
        check_same_on_every_rank(
            [len(self.input_nodes), int(batch_size), int(bool(drop_last)), int(bool(shuffle)),
             int(seed), SPLITS.index(split), *self.input_nodes.fingerprint()],
            "DistNeighborLoader(input_nodes, batch_size, shuffle, drop_last, seed, split)",
            "each rank would get another share of the seeds, or another number of batches",
            "build every loader with the same arguments on every rank, in the same order",
            error=SamplingInputError)
        self.service = service
        self._typed = typed is not None
        self.batch_size = int(batch_size)
        self.shuffle, self.drop_last = bool(shuffle), bool(drop_last)
        # prefetch 0 = synchronous: one request in flight, submitted when the batch is wanted
        self.seed, self.prefetch, self.replace = int(seed), max(1, int(prefetch)), bool(replace)
        self.rank = dist.get_rank(service.group) if rank is None else rank
        self.world_size = dist.get_world_size(service.group) if world_size is None else world_size
        self._init_cursor()
        sampler = getattr(service, "sampler", None)
        ids = getattr(sampler, "ids", None)
        # the seeds' new ids, one per given seed, translated once here so no round looks them
        # up; None: a seed set that is a rule (all nodes, a split: its rounds look the batch's
        # seeds up), or a service without id maps, whose sampler translates every round
        self._new_nodes: np.ndarray | None = None
        self._ids = ids
        if split == "owner":
            self._partition = manifest_fingerprint(sampler.part)
            pos = self._owned_positions(ids, typed)
            if isinstance(self.input_nodes, NodeIds) and not self._typed:
                self._new_nodes = np.full(len(self.input_nodes), -1, np.int64)  # others: unsent
                self._new_nodes[pos] = ids.to_new_local(self.input_nodes.ids(pos))
            # every rank's count: one all-reduce on the default group (construction is collective)
            counts = torch.zeros(self.world_size, dtype=torch.int64, device=backend_device())
            counts[self.rank] = pos.size
            with peer_errors("the loader's count of seeds per owner"):
                dist.all_reduce(counts, op=dist.ReduceOp.SUM)
            self._owned = (pos, counts.cpu().numpy())
        elif ids is not None and isinstance(self.input_nodes, NodeIds) and not self._typed:
            # with the shared topology every part's original ids are mapped here: no lookup
            # (the same on every rank, so no rank waits in the lookup's collectives)
            shared = getattr(sampler, "shared", None)
            seeds = self.input_nodes.array
            self._new_nodes = (shared.to_new(seeds) if shared is not None
                               else translate_seeds(ids, seeds))

    def _owned_positions(self, ids, typed=None) -> np.ndarray:
        """Positions (ascending) of the seeds this rank's partition owns, found in its own ids
        (no id map, no exchange): an array of at most the part's node count. On a typed part
        (``typed``: its types) seeds are ids of the input type, whose internal ids are the
        type's offset + id."""
        seeds, base = self.input_nodes, 0
        if typed is not None:
            t = typed.node_types.index(self.input_type)
            base, end = (int(v) for v in typed.node_type_offset[t:t + 2])
        if isinstance(seeds, NodeIds):
            return np.flatnonzero(ids.rows_of(seeds.array + base) >= 0)
        own = (np.arange(ids.lo, ids.hi, dtype=np.int64) if ids.orig is None
               else np.asarray(ids.orig, np.int64))  # a range partition keeps the ids
        if typed is not None:  # the input type's own ids (still ascending)
            own = own[(own >= base) & (own < end)] - base
        if isinstance(seeds, AllNodes):
            return own  # position = id, and the part's ids are ascending
        # in chunks, so the temporaries stay small next to the part
        parts = [p[p >= 0] for p in (seeds.positions_of(own[i:i + _OWN_CHUNK])
                                     for i in range(0, own.size, _OWN_CHUNK))]
        pos = np.concatenate(parts) if parts else np.empty(0, np.int64)
        pos.sort()
        return pos

    def _owner_counts(self) -> tuple[np.ndarray, np.ndarray]:
        """(positions of this rank's own seeds, seeds owned by each rank), from construction."""
        return self._owned

    def _owner_num_batches(self, counts: np.ndarray) -> int:
        if self.drop_last:
            return int(counts.min()) // self.batch_size
        return -(-int(counts.max()) // self.batch_size)  # no seed anywhere: no batch

    def _partition_fingerprint(self) -> list[int] | None:
        return self._partition

    def _num_my_batches(self) -> int:
        if self.split == "owner":
            return len(self)
        nb = num_global_batches(len(self.input_nodes), self.batch_size, self.world_size,
                                drop_last=self.drop_last)
        return len(range(self.rank, nb, self.world_size))

    def _my_batch(self, j: int, epoch: int) -> tuple[int, np.ndarray]:
        if self.split == "owner":
            pos, counts = self._owner_counts()
            nb = self._owner_num_batches(counts)
            lo, hi = batch_span(j, pos.size, nb, self.batch_size, self.drop_last)
            keys = shuffle_keys(self.shuffle, self.seed, epoch, self.rank)
            return j * self.world_size + self.rank, pos[epoch_order(lo, hi, pos.size, keys)]
        g = self.rank + j * self.world_size
        return g, batch_positions(g, len(self.input_nodes), self.batch_size, self.world_size,
                                  shuffle=self.shuffle, drop_last=self.drop_last,
                                  seed=self.seed, epoch=epoch)

    def __len__(self) -> int:
        if self.split == "owner":
            return self._owner_num_batches(self._owner_counts()[1])
        n, per = len(self.input_nodes), self.batch_size * self.world_size
        return n // per if self.drop_last else -(-n // per)

    def request(self, g: int, pos: np.ndarray, epoch: int | None = None) -> SampleRequest:
        """The request of global batch ``g`` (positions ``pos`` into ``input_nodes``)."""
        seeds = self.input_nodes.ids(pos)
        if self._new_nodes is not None:
            new = self._new_nodes[pos]
        elif self.split == "owner" and not self._typed:  # own seeds: translated in own ids
            new = self._ids.to_new_local(seeds)
        else:  # a typed part's per-type ids are translated by its sampler every round
            new = None
        t = self._time.get("input_time")
        return SampleRequest(
            seeds, self.num_neighbors, request_key(self.seed, self.epoch if epoch is None
                                                   else epoch, g), self.replace,
            input_id=pos, edge_ids=self.edge_ids, new_seeds=new, input_type=self.input_type,
            input_time=None if t is None else t[pos], time_attr=self._time.get("time_attr"),
            temporal_strategy=self._time.get("temporal_strategy", "uniform"),
            disjoint=self._time.get("disjoint"))

    def _num_seeds(self) -> int:
        return len(self.input_nodes)

    def __iter__(self) -> Iterator[MiniBatch]:
        return self._iterate(lambda g, pos, e: (self.request(g, pos, e), None), lambda b, _: b)
