"""Times DGL's heterograph neighbor sampler (``NeighborSampler`` with a fanout per edge type).

A standalone script run with a peer venv's Python by ``mnmg-sampler bench single --hetero``; it
does not import mnmg_sampler. Input: an .npz (no pickles) with

- ``node_types`` (str ``[T]``) and ``num_nodes`` (int64 ``[T]``);
- ``rel_src``, ``rel_name``, ``rel_dst`` (str ``[R]``): the canonical edge types;
- ``src_<r>``, ``dst_<r>`` (int64, per-type ids): the edges of relation ``r``, edge ``i`` of
  that DGL edge type being ``src_<r>[i] -> dst_<r>[i]``;
- ``input_type`` (str) and ``seeds`` (int64 per-type ids of that type, consecutive batches of
  ``--batch-size``: the seeds our sampler gets).

Every relation gets the fanouts of ``--fanouts`` (PyG's hop order: hop 1 first). DGL samples
in-edges of every destination node of each layer (seeds are re-sampled at each hop), so its
edges per batch differ from ours; sampled edges per second is the comparable number. Prints one
JSON line.
"""

import argparse
import json
import time

try:  # run as a script (the peer venv's Python): the sibling file
    from dgl_import import import_dgl
except ImportError:  # imported from the package (tests)
    from .dgl_import import import_dgl


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="DGL heterograph NeighborSampler, timed")
    p.add_argument("--graph", required=True, help=".npz written by bench single --hetero")
    p.add_argument("--fanouts", default="15,10,5", help="per relation, PyG order: hop 1 first")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--batches", type=int, default=30, help="timed batches (at most the seeds')")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--replace", action="store_true")
    a = p.parse_args(argv)
    try:
        a.fanouts = [int(x) for x in a.fanouts.split(",")]
    except ValueError:
        p.error(f"--fanouts {a.fanouts!r}: integers separated by commas")
    if a.batch_size <= 0 or a.batches <= 0 or a.warmup < 0 or a.threads <= 0:
        p.error("--batch-size, --batches and --threads must be positive, --warmup >= 0")
    return a


def load(path: str):
    """``(num_nodes per type, {canonical etype: (src, dst)}, input type, seeds)`` of the .npz."""
    import numpy as np

    d = np.load(path, allow_pickle=False)
    num_nodes = {str(t): int(n) for t, n in zip(d["node_types"], d["num_nodes"], strict=True)}
    rels = {}
    for r, et in enumerate(zip(d["rel_src"], d["rel_name"], d["rel_dst"], strict=True)):
        rels[tuple(str(x) for x in et)] = (d[f"src_{r}"], d[f"dst_{r}"])
    return num_nodes, rels, str(d["input_type"]), d["seeds"]


def main(argv=None) -> None:
    a = parse_args(argv)
    import torch

    dgl = import_dgl()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    num_nodes, rels, input_type, seeds = load(a.graph)
    g = dgl.heterograph({et: (torch.from_numpy(s).long(), torch.from_numpy(t).long())
                         for et, (s, t) in rels.items()}, num_nodes_dict=num_nodes)
    g = g.formats(["csc"])
    # DGL lists layers from the input layer to the output layer: reverse PyG's hop order
    fanouts = [{et: k for et in g.canonical_etypes} for k in a.fanouts[::-1]]
    sampler = dgl.dataloading.NeighborSampler(fanouts, replace=a.replace)
    seeds = torch.from_numpy(seeds).long()
    batches = [seeds[i:i + a.batch_size] for i in range(0, seeds.numel(), a.batch_size)]
    batches = batches[:a.batches]
    for b in batches[:a.warmup]:
        sampler.sample_blocks(g, {input_type: b})
    edges = nodes = 0
    t0 = time.perf_counter()
    for b in batches:
        inp, _out, blocks = sampler.sample_blocks(g, {input_type: b})
        edges += sum(blk.num_edges() for blk in blocks)  # all edge types of each block
        nodes += sum(int(v.numel()) for v in inp.values())
    dt = time.perf_counter() - t0
    n = max(len(batches), 1)
    print(json.dumps({
        "peer": "dgl", "version": dgl.__version__, "threads": a.threads,
        "relations": len(g.canonical_etypes), "input_type": input_type,
        "fanouts_pyg_order": a.fanouts, "batches": len(batches), "batch_size": a.batch_size,
        "replace": a.replace, "seconds": dt, "batches_per_s": len(batches) / dt,
        "sampled_edges_per_s": edges / dt, "edges_per_batch": edges / n,
        "nodes_per_batch": nodes / n,
    }))


if __name__ == "__main__":
    main()
