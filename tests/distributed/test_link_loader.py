"""DistLinkNeighborLoader on real gloo ranks: seed edges, negatives, exclusion, W-invariance."""

from __future__ import annotations

import numpy as np
import pytest

from mnmg_sampler.graph.csr import CSRGraph
from mnmg_sampler.graph.partition import partition
from mnmg_sampler.loaders.neighbor import global_batches
from mnmg_sampler.ops.negative import NegativeSampling, csr_has_edges
from mnmg_sampler.sampling.link import build_link_request, finish_link_batch
from mnmg_sampler.sampling.sampler import MultiHopSampler, local_hop_fn

from .harness import run_ranks

SEED = 13
FAN = [3, 2]
BATCH = 16


def link_graph(n: int = 200, m: int = 900) -> CSRGraph:
    """An undirected random graph (each edge stored both ways), with features."""
    rng = np.random.default_rng(21)
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    keep = src != dst
    x = rng.standard_normal((n, 4)).astype(np.float32)
    return CSRGraph.from_edges(src[keep], dst[keep], n, undirected=True, drop_duplicates=True,
                               x=x, y=np.zeros(n, np.int64))


def seed_edges(g: CSRGraph, count: int = 150) -> np.ndarray:
    dst = np.repeat(np.arange(g.num_nodes), g.degrees())
    pick = np.random.default_rng(2).choice(g.num_edges, count, replace=False)
    return np.stack([g.indices[pick], dst[pick]])


def _run(rank, world, d, eli, label, opts, epochs):
    import torch  # noqa: F401

    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.graph.partition_io import load_partition
    from mnmg_sampler.loaders.link import DistLinkNeighborLoader

    part = load_partition(d, rank, world)
    svc = SamplingService(part, seed=SEED)
    loader = DistLinkNeighborLoader(svc, FAN, eli, edge_label=label, batch_size=BATCH,
                                    part=part, seed=SEED, **opts)
    out = []
    for e in epochs:
        loader.set_epoch(e)
        for b in loader:
            rec = {k: (v.numpy() if hasattr(v, "numpy") else v) for k, v in vars(b).items()
                   if k not in ("meta",)}
            rec["epoch"] = e
            out.append(rec)
    svc.shutdown()
    calls = 0 if loader.membership is None else loader.membership.calls
    return out, len(loader), calls


def reference(g: CSRGraph, eli, label, opts, epoch: int, world: int) -> list[dict]:
    """The batches of one epoch in global order, sampled in this process."""
    neg = NegativeSampling.cast(opts.get("neg_sampling"))
    lab = None if label is None else (label + 1 if neg is not None and label.min() == 0
                                      else label)
    s = MultiHopSampler(local_hop_fn(g, SEED), g.num_nodes)
    out = []
    for gi, pos in enumerate(global_batches(eli.shape[1], BATCH, world,
                                            shuffle=opts.get("shuffle", False),
                                            drop_last=False, seed=SEED, epoch=epoch)):
        plan = build_link_request(eli, lab, pos, g=gi, epoch=epoch, seed=SEED,
                                  num_neighbors=FAN, replace=False, num_nodes=g.num_nodes,
                                  neg=neg,
                                  known=lambda a, b: csr_has_edges(g.indptr, g.indices, b, a))
        mb = s.sample([plan.request])[0]
        fb = finish_link_batch(mb, plan,
                               exclude_seed_edges=opts.get("exclude_seed_edges", False),
                               exclude_reverse_edges=opts.get("exclude_reverse_edges", False))
        out.append({k: (v.numpy() if hasattr(v, "numpy") else v) for k, v in vars(fb).items()
                    if k != "meta"})
    return out


