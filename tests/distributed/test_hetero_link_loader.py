"""DistLinkNeighborLoader on typed parts, real gloo ranks: every batch equals the single-process
reference (so batches are identical for W = 1, 2, 3 and any partitioning), every seed edge once
per epoch, sampled edges exist in their relation, no seed edge nor its reverse with
exclude_seed_edges, negatives on the destination type and, with reject_known (asked of the
destinations' owners), none an edge of the relation; bad arguments are typed errors on every
rank, also when only one rank passes them. One spawn per world size keeps the CI time small."""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest
import torch

from mnmg_sampler.graph.api import partition_graph
from mnmg_sampler.sampling.batch import HeteroLinkMiniBatch

from ..typed_graphs import link_spec
from ..unit.test_hetero_link import CASES, FAN, RATES, SEED, check_invariants, reference, seed_edges
from .harness import run_ranks


def _plain(v):
    """Tensors (also inside dicts) as numpy arrays, to leave the rank without shared memory."""
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v.numpy() if torch.is_tensor(v) else v


def _batch(d: dict) -> HeteroLinkMiniBatch:
    def back(v):
        if isinstance(v, dict):
            return {k: back(x) for k, x in v.items()}
        return torch.from_numpy(v) if isinstance(v, np.ndarray) else v

    return HeteroLinkMiniBatch(**{k: back(v) for k, v in d.items()})


def _errors(svc, rank, eli):
    """The typed error of each bad argument (the last one bad on rank 1 only)."""
    from mnmg_sampler.errors import SamplingInputError
    from mnmg_sampler.loaders.link import DistLinkNeighborLoader

    bad_range = eli.copy()
    bad_range[1, 3] = 19  # 19 movies: ids 0..18
    cases = [({"edge_label_index": (("user", "likes", "movie"), eli)}, "not a relation"),
             ({"edge_label_index": eli}, "not an (edge type"),
             ({"edge_label_index": (RATES, bad_range)}, "out of range for 19 movie"),
             ({"edge_label_index": (RATES, eli[:1])}, "has shape"),
             ({"reverse_edge_type": ("movie", "rev_likes", "user")}, "not a relation"),
             ({"reverse_edge_type": ("user", "follows", "user")}, "does not go from"),
             ({"exclude_reverse_edges": True}, "homogeneous"),
             ({"neg_sampling": {"mode": "binary", "reject_known": True}}, "part="),
             ({"num_neighbors": {RATES: [2]}}, "no fanouts"),
             ({"edge_label_index": (RATES, bad_range if rank == 1 else eli)}, "rank 1|out of")]
    got = []
    for kw, match in cases:
        args = {"num_neighbors": FAN, "edge_label_index": (RATES, eli), "batch_size": 4} | kw
        try:
            DistLinkNeighborLoader(svc, **args)
            got.append(None)
        except SamplingInputError as e:
            got.append((match, str(e)))
    return got


def _run(rank, world, d, eli, label, opts, epochs, errors):
    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.graph.partition_io import load_partition
    from mnmg_sampler.loaders.link import DistLinkNeighborLoader

    part = load_partition(d, rank, world)
    svc = SamplingService(part, seed=SEED)
    errs = _errors(svc, rank, eli) if errors else []
    loader = DistLinkNeighborLoader(svc, FAN, (RATES, torch.from_numpy(eli)),
                                    edge_label=None if label is None else torch.from_numpy(label),
                                    batch_size=8, seed=SEED, part=part, **opts)
    out = []
    for e in epochs:
        loader.set_epoch(e)
        for b in loader:
            b.to_pyg()  # PyG's layout (compared with PyG's loader in the unit tests)
            out.append((e, {f.name: _plain(getattr(b, f.name)) for f in fields(b)}))
    svc.shutdown()
    calls = 0 if loader.membership is None else loader.membership.calls
    return out, len(loader), errs, calls


@pytest.mark.parametrize("world, method, case, errors", [
    pytest.param(1, "random", "binary", False, marks=pytest.mark.slow),
    (2, "random", "binary_exclude", True),
    (3, "range", "triplet_exclude", False),
])
def test_typed_link_loader_equals_single_process(tmp_path, world, method, case, errors):
    spec = link_spec()
    eli = seed_edges(spec)
    opts = CASES[case]
    label = (np.arange(eli.shape[1]) % 2) if case == "binary" else None
    d = str(partition_graph(spec, num_parts=world, out=tmp_path / "p", method=method, seed=3))
    epochs = [0, 1] if opts.get("shuffle") else [0]
    res = run_ranks(_run, world, d, eli, label, opts, epochs, errors, timeout=300)
    assert len({r[1] for r in res}) == 1  # the same batch count on every rank
    for epoch in epochs:
        per_rank = [[_batch(b) for e, b in r[0] if e == epoch] for r in res]
        n = sum(len(p) for p in per_rank)
        mine = [per_rank[g % world][g // world] for g in range(n)]
        want = reference(spec, RATES, eli, label, opts, epoch, world)
        assert len(mine) == len(want) == res[0][1] * world
        for a, b in zip(mine, want, strict=True):
            assert a.equal(b)
        check_invariants(spec, RATES, eli, mine, opts)
    if opts["neg_sampling"].get("reject_known"):
        assert all(r[3] > 0 for r in res)  # every rank joined the membership exchanges
    for _, _, errs, _ in res:  # every bad argument a typed error on every rank
        for got in errs:
            assert got is not None
            match, msg = got
            assert any(m in msg for m in match.split("|")), (match, msg)
