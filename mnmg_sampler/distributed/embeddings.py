"""Learnable node embeddings stored like feature rows: each row lives with the rank that owns its
node, a batch fetches its rows from their owners, and the gradients of the rows it touched go
back to those owners, where a sparse Adam updates only them (DistDGL's ``DistEmbedding``).

A rank's table holds its part's nodes of the embedded types, grouped by type in local-row order;
it is no ``nn.Parameter``, so DDP never all-reduces it. Row ``v`` of type ``t`` starts as
``N(0, 1)`` draws keyed on ``(seed, t, v)``, alike for any world size and partitioning.
:meth:`DistEmbedding.fetch` and :meth:`DistEmbedding.step` run in the training thread on this
module's own exchange (rows change every step: not prefetched with a round). Gradients are summed
per row in float64, per rank in occurrence order and at the owner in rank order, so the same
global batches on 1, 2 or 3 ranks give bit-identical tables. Memory: the rows, Adam's moments and
the largest batch's reused buffers. Checkpoints of any world size load into any other
(:meth:`DistEmbedding.load_state_dicts`).
See docs/hetero.md#learned-embeddings-rows-with-their-owners.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping, Sequence

import numba
import numpy as np
import torch

from ..errors import CheckpointError, MemoryBudgetError, ServiceError
from .collective import Exchanger, agree
from .id_maps import IdMaps

__all__ = ["BYTES_PER_VALUE", "DistEmbedding", "init_rows"]

BYTES_PER_VALUE = 12
"""Bytes a rank holds per embedding value: the float32 value and Adam's two float32 moments."""

TAG = "embeddings"
"""Traffic class of the fetches and gradients in :attr:`Exchanger.bytes`."""


@numba.njit(cache=True)
def _sum_rows(acc, idx, vals):
    """``acc[idx[i]] += vals[i]`` in order of ``i`` (float64 accumulator, float32 or float64
    values: a float32 value widens exactly): a fixed order."""
    for i in range(idx.shape[0]):
        r = idx[i]
        for j in range(vals.shape[1]):
            acc[r, j] += vals[i, j]


@numba.njit(cache=True)
def _sum_adam(weight, m, v, steps, rows, order, back, scale, lr, b1, b2, eps):
    """For each table row in ``rows[order]`` (``order`` groups equal rows, rank order kept
    within each): the float64 sum of its ``back`` gradients in that order, times ``scale``,
    rounded to float32, then one Adam step on that row alone with its own step count
    (float32 arithmetic; ``lr``, ``b1``, ``b2``, ``eps`` are float32). In place: no buffer
    beyond one row."""
    dim = weight.shape[1]
    g = np.empty(dim, np.float64)
    one = np.float32(1.0)
    i, n = 0, order.shape[0]
    while i < n:
        r = rows[order[i]]
        g[:] = 0.0
        while i < n and rows[order[i]] == r:
            for j in range(dim):
                g[j] += back[order[i], j]
            i += 1
        steps[r] += 1
        t = np.float32(steps[r])
        c1 = one - b1 ** t
        c2 = one - b2 ** t
        for j in range(dim):
            gj = np.float32(g[j] * scale)
            mj = m[r, j] * b1 + (one - b1) * gj
            vj = v[r, j] * b2 + (one - b2) * gj * gj
            m[r, j] = mj
            v[r, j] = vj
            weight[r, j] -= lr * (mj / c1) / (np.sqrt(vj / c2) + eps)


def init_rows(type_name: str, ids: np.ndarray, dim: int, seed: int) -> np.ndarray:
    """The initial rows of global per-type ``ids`` of ``type_name``: standard normal float32,
    a pure function of ``(seed, type_name, id)`` (as ``nn.Embedding``'s default init)."""
    from ..graph.permute import node_features

    key = (int(seed) * 0x9E3779B1 + zlib.crc32(type_name.encode())) & 0x7FFFFFFFFFFFFFFF
    return node_features(np.asarray(ids, np.int64), int(dim), key)


