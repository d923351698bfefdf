"""The feature cache's choice: the inclusion estimate matches how often sampled rounds touch
each node, and stale host cache files of dead writers are removed."""

from __future__ import annotations

import os
import subprocess
import sys
import types

import numpy as np

from mnmg_sampler.distributed.host_groups import sweep_stale
from mnmg_sampler.distributed.row_cache import CachePlan, inclusion_scores
from mnmg_sampler.ops.rng import request_key
from mnmg_sampler.sampling.sampler import MultiHopSampler, SampleRequest, local_hop_fn

from ..distributed.common import FANOUTS, SEED, small_graph


def test_inclusion_estimate_matches_sampled_rounds():
    g = small_graph()
    # one part holding the whole graph, one rank: no collective
    part = types.SimpleNamespace(num_nodes=g.num_nodes, indptr=g.indptr, indices=g.indices,
                                 boundaries=[0, g.num_nodes], rank=0)
    B, rounds, k = 12, 400, 40
    est = -np.expm1(inclusion_scores(part, types.SimpleNamespace(world_size=1, group=None),
                                     CachePlan(FANOUTS, B)))
    s = MultiHopSampler(local_hop_fn(g, SEED), g.num_nodes)
    rng = np.random.default_rng(0)
    touched = np.zeros(g.num_nodes)
    reqs = [SampleRequest(rng.choice(g.num_nodes, B, replace=False), FANOUTS,
                          request_key(SEED, 0, i)) for i in range(rounds)]
    for at in range(0, rounds, 100):  # a request's batch does not depend on the others in a call
        for mb in s.sample(reqs[at:at + 100]):
            touched[mb.n_id.numpy()] += 1
    freq = touched / rounds
    assert np.corrcoef(est, freq)[0, 1] > 0.95
    assert np.abs(est - freq).mean() < 0.06
    # the k rows it would cache serve nearly as many touches as the k most touched rows
    best = np.sort(freq)[-k:].sum()
    assert freq[np.argsort(-est)[:k]].sum() >= 0.98 * best
    # and more than a degree order (what the fallback uses) on this graph
    deg = np.bincount(g.indices, minlength=g.num_nodes)
    assert freq[np.argsort(-est)[:k]].sum() > freq[np.argsort(-deg, kind="stable")[:k]].sum()


def test_stale_cache_files_of_dead_writers_are_removed(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    pid = int(dead.stdout)
    stale = [tmp_path / f"mnmg-rowcache-00ab-1-{pid}-rows.npy",
             tmp_path / f"mnmg-rowcache-00ab-1-{pid}-ids.npy.tmp"]
    live = tmp_path / f"mnmg-rowcache-00cd-0-{os.getpid()}-rows.npy"
    other = tmp_path / "mnmg-rowcache-notes.txt"
    for p in (*stale, live, other):
        p.write_bytes(b"x")
    assert sorted(sweep_stale(tmp_path)) == sorted(stale)
    assert live.exists() and other.exists() and not any(p.exists() for p in stale)