def by_global_batch(results, world: int, epoch: int = 0) -> list[dict]:
    """One epoch's batches of every rank in global order (batch g is rank g % W's)."""
    per_rank = [[{k: v for k, v in b.items() if k != "epoch"} for b in r[0]
                 if b["epoch"] == epoch] for r in results]
    n = sum(len(p) for p in per_rank)
    return [per_rank[g % world][g // world] for g in range(n)]


def same(a: dict, b: dict) -> None:
    """Every field equal (``x``/``y`` only exist on the service side; checked separately)."""
    assert a.keys() == b.keys()
    for k in a.keys() - {"x", "y"}:
        va, vb = a[k], b[k]
        if isinstance(va, np.ndarray) or isinstance(vb, np.ndarray):
            assert va.dtype == vb.dtype and va.shape == vb.shape and np.array_equal(va, vb), k
        else:
            assert va == vb, k


def check_invariants(g: CSRGraph, eli: np.ndarray, batches: list[dict], opts: dict) -> None:
    dst_of = np.repeat(np.arange(g.num_nodes), g.degrees())
    eid_pos = np.empty(g.num_edges, np.int64)
    eid_pos[g.edge_ids] = np.arange(g.num_edges)
    edges = set(zip(g.indices.tolist(), dst_of.tolist(), strict=True))
    used = np.concatenate([b["input_id"] for b in batches])
    # every positive seed edge exactly once per epoch
    assert np.array_equal(np.sort(used), np.arange(eli.shape[1]))
    neg = NegativeSampling.cast(opts.get("neg_sampling"))
    seed_in_subgraph = 0
    for b in batches:
        n_id, ei = b["n_id"], b["edge_index"]
        if b["x"] is not None:
            assert np.array_equal(b["x"], g.x[n_id])
        # every sampled edge exists, and its e_id is that edge
        p = eid_pos[b["e_id"]]
        assert np.array_equal(g.indices[p], n_id[ei[0]])
        assert np.array_equal(dst_of[p], n_id[ei[1]])
        assert sum(b["num_sampled_edges"]) == ei.shape[1]
        # the label edges are the seed edges (positives first)
        P = b["input_id"].size
        lab_src, lab_dst = n_id[b["edge_label_index"][0]], n_id[b["edge_label_index"][1]]
        assert np.array_equal(lab_src[:P], eli[0, b["input_id"]])
        assert np.array_equal(lab_dst[:P], eli[1, b["input_id"]])
        got = set(zip(n_id[ei[0]].tolist(), n_id[ei[1]].tolist(), strict=True))
        for s, d in zip(lab_src[:P].tolist(), lab_dst[:P].tolist(), strict=True):
            assert (s, d) in edges
            seed_in_subgraph += (s, d) in got
            if opts.get("exclude_seed_edges"):
                assert (s, d) not in got
                if opts.get("exclude_reverse_edges"):
                    assert (d, s) not in got
        if neg is None:
            continue
        if neg.mode == "binary":
            assert lab_src.size == P * (1 + neg.amount)
            assert np.array_equal(b["edge_label"][P:], np.zeros(P * neg.amount))
            negs = list(zip(lab_src[P:].tolist(), lab_dst[P:].tolist(), strict=True))
        else:
            assert np.array_equal(b["src_index"], b["edge_label_index"][0])
            dn = b["dst_neg_index"].reshape(P, -1)
            assert dn.shape[1] == neg.amount
            negs = [(s, d) for s, row in zip(n_id[b["src_index"]].tolist(), n_id[dn].tolist(),
                                             strict=True) for d in row]
        if neg.reject_known:
            assert all(e not in edges for e in negs)
    # without exclusion the seed edges do show up in the subgraph: exclusion is not vacuous
    assert (seed_in_subgraph == 0) == bool(opts.get("exclude_seed_edges"))


CASES = {
    "binary": {"neg_sampling": {"mode": "binary", "amount": 2}, "shuffle": True},
    "triplet_reject_exclude": {"neg_sampling": {"mode": "triplet", "amount": 3,
                                                "reject_known": True},
                               "exclude_seed_edges": True, "exclude_reverse_edges": True},
    "binary_reject_exclude": {"neg_sampling": {"mode": "binary", "amount": 1,
                                               "reject_known": True},
                              "exclude_seed_edges": True, "shuffle": True},
}


def _run_each(rank, world, jobs):
    """``_run`` for each job's arguments in turn, on the same ranks (one spawn for all)."""
    return [_run(rank, world, *job) for job in jobs]


LINK_RUNS = [(1, "range", "binary_reject_exclude"), (2, "random", "binary_reject_exclude"),
             (3, "range", "binary_reject_exclude"), (2, "range", "binary"),
             (3, "random", "triplet_reject_exclude")]
IDENTICAL = [(1, "random"), (2, "range"), (3, "random"), (2, "metis")]
UNIFORM = {"neg_sampling": {"mode": "triplet", "amount": 40}}


def _jobs(g, tmp) -> dict:
    """Every rank run of the tests below: ``key -> (world size, _run's arguments)``."""
    eli, eli96 = seed_edges(g), seed_edges(g, 96)
    jobs = {}
    for world, method, case in LINK_RUNS:
        opts = CASES[case]
        label = None if opts["neg_sampling"]["mode"] == "triplet" else \
            np.arange(eli.shape[1]) % 2
        d = str(partition(g, world, method, tmp / f"p{world}{method}", seed=world))
        jobs[world, method, case] = (world, (d, eli, label, opts, [0, 1]))
    for world, method in IDENTICAL:
        d = str(partition(g, world, method, tmp / f"i{world}{method}", seed=5))
        jobs["identical", world, method] = (world, (d, eli96, None,
                                                    CASES["triplet_reject_exclude"], [0]))
    d = str(partition(g, 2, "random", tmp / "u", seed=3))
    jobs["uniform"] = (2, (d, eli, None, UNIFORM, [0]))
    return jobs


@pytest.fixture(scope="module")
def link_runs(tmp_path_factory) -> tuple:
    """``(graph, results by rank of each job of _jobs)``: one spawn per world size, running
    its jobs in turn (each with a service and a loader of its own)."""
    g = link_graph()
    jobs = _jobs(g, tmp_path_factory.mktemp("link"))
    out = {}
    for world in sorted({w for w, _ in jobs.values()}):
        keys = [k for k, (w, _) in jobs.items() if w == world]
        by_rank = run_ranks(_run_each, world, [jobs[k][1] for k in keys], timeout=480)
        for i, key in enumerate(keys):
            out[key] = [r[i] for r in by_rank]
    return g, out


@pytest.mark.parametrize("world, method, case", LINK_RUNS)
def test_link_loader_matches_single_process_and_invariants(link_runs, world, method, case):
    g, runs = link_runs
    res = runs[world, method, case]
    eli = seed_edges(g)
    opts = CASES[case]
    label = None if opts["neg_sampling"]["mode"] == "triplet" else \
        np.arange(eli.shape[1]) % 2
    assert len({r[1] for r in res}) == 1  # every rank has the same batch count
    for epoch in (0, 1):
        mine = by_global_batch(res, world, epoch)
        want = reference(g, eli, label, opts, epoch, world)
        assert len(mine) == len(want)
        for a, b in zip(mine, want, strict=True):
            same(a, b)
        check_invariants(g, eli, mine, opts)
        if opts.get("shuffle"):
            assert not np.array_equal(np.concatenate([b["input_id"] for b in mine]),
                                      np.arange(eli.shape[1]))
    if opts["neg_sampling"].get("reject_known"):
        assert all(r[2] > 0 for r in res)  # every rank joined the membership exchanges


def test_outputs_identical_across_world_sizes(link_runs):
    """The same batches, in global order, for W = 1, 2, 3 and the three partition methods.

    96 seed edges in batches of 16 make 6 global batches for each W, so batch g holds the same
    edges everywhere and every field must match bit for bit.
    """
    _, runs = link_runs
    outs = [by_global_batch(runs["identical", world, method], world)
            for world, method in IDENTICAL]
    assert len(outs[0]) == 6
    for other in outs[1:]:
        assert len(other) == len(outs[0])
        for a, b in zip(other, outs[0], strict=True):
            same(a, b)


def test_negatives_from_real_ranks_are_uniform(link_runs):
    """Chi-square of the destinations of every negative of an epoch on 2 ranks (fixed seed, so
    deterministic): uniform over all nodes, and the same draws as in one process."""
    from tests.unit.test_negative import chi2_stat, chi2_upper

    g, runs = link_runs
    eli = seed_edges(g)
    got = by_global_batch(runs["uniform"], 2)
    dst = np.concatenate([b["n_id"][b["dst_neg_index"]].ravel() for b in got])
    assert dst.size == eli.shape[1] * 40
    counts = np.bincount(dst, minlength=g.num_nodes)
    assert chi2_stat(counts) < chi2_upper(g.num_nodes - 1)
    want = reference(g, eli, None, UNIFORM, 0, 2)
    assert np.array_equal(dst, np.concatenate([b["n_id"][b["dst_neg_index"]].ravel()
                                               for b in want]))
