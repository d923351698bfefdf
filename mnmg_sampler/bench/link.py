"""``mnmg-sampler bench link``: link-prediction minibatches vs DGL 2.1's link sampler, one run.

Both sides sample the **same seed edges** with the same fanouts and thread count: ours what
:class:`~mnmg_sampler.loaders.link.DistLinkNeighborLoader` does per batch, in one process; DGL's
``as_edge_prediction_sampler(NeighborSampler, exclude="self", negative_sampler=Uniform(k))`` in
the peer venv (``bench/dgl_link_peer.py``). Options: benchmarks/README.md#bench-link. DGL
re-samples every layer's destination nodes, so compare sampled edges per second (batches per
second beside it). Our repeats interleave with DGL's runs; medians are reported.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..commands.sample import positive_int
from .peers import add_peer_options, peer_python, run_peer, save_graph
from .single import _fmt, _verdict, timed_parser
from .timing import TimedBatches

HELP = "link prediction minibatches (negatives, exclusion) vs DGL's link sampler (same run)"
DGL_TARGET = 1.5  # sampled edges/s >= 1.5x DGL's link sampler


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = timed_parser(subparsers, "link", HELP, __doc__)
    p.add_argument("--negatives", type=positive_int, default=1,
                   help="binary negatives per positive edge (default: 1)")
    p.add_argument("--reject", action="store_true",
                   help="redraw negatives that are known edges (DGL's Uniform does not)")
    p.add_argument("--no-exclude", action="store_true",
                   help="keep the seed edges in their subgraph (both sides)")
    add_peer_options(p)
    p.add_argument("--json", metavar="OUT", help="also write the results as JSON to OUT")
    p.set_defaults(bench_run=run)
    return p


class LinkBench(TimedBatches):
    """Timed link minibatches over fixed seed edges, one request per batch."""

    def __init__(self, graph, seed_pos, fanouts, args) -> None:
        import numpy as np

        from ..ops.negative import NegativeSampling, csr_has_edges
        from ..sampling.link import build_link_request, finish_link_batch
        from ..sampling.sampler import MultiHopSampler, local_hop_fn

        dst = np.searchsorted(graph.indptr, seed_pos, side="right") - 1  # the rows of the seeds
        self.eli = np.stack([graph.indices[seed_pos], dst])
        self.graph, self.args, self.fanouts = graph, args, fanouts
        self.neg = NegativeSampling("binary", args.negatives, reject_known=args.reject)
        self.known = lambda s, d: csr_has_edges(graph.indptr, graph.indices, d, s)
        self.sampler = MultiHopSampler(local_hop_fn(graph, args.seed), graph.num_nodes)
        self._build, self._finish = build_link_request, finish_link_batch
        B = args.batch_size
        self.batches = [np.arange(i, min(i + B, seed_pos.size)) for i in range(0, seed_pos.size, B)]
        super().__init__(len(self.batches))
        self._one(0)  # warm-up: compile, touch the arrays

    def _one(self, i: int):
        a = self.args
        plan = self._build(self.eli, None, self.batches[i], g=i, epoch=0, seed=a.seed,
                           num_neighbors=self.fanouts, replace=a.replace,
                           num_nodes=self.graph.num_nodes, neg=self.neg, known=self.known)
        (mb,) = self.sampler.sample([plan.request])
        return self._finish(mb, plan, exclude_seed_edges=not a.no_exclude)


def bench_dgl_link(graph, seed_pos, python: Path, args, fanouts, before_each) -> dict:
    """DGL's link sampler on the same graph and seed edges, ``--peer-repeats`` subprocesses."""
    import numpy as np

    seed_edges = np.asarray(seed_pos, np.int64)
    return run_peer(python, Path(__file__).with_name("dgl_link_peer.py"),
                    lambda path: save_graph(graph, path, seed_edges=seed_edges), fanouts,
                    threads=args.threads, batch_size=args.batch_size, replace=args.replace,
                    repeats=args.peer_repeats, before_each=before_each,
                    options=("--negatives", args.negatives)
                    + (("--no-exclude",) if args.no_exclude else ()))


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from ._launch import start_run, write_json

    # start_run sets torch's threads too: idle intra-op threads spin
    fanouts, threads, graph, res = start_run(
        "link", args, DGL_TARGET, negatives=args.negatives, reject_known=args.reject,
        exclude_seed_edges=not args.no_exclude)
    n_seed = min(args.batches * args.batch_size, graph.num_edges)
    seed_pos = np.random.default_rng([args.seed, 0x11CC]).choice(graph.num_edges, n_seed,
                                                                 replace=False)
    print(f"threads {threads}, fanouts {fanouts}, {args.batches} batches of {args.batch_size} "
          f"seed edges, {args.negatives} negative(s) each, exclude seed edges "
          f"{not args.no_exclude}, reject known {args.reject}")
    lb = LinkBench(graph, seed_pos, fanouts, args)
    peer = None if args.no_peers else peer_python(args.peers_venv)
    res["dgl"] = {"available": False, "error": "skipped (--no-peers)" if args.no_peers
                  else "no peer venv found"}
    if peer is not None:
        print("our repeats interleaved with DGL runs (each loads the graph) ...", flush=True)
        res["dgl"] = bench_dgl_link(graph, seed_pos, peer, args, fanouts, lb.run_once)
    while len(lb.seconds) < args.repeats:
        lb.run_once()
    m = res["ours"] = lb.result()
    print(f"\nlink minibatches, {m['batches']} batches, median of {len(m['seconds'])}")
    print(f"  mnmg-sampler          {_fmt(m['per_s'])} sampled edges, "
          f"{m['batches_per_s']:,.2f} batches/s, {m['edges_per_batch']:,.0f} edges/batch")
    d = res["dgl"]
    if d.get("available"):
        res["vs_dgl"] = m["per_s"] / d["sampled_edges_per_s"]
        res["vs_dgl_batches"] = m["batches_per_s"] / d["batches_per_s"]
        res["vs_dgl_best"] = m["best_per_s"] / d["best_per_s"]
        print(f"  DGL {d['version']} link     {_fmt(d['sampled_edges_per_s'])} sampled edges, "
              f"{d['batches_per_s']:,.2f} batches/s, {d['edges_per_batch']:,.0f} edges/batch")
        print(f"  mnmg-sampler / DGL    {_verdict(res['vs_dgl'], DGL_TARGET)} in sampled "
              f"edges/s; {res['vs_dgl_batches']:.2f}x in batches/s; best runs "
              f"{res['vs_dgl_best']:.2f}x")
    else:
        res["vs_dgl"] = None
        print(f"  DGL peer: not available [{d['error']}]")
    write_json(args.json, res)
    return 0