class DistEmbedding:
    """This rank's rows of the embedding tables of ``types`` (see the module docstring).

    Args:
        part: this rank's partition (typed or homogeneous).
        types: the embedded node types of a typed part (``None`` for a homogeneous one: one
            table, every node).
        dim: embedding width.
        seed: the initial rows' seed.
        lr, betas, eps: the sparse Adam's settings.
        id_maps: the mode of the id maps the fetches translate with (:mod:`.id_maps`).
        maps: id maps to share instead (the service's: ``service.sampler.ids``; no second
            shard is built).
        memory_mb: ``model.embedding_memory_mb``: the most this rank's rows and optimizer state
            may take (checked on every rank before anything is allocated).
        group: the process group of the exchanges (default: the default group; calls are
            collective on it).

    Example::

        emb = DistEmbedding(part, ["user"], 64, lr=0.01)
        h = emb.fetch({"user": batch.n_id["user"].numpy()})      # {"user": [n, 64]}
        loss = model(h, ...); loss.backward(); emb.step()
    """

    def __init__(self, part, types: Sequence[str] | None, dim: int, seed: int = 0,
                 lr: float = 0.01, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, id_maps: str = "auto", memory_mb: float | None = None,
                 group=None, maps: IdMaps | None = None) -> None:
        self.ex = Exchanger(group)
        self.group = group
        self.dim, self.seed = int(dim), int(seed)
        self.lr, self.betas, self.eps = float(lr), (float(betas[0]), float(betas[1])), float(eps)
        bounds = np.asarray(part.boundaries, np.int64)
        self._inner = np.ascontiguousarray(bounds[1:-1])
        self.lo = int(bounds[self.ex.rank])
        orig = np.asarray(part.orig_ids, np.int64)
        tp, self.typed = part.layout, part.typed is not None
        names = list(tp.node_types)
        # the embedded types' indices; a homogeneous graph's one type is "" here (its keys)
        at = {t: names.index(t) for t in names if t in set(types or ())} if self.typed else {"": 0}
        self.types = list(at)
        self._global_off = {t: int(tp.node_type_offset[i]) for t, i in at.items()}
        ranges = {t: (int(tp.type_offset[i]), int(tp.type_offset[i + 1])) for t, i in at.items()}
        self.rows_total = sum(int(np.diff(tp.node_type_offset)[i]) for i in at.values())
        # local rows [a, b) of each type in the part -> rows [base, base + b - a) of the table
        self._local = np.array([ranges[t] for t in self.types], np.int64).reshape(-1, 2)
        self._base = np.concatenate(([0], np.cumsum(self._local[:, 1] - self._local[:, 0])))
        self.rows_local = int(self._base[-1])
        agree(lambda: self._check_memory(memory_mb), group, "checking the embedding rows' memory")
        self.ids = {t: (orig[a:b] - self._global_off[t]) for t, (a, b) in ranges.items()}
        self.weight = np.empty((self.rows_local, self.dim), np.float32)
        for k, t in enumerate(self.types):
            self.weight[self._base[k]:self._base[k + 1]] = init_rows(t, self.ids[t], dim, seed)
        self.m = np.zeros_like(self.weight)
        self.v = np.zeros_like(self.weight)
        self.steps = np.zeros(self.rows_local, np.int64)
        self.maps = IdMaps(part, self.ex, id_maps) if maps is None else \
            maps.with_exchanger(self.ex)  # collective without maps
        self._ctx = None
        self._scratch = {"uniq": np.zeros(0, np.uint8), "recv": np.zeros(0, np.uint8)}
        self.stats = {"fetches": 0, "steps": 0}

    def _check_memory(self, memory_mb: float | None) -> None:
        from ..system.host_limits import check_allocation, format_bytes

        nbytes = self.rows_local * self.dim * BYTES_PER_VALUE
        what = (f"model.embedding_dim: this rank's {self.rows_local:,} embedding rows of width "
                f"{self.dim} ({format_bytes(nbytes)} with Adam's moments)")
        fix = ("lower model.embedding_dim, run more ranks (each holds 1/W of the rows), give "
               "those node types features, or raise model.embedding_memory_mb")
        if memory_mb is not None and nbytes > float(memory_mb) * 2**20:
            raise MemoryBudgetError(f"{what} exceed model.embedding_memory_mb = {memory_mb:g}",
                                    "nothing was allocated", fix)
        check_allocation(what, nbytes, fix)

    # -- rows of new ids (owner side) ----------------------------------------------------
    def _rows_of(self, new_ids: np.ndarray) -> np.ndarray:
        """Table rows of new ids this rank owns (of the embedded types)."""
        loc = new_ids - self.lo
        k = np.searchsorted(self._local[:, 0], loc, side="right") - 1
        return self._base[k] + loc - self._local[k, 0]

    def _buffer(self, name: str, rows: int, dtype) -> np.ndarray:
        """``[rows, dim]`` of ``dtype`` in a reused buffer (``"uniq"``: a batch's distinct rows,
        then their gradient sums; ``"recv"``: the rows this rank serves, then their gradients).
        Grown by a quarter when short, never freed: freed batch-sized arrays would stay in the
        allocator's heap as fragments."""
        need = rows * self.dim * np.dtype(dtype).itemsize
        buf = self._scratch[name]
        if buf.size < need:
            buf = self._scratch[name] = np.empty(max(need, buf.size + buf.size // 4), np.uint8)
        return buf[:need].view(dtype).reshape(rows, self.dim)

    def _into(self, name: str, rows: int, dtype) -> torch.Tensor | None:
        """A reused receive buffer for :meth:`Exchanger.payload` (host exchanges only)."""
        if self.ex.device.type != "cpu":
            return None
        return torch.from_numpy(self._buffer(name, rows, dtype))

    # -- fetch and step (collective) -----------------------------------------------------------
    def fetch(self, ids: Mapping[str, np.ndarray] | np.ndarray, train: bool = True,
              uneven: bool = False) -> dict[str, torch.Tensor] | torch.Tensor:
        """Collective: the rows of original per-type ``ids`` (``{type: ids}``, or one array on
        a homogeneous graph), from their owners. With ``train``, every row is a leaf tensor
        requiring its gradient, and the next :meth:`step` applies it.

        ``uneven``: ranks may call this a different number of times (evaluation in chunks);
        each then ends the sequence with :meth:`drain`, which joins the others' fetches until
        every rank has drained (one all-reduce per call)."""
        if uneven:
            self._busy(1)
        one = not isinstance(ids, Mapping)
        by_type = {"": ids} if one else ids
        types = [t for t in self.types if t in by_type]
        keys = [np.asarray(by_type[t], np.int64).reshape(-1) + self._global_off[t]
                for t in types]
        new = self.maps.to_new_many(keys)
        flat = np.concatenate(new) if new else np.zeros(0, np.int64)
        uniq, inv = np.unique(flat, return_inverse=True)
        owner = np.searchsorted(self._inner, uniq, side="right")
        counts = np.bincount(owner, minlength=self.ex.world_size).astype(np.int64)
        recv, rcounts = self.ex.exchange(torch.from_numpy(uniq), torch.from_numpy(counts), TAG)
        recv = recv.numpy()
        rows = self._rows_of(recv)
        send = np.take(self.weight, rows, axis=0, out=self._buffer("recv", rows.size,
                                                                   np.float32))
        got = self.ex.payload(torch.from_numpy(send), rcounts.tolist(), counts.tolist(), TAG,
                              self._into("uniq", uniq.size, np.float32)).numpy()
        ends = np.cumsum([k.size for k in keys], dtype=np.int64)
        out = {}
        for t, a, z in zip(types, ends - [k.size for k in keys], ends, strict=True):
            h = torch.from_numpy(got[inv[a:z]])
            out[t] = h.requires_grad_(True) if train else h
        self.stats["fetches"] += 1
        if train:
            self._ctx = (out, inv, uniq.size, counts, rcounts, rows)
        return out[""] if one else out

    def _busy(self, flag: int) -> bool:
        import torch.distributed as dist

        t = torch.tensor([flag], dtype=torch.int64, device=self.ex.device)
        if self.ex.world_size > 1:
            dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.group)
        return bool(int(t[0]))

    def drain(self) -> None:
        """Collective: end a sequence of ``uneven`` fetches (see :meth:`fetch`)."""
        none = {t: np.zeros(0, np.int64) for t in self.types}
        while self._busy(0):
            self.fetch(none if self.typed else none[""], train=False)

    def step(self, grad_scale: float = 1.0) -> None:
        """Collective: apply the gradients of the last training :meth:`fetch` (sums per row
        over ranks, times ``grad_scale``: ``1 / world_size`` averages as DDP does)."""
        if self._ctx is None:
            raise ServiceError("DistEmbedding.step() without a training fetch before it",
                               "there are no gradients of fetched rows to apply",
                               "call fetch(ids) (train=True) for the batch, then backward(), "
                               "then step()")
        out, inv, n_uniq, counts, rcounts, rows = self._ctx
        self._ctx = None
        acc = self._buffer("uniq", n_uniq, np.float64)
        acc.fill(0.0)
        at = 0
        for h in out.values():  # fetch order: types, then occurrences
            n = int(h.shape[0])
            if h.grad is not None and n:
                _sum_rows(acc, inv[at:at + n], h.grad.numpy())
            at += n
        del out
        back = self.ex.payload(torch.from_numpy(acc), counts.tolist(), rcounts.tolist(), TAG,
                               self._into("recv", rows.size, np.float64)).numpy()
        # back: rank order, then each rank's sorted ids
        f32 = np.float32
        _sum_adam(self.weight, self.m, self.v, self.steps, rows,
                  np.argsort(rows, kind="stable"), back, float(grad_scale), f32(self.lr),
                  f32(self.betas[0]), f32(self.betas[1]), f32(self.eps))
        self.stats["steps"] += 1

    # -- state ---------------------------------------------------------------------------
    def traffic(self) -> dict:
        """Counters for metrics: rows held, rows of all tables, bytes sent by the fetches and
        gradients (to other ranks, all of them so far) and exchanges."""
        b = self.ex.bytes.get(TAG, [0, 0])
        return {"embedding_rows_local": self.rows_local,
                "embedding_rows_total": self.rows_total,
                "embedding_bytes_sent": int(b[1]), "embedding_steps": self.stats["steps"],
                "embedding_fetches": self.stats["fetches"]}

    def state_dict(self) -> dict[str, torch.Tensor | int]:
        """This rank's rows: per type ``ids.<t>`` (global per-type ids), ``weight.<t>``,
        ``m.<t>``, ``v.<t>``, ``steps.<t>``; tensors and ints only."""
        st: dict[str, torch.Tensor | int] = {"dim": self.dim}
        for k, t in enumerate(self.types):
            a, b = int(self._base[k]), int(self._base[k + 1])
            whole = a == 0 and b == self.rows_local  # torch.save writes a view's whole storage
            st[f"ids.{t}"] = torch.from_numpy(self.ids[t])
            for name, arr in (("weight", self.weight), ("m", self.m), ("v", self.v),
                              ("steps", self.steps)):
                st[f"{name}.{t}"] = torch.from_numpy(arr if whole else arr[a:b].copy())
        return st

    def load_state_dicts(self, states: Iterable[Mapping]) -> None:
        """Take this rank's rows out of the saved dicts of every rank of a checkpoint (any
        world size); :class:`CheckpointError` unless every row was found exactly once."""
        found = np.zeros(self.rows_local, np.int64)
        for st in states:
            if int(st.get("dim", -1)) != self.dim:
                raise CheckpointError(f"embedding rows of width {st.get('dim')} in the "
                                      f"checkpoint, the model's are {self.dim}",
                                      "they cannot be loaded",
                                      "resume with the model.embedding_dim they were written "
                                      "with, or start a fresh output.dir")
            for k, t in enumerate(self.types):
                if f"ids.{t}" not in st:
                    continue
                mine = self.ids[t]
                saved = st[f"ids.{t}"].numpy()
                pos = np.minimum(np.searchsorted(mine, saved), max(mine.size - 1, 0))
                hit = np.flatnonzero((mine[pos] == saved) if mine.size else
                                     np.zeros(saved.size, bool))
                dst = int(self._base[k]) + pos[hit]
                for name, arr in (("weight", self.weight), ("m", self.m), ("v", self.v),
                                  ("steps", self.steps)):
                    arr[dst] = st[f"{name}.{t}"].numpy()[hit]
                np.add.at(found, dst, 1)
        if not np.all(found == 1):
            raise CheckpointError(f"the checkpoint's embedding rows cover {int((found > 0).sum())}"
                                  f" of this rank's {self.rows_local} rows "
                                  f"({int((found > 1).sum())} more than once)",
                                  "the embedding tables cannot be restored",
                                  "resume from a complete checkpoint (every rank's row file), "
                                  "or start a fresh output.dir")
