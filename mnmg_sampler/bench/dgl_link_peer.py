"""Times DGL's link-prediction sampler (``as_edge_prediction_sampler``) on given seed edges.

A standalone script run with a peer venv's Python by ``mnmg-sampler bench link``; it does not
import mnmg_sampler. Input: an .npz with int64 ``src``, ``dst`` (edge ``i`` of DGL's graph is
``src[i] -> dst[i]``), ``num_nodes`` and ``seed_edges`` (edge ids, consecutive batches of
``--batch-size``). DGL's ``NeighborSampler`` with ``exclude="self"`` and a
``negative_sampler.Uniform(k)``: the setting of its link-prediction examples. Prints one JSON
line with sampled edges (of the message-passing blocks) per second and batches per second.
"""

import json

try:  # run as a script (the peer venv's Python): the sibling file
    from dgl_import import peer_parser, start_dgl, timed_batches
except ImportError:  # imported from the package (tests)
    from .dgl_import import peer_parser, start_dgl, timed_batches


def main() -> None:
    p = peer_parser("DGL link-prediction sampler, timed", ".npz written by bench link")
    p.add_argument("--negatives", type=int, default=1)
    p.add_argument("--no-exclude", action="store_true")
    a = p.parse_args()

    import numpy as np

    dgl, torch = start_dgl(a.threads)
    d = np.load(a.graph, allow_pickle=False)
    src, dst = torch.from_numpy(d["src"]).long(), torch.from_numpy(d["dst"]).long()
    g = dgl.graph((src, dst), num_nodes=int(d["num_nodes"])).formats(["coo", "csc"])
    fanouts = [int(x) for x in a.fanouts.split(",")][::-1]  # DGL: input layer first
    sampler = dgl.dataloading.as_edge_prediction_sampler(
        dgl.dataloading.NeighborSampler(fanouts, replace=a.replace),
        exclude=None if a.no_exclude else "self",
        negative_sampler=dgl.dataloading.negative_sampler.Uniform(a.negatives))

    def sample(b):
        inp, _pair, _neg, blocks = sampler.sample(g, b)
        return sum(blk.num_edges() for blk in blocks), int(inp.numel())

    nb, dt, edges, nodes = timed_batches(sample, torch.from_numpy(d["seed_edges"]).long(),
                                         a.batch_size, a.warmup)
    print(json.dumps({
        "peer": "dgl", "version": dgl.__version__, "threads": a.threads,
        "batches": nb, "batch_size": a.batch_size, "negatives": a.negatives,
        "exclude": "none" if a.no_exclude else "self", "seconds": dt,
        "batches_per_s": nb / dt, "sampled_edges_per_s": edges / dt,
        "edges_per_batch": edges / nb, "nodes_per_batch": nodes / nb,
    }))


if __name__ == "__main__":
    main()
