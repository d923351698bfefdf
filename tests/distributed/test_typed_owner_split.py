"""``split="owner"`` on typed parts, real gloo ranks: each rank's seeds are the input type's
nodes its part owns (a seed list and every node of a type), every seed once per epoch over the
ranks, and every batch equals the single-process HeteroSampler's for its seeds and key (global
batch ``j * W + rank``), over the wire (sharded id maps: every rank's seeds are its own, so no
round looks them up) and the shared topology."""

from __future__ import annotations

import numpy as np

from mnmg_sampler.graph.api import partition_graph
from mnmg_sampler.graph.typed import typed_graph
from mnmg_sampler.ops.rng import request_key
from mnmg_sampler.sampling.sampler import HeteroSampler, HeteroSampleRequest

from ..typed_graphs import typed_spec
from .harness import run_ranks

SEED, LOADER_SEED, EPOCH, B, W = 9, 3, 1, 4, 2
NUM = {("author", "writes", "paper"): [3, 2], ("paper", "rev_writes", "author"): [2, 2],
       ("paper", "cites", "paper"): [4, 1], ("paper", "has", "field"): [1, 0],
       ("field", "of", "paper"): [2, 2]}


def _seed_sets(spec) -> dict[str, tuple[str, np.ndarray | None]]:
    return {"list": ("paper", np.flatnonzero(spec["masks"]["paper"]["train"])),
            "all": ("author", None)}


def _count_lookups(ids) -> list:
    """Record each collective seed lookup of ``ids`` (an IdMaps) in the returned list."""
    calls, real = [], ids.to_new_many
    ids.to_new_many = lambda a: calls.append(len(a)) or real(a)
    return calls


def _count_hop_exchanges(ex) -> list:
    """Record each all-to-all of a hop's ids or replies (tag ``ids``) on ``ex``."""
    calls = []
    for name in ("bounded", "exchange"):
        real = getattr(ex, name)
        setattr(ex, name, lambda *a, real=real, **k: (a[-1] == "ids" and calls.append(1))
                or real(*a, **k))
    return calls


def _load(rank, world, d):
    import torch

    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.graph.partition_io import load_partition
    from mnmg_sampler.loaders.neighbor import DistNeighborLoader

    part = load_partition(d, rank, world)
    out = {"orig": np.asarray(part.orig_ids)}
    for shared in (False, "auto"):
        svc = SamplingService(load_partition(d, rank, world), seed=SEED,
                              shared_topology=shared, id_maps="sharded")
        lookups = _count_lookups(svc.sampler.ids)
        hop_calls = _count_hop_exchanges(svc.sampler.ex)
        for name, (t, ids) in _seed_sets(typed_spec(3)).items():
            loader = DistNeighborLoader(svc, (t, None if ids is None else torch.from_numpy(ids)),
                                        NUM, batch_size=B, shuffle=True, seed=LOADER_SEED,
                                        split="owner")
            loader.set_epoch(EPOCH)
            out[shared, name] = [
                {"input_id": b.input_id.numpy(),
                 **{k: {e: v.numpy() for e, v in getattr(b, k).items()}
                    for k in ("n_id", "edge_index", "e_id", "x", "y")}} for b in loader]
        out[shared, "enabled"] = svc.stats()["shared_topology"]["enabled"]
        out[shared, "lookups"] = len(lookups)
        out[shared, "hop exchanges"] = (len(hop_calls), svc.stats()["rounds"])
        svc.shutdown()
    return out


def test_owner_split_on_typed_parts_equals_one_process(tmp_path):
    spec = typed_spec(3)
    g = typed_graph(spec)
    d = str(partition_graph(spec, num_parts=W, out=tmp_path / "p", method="random", seed=2))
    res = run_ranks(_load, W, d, timeout=300)
    ref = HeteroSampler(g, SEED)
    for shared in (False, "auto"):
        assert [r[shared, "enabled"] for r in res] == [shared == "auto"] * W
        assert [r[shared, "lookups"] for r in res] == [0] * W  # every seed translated here
        if not shared:  # every seed its rank's own: hop 1 is local, hop 2 one all-to-all each way
            assert all(c == 2 * n > 0 for c, n in (r[shared, "hop exchanges"] for r in res))
        for name, (t, ids) in _seed_sets(spec).items():
            n = g.num_nodes_of(t)
            seeds = np.arange(n) if ids is None else ids
            off = int(g.node_type_offset[g.node_types.index(t)])
            seen = np.zeros(seeds.size, np.int64)
            for rank, r in enumerate(res):
                assert len(r[shared, name]) == max(len(q[shared, name]) for q in res)
                for j, got in enumerate(r[shared, name]):
                    pos = got["input_id"]
                    seen[pos] += 1
                    # the rank's own nodes of the input type only
                    assert np.isin(seeds[pos] + off, r["orig"]).all()
                    want = ref.sample([HeteroSampleRequest(
                        t, seeds[pos], NUM, request_key(LOADER_SEED, EPOCH, j * W + rank))])[0]
                    for key in ("n_id", "edge_index", "e_id", "x", "y"):
                        w = getattr(want, key)
                        assert got[key].keys() == w.keys(), key
                        for k in w:
                            np.testing.assert_array_equal(got[key][k], w[k].numpy(),
                                                          err_msg=str((key, k)))
            np.testing.assert_array_equal(seen, np.ones(seeds.size, np.int64))  # once each
