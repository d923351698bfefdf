"""Times DGL's heterograph neighbor sampler (``NeighborSampler`` with a fanout per edge type).

A standalone script run with a peer venv's Python by ``mnmg-sampler bench single --hetero``; it
does not import mnmg_sampler. Input: an .npz (no pickles) with

- ``node_types`` (str ``[T]``) and ``num_nodes`` (int64 ``[T]``);
- ``rel_src``, ``rel_name``, ``rel_dst`` (str ``[R]``): the canonical edge types;
- ``src_<r>``, ``dst_<r>`` (int64, per-type ids): edge ``i`` of relation ``r`` is
  ``src_<r>[i] -> dst_<r>[i]``;
- ``input_type`` (str) and ``seeds`` (int64 per-type ids, consecutive batches of
  ``--batch-size``: our sampler's seeds).

Every relation gets the fanouts of ``--fanouts`` (hop 1 first). DGL re-samples every layer's
destination nodes, so its edges per batch differ from ours: compare sampled edges per second.
Prints one JSON line.
"""

import argparse
import json

try:  # run as a script (the peer venv's Python): the sibling file
    from dgl_import import peer_parser, start_dgl, timed_batches
except ImportError:  # imported from the package (tests)
    from .dgl_import import peer_parser, start_dgl, timed_batches


def parse_args(argv=None) -> argparse.Namespace:
    p = peer_parser("DGL heterograph NeighborSampler, timed",
                    ".npz written by bench single --hetero")
    p.add_argument("--batches", type=int, default=30, help="timed batches (at most the seeds')")
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
    dgl, torch = start_dgl(a.threads)
    num_nodes, rels, input_type, seeds = load(a.graph)
    g = dgl.heterograph({et: (torch.from_numpy(s).long(), torch.from_numpy(t).long())
                         for et, (s, t) in rels.items()}, num_nodes_dict=num_nodes)
    g = g.formats(["csc"])
    # DGL lists layers from the input layer to the output layer: reverse PyG's hop order
    fanouts = [{et: k for et in g.canonical_etypes} for k in a.fanouts[::-1]]
    sampler = dgl.dataloading.NeighborSampler(fanouts, replace=a.replace)

    def sample(b):
        inp, _out, blocks = sampler.sample_blocks(g, {input_type: b})
        # all edge types of each block
        return sum(blk.num_edges() for blk in blocks), sum(int(v.numel()) for v in inp.values())

    nb, dt, edges, nodes = timed_batches(sample, torch.from_numpy(seeds).long(), a.batch_size,
                                         a.warmup, a.batches)
    n = max(nb, 1)
    print(json.dumps({
        "peer": "dgl", "version": dgl.__version__, "threads": a.threads,
        "relations": len(g.canonical_etypes), "input_type": input_type,
        "fanouts_pyg_order": a.fanouts, "batches": nb, "batch_size": a.batch_size,
        "replace": a.replace, "seconds": dt, "batches_per_s": nb / dt,
        "sampled_edges_per_s": edges / dt, "edges_per_batch": edges / n,
        "nodes_per_batch": nodes / n,
    }))


if __name__ == "__main__":
    main()
