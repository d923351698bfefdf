"""Times DGL's link-prediction sampler (``as_edge_prediction_sampler``) on given seed edges.

A standalone script run with a peer venv's Python by ``mnmg-sampler bench link``; it does not
import mnmg_sampler. Input: an .npz with int64 ``src``, ``dst`` (edge ``i`` of DGL's graph is
``src[i] -> dst[i]``), ``num_nodes`` and ``seed_edges`` (edge ids, consecutive batches of
``--batch-size``). DGL's ``NeighborSampler`` with ``exclude="self"`` and a
``negative_sampler.Uniform(k)``: the setting of its link-prediction examples. Prints one JSON
line with sampled edges (of the message-passing blocks) per second and batches per second.
"""

import argparse
import json
import time

try:  # run as a script (the peer venv's Python): the sibling file
    from dgl_import import import_dgl
except ImportError:  # imported from the package (tests)
    from .dgl_import import import_dgl


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--graph", required=True)
    p.add_argument("--fanouts", default="15,10,5", help="PyG order: hop 1 first")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--negatives", type=int, default=1)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--replace", action="store_true")
    p.add_argument("--no-exclude", action="store_true")
    a = p.parse_args()

    import numpy as np
    import torch

    dgl = import_dgl()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    d = np.load(a.graph, allow_pickle=False)
    src, dst = torch.from_numpy(d["src"]).long(), torch.from_numpy(d["dst"]).long()
    g = dgl.graph((src, dst), num_nodes=int(d["num_nodes"])).formats(["coo", "csc"])
    seeds = torch.from_numpy(d["seed_edges"]).long()
    batches = [seeds[i:i + a.batch_size] for i in range(0, seeds.numel(), a.batch_size)]
    fanouts = [int(x) for x in a.fanouts.split(",")][::-1]  # DGL: input layer first
    sampler = dgl.dataloading.as_edge_prediction_sampler(
        dgl.dataloading.NeighborSampler(fanouts, replace=a.replace),
        exclude=None if a.no_exclude else "self",
        negative_sampler=dgl.dataloading.negative_sampler.Uniform(a.negatives))
    for b in batches[:a.warmup]:
        sampler.sample(g, b)
    edges = nodes = 0
    t0 = time.perf_counter()
    for b in batches:
        inp, _pair, _neg, blocks = sampler.sample(g, b)
        edges += sum(blk.num_edges() for blk in blocks)
        nodes += int(inp.numel())
    dt = time.perf_counter() - t0
    print(json.dumps({
        "peer": "dgl", "version": dgl.__version__, "threads": a.threads,
        "batches": len(batches), "batch_size": a.batch_size, "negatives": a.negatives,
        "exclude": "none" if a.no_exclude else "self", "seconds": dt,
        "batches_per_s": len(batches) / dt, "sampled_edges_per_s": edges / dt,
        "edges_per_batch": edges / len(batches), "nodes_per_batch": nodes / len(batches),
    }))


if __name__ == "__main__":
    main()
