"""DistLinkNeighborLoader on a renumbered (hashed-id) graph, on real gloo ranks: seed edges in
the input's own ids are translated as ``input_nodes`` is, ``n_id`` holds the input's ids, and
every other field is the batch of the graph in its renumbered ids. An id that is not a node is
a typed error; no seed edge gives ``len(loader) == 0`` and no batch."""

from __future__ import annotations

import numpy as np
import pytest

from mnmg_sampler.graph.datasets import load_graph
from mnmg_sampler.graph.partition import partition

from .harness import run_ranks
from .test_link_loader import CASES, SEED, link_graph, reference, same, seed_edges

WORLD = 2


def _hashed_input(tmp_path):
    """link_graph's edges with every node id replaced by a random 63-bit id (ascending, so
    the renumbering keeps the node order), saved as an .npz and loaded (renumbered)."""
    g = link_graph()
    ids = np.sort(np.random.default_rng(7).choice(2**62, g.num_nodes, replace=False)) + 2**40
    dst = np.repeat(np.arange(g.num_nodes), g.degrees())
    np.savez(tmp_path / "hashed.npz", src=ids[g.indices], dst=ids[dst])
    h = load_graph(str(tmp_path / "hashed.npz"))
    assert h.node_ids is not None  # renumbered: the ids are far above the node count
    return g, ids, h


def _run(rank, world, d, eli, opts):
    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.errors import SamplingInputError
    from mnmg_sampler.graph.partition_io import load_partition
    from mnmg_sampler.loaders.link import DistLinkNeighborLoader

    part = load_partition(d, rank, world)
    svc = SamplingService(part, seed=SEED)
    try:
        loader = DistLinkNeighborLoader(svc, [3, 2], eli, batch_size=16, part=part, seed=SEED,
                                        **opts)
        out = [{k: (v.numpy() if hasattr(v, "numpy") else v) for k, v in vars(b).items()
                if k != "meta"} for b in loader]
        bad = eli.copy()
        bad[1, 3] = 12345  # not an id of the graph (nor a renumbered one)
        try:
            DistLinkNeighborLoader(svc, [3, 2], bad, batch_size=16)
            refused = ""
        except SamplingInputError as e:
            refused = str(e)
        empty = DistLinkNeighborLoader(svc, [3, 2], np.zeros((2, 0), np.int64), batch_size=16)
        return out, refused, len(empty), len(list(empty))
    finally:
        svc.shutdown()


@pytest.mark.parametrize("case", ["triplet_reject_exclude"])
def test_link_loader_on_a_renumbered_graph(tmp_path, case):
    g, ids, h = _hashed_input(tmp_path)
    used = h.node_ids  # the input's ids of the renumbered nodes 0..N'-1
    eli_input = ids[seed_edges(g, 96)]  # seed edges as the user has them: hashed ids
    eli_new = np.searchsorted(used, eli_input)
    opts = CASES[case]
    d = str(partition(h, WORLD, "random", tmp_path / "p", seed=3))
    res = run_ranks(_run, WORLD, d, eli_input, opts, timeout=240)
    mine = [res[gi % WORLD][0][gi // WORLD] for gi in range(sum(len(r[0]) for r in res))]
    want = reference(h, eli_new, None, opts, 0, WORLD)  # sampled in the renumbered ids
    assert len(mine) == len(want) == 6
    for a, b in zip(mine, want, strict=True):
        assert np.array_equal(a["n_id"], used[b["n_id"]])  # the input's 63-bit ids
        same({**a, "n_id": None}, {**b, "n_id": None})
        P = a["input_id"].size
        assert np.array_equal(a["n_id"][a["edge_label_index"][:, :P]],
                              eli_input[:, a["input_id"]])
    assert np.array_equal(np.sort(np.concatenate([b["input_id"] for b in mine])), np.arange(96))
    for _, refused, n_empty, got_empty in res:
        assert "edge_label_index holds id 12345" in refused and "Fix:" in refused
        assert n_empty == 0 and got_empty == 0  # no seed edge: no batch, and len says so
