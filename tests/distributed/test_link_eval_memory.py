"""Evaluation memory of the temporal link job (issue 32): a disjoint triplet evaluation read in
chunks of whole trees (``DistLinkNeighborLoader.tree_chunks`` under ``evaluate_link``) on 2 real
ranks. With a node budget every encoder call stays within it and a rank's peak resident memory
grows by a small fraction of what whole batches of ``2 + negatives`` trees per edge cost, while
the metrics equal the whole batches' (a tree's root embedding depends on its tree only)."""

from __future__ import annotations

import numpy as np
import torch

from mnmg_sampler.graph.api import partition_graph
from mnmg_sampler.graph.typed import typed_graph

from ..timed_data import ratings
from .harness import run_ranks

RATES, REV = ("user", "rates", "movie"), ("movie", "rev_rates", "user")
HIDDEN, NEG, BATCH, BUDGET = 128, 20, 128, 10_000


def _data() -> tuple[dict, np.ndarray, np.ndarray]:
    """A skewed timed user-movie graph (the issue's shape, smaller) and its latest 512 ratings
    as the evaluated edges (one batch of 128 per rank)."""
    r = ratings(users=150, movies=1500, n=15_000, seed=3)
    ei = np.stack([r["src"], r["dst"]])
    spec = {"num_nodes": {"user": r["users"], "movie": r["movies"]},
            "edge_index": {RATES: ei, REV: ei[::-1].copy()}, "x": {"movie": r["x"]},
            "edge_time": {RATES: r["time"], REV: r["time"].copy()}, "time_attr": "time"}
    last = np.argsort(r["time"], kind="stable")[-2 * BATCH:]
    return spec, ei[:, last], r["time"][last] - 1


def _peak_kib() -> int:
    with open("/proc/self/status") as f:
        return next(int(x.split()[1]) for x in f if x.startswith("VmHWM"))


def _reset_peak() -> bool:
    """Reset the process's peak RSS to its current RSS (Linux clear_refs 5)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _rank(rank, world, pdir):
    from mnmg_sampler.distributed.embeddings import DistEmbedding
    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.graph.partition_io import load_partition
    from mnmg_sampler.loaders.link import DistLinkNeighborLoader
    from mnmg_sampler.train.link import evaluate_link
    from mnmg_sampler.train.model import HeteroGraphSAGE, LinkModel

    spec, eli, times = _data()
    torch.manual_seed(0)
    enc = HeteroGraphSAGE([RATES, REV], {"movie": 20}, HIDDEN, HIDDEN, 2, ("user", "movie"),
                          HIDDEN, dropout=0.0)
    net = LinkModel(enc, HIDDEN, edge_type=RATES)
    sizes: list[int] = []

    def model(x, edge_index, rows, *counts):  # the encoder, counting the nodes of every call
        sizes.append(sum(int(v.shape[0]) for v in (*x.values(), *rows.values())))
        return net(x, edge_index, rows, *counts)

    model.eval, model.train = net.eval, net.train
    part = load_partition(pdir, rank, world)
    # user rows from their owners: the chunks' fetches are uneven across ranks (drained)
    emb = DistEmbedding(part, enc.embedded, HIDDEN)
    svc = SamplingService(part, seed=1)
    loader = DistLinkNeighborLoader(
        svc, [10, 5], (RATES, torch.from_numpy(eli)), batch_size=BATCH, part=part,
        neg_sampling={"mode": "triplet", "amount": NEG, "reject_known": True}, seed=1,
        prefetch=4, time_attr="time", edge_label_time=torch.from_numpy(times))
    out = {}
    evaluate_link(model, net, emb, loader, torch.device("cpu"), 5, BUDGET)  # first-call costs
    for name, budget in (("chunked", BUDGET), ("whole", None)):
        sizes.clear()
        resettable = _reset_peak()
        base = _peak_kib()
        metrics = evaluate_link(model, net, emb, loader, torch.device("cpu"), 5, budget)
        out[name] = (metrics, max(sizes), len(sizes), (_peak_kib() - base) / 1024, resettable)
    svc.shutdown()
    return out, loader.tree_bound()


def test_chunked_evaluation_bounds_a_ranks_memory(tmp_path):
    spec, _, _ = _data()
    pdir = str(partition_graph(typed_graph(spec), num_parts=2, out=tmp_path / "p",
                               method="random", seed=0))
    for out, bound in run_ranks(_rank, 2, pdir, timeout=300, fresh=True):
        m_c, most_c, calls_c, grew_c, resettable = out["chunked"]
        m_w, most_w, calls_w, grew_w, _ = out["whole"]
        assert bound == 1 + 10 + 10 * 5  # nodes of one [10, 5] tree at most
        assert calls_w == 1 and most_w > 5 * BUDGET  # one batch: (2 + 20) * 128 trees
        assert most_c <= BUDGET and calls_c >= most_w // BUDGET
        assert m_c == m_w  # the same trees, the same root embeddings, the same metrics
        if resettable:  # the peak measured per evaluation (else both from the chunked one's)
            # chunks of 10k nodes: about 20 MB of activations at width 128; whole: about 200 MB
            assert grew_c < 64 and grew_w > 3 * max(grew_c, 1.0), (grew_c, grew_w)
