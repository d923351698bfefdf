"""``mnmg-sampler sample``'s seed path holds no num_nodes-sized array on any rank (issue 23): the
nodes with a neighbor are a bitmap OR-ed across the parts (``nonisolated_bits_everywhere``) and
every node a rule, both read batch by batch by ``batch_seeds`` (the loaders' keyed shuffle).
Under an address-space limit that no int64 array of num_nodes entries fits in, two ranks still
read every seed once, in the order one process reads them."""

from __future__ import annotations

import numpy as np

from mnmg_sampler.commands.sample import batch_seeds
from mnmg_sampler.graph.csr import CSRGraph
from mnmg_sampler.graph.datasets import nonisolated_nodes
from mnmg_sampler.graph.partition import partition
from mnmg_sampler.loaders.seeds import AllNodes, NodeBits

from .harness import run_ranks
from .test_seed_memory import LIMIT, N, _cap

B = 1 << 13
SEED = 9


def _graph() -> CSRGraph:
    """7/8 of the nodes have one in-neighbor: an id array of them nearly num_nodes long."""
    rng = np.random.default_rng(3)
    dst = rng.permutation(N)[:N - N // 8]
    return CSRGraph.from_edges(rng.integers(0, N, dst.size), dst, N, name="mostly-linked")


def _read(seeds, rank: int, world: int) -> dict[int, np.ndarray]:
    nb = -(-len(seeds) // B)
    return {i: batch_seeds(seeds, i, B, SEED) for i in range(rank, nb, world)}


def _digest(batches: dict[int, np.ndarray]) -> dict[int, tuple[int, int, str]]:
    import hashlib

    return {i: (int(b.size), int(b.sum()), hashlib.sha256(b.tobytes()).hexdigest())
            for i, b in batches.items()}


def _seed_path(rank, world, d):
    import ctypes

    from mnmg_sampler.distributed.offline import nonisolated_bits_everywhere
    from mnmg_sampler.graph.partition_io import load_partition

    ctypes.CDLL(None).mallopt(-3, 1 << 17)  # M_MMAP_THRESHOLD: big blocks go back on free
    part = load_partition(d, rank, world)
    _read(NodeBits(nonisolated_bits_everywhere(part), N), rank, world)  # warm up (imports)
    bites: list[bool] = []
    _cap(int(LIMIT * 8 * N), bites)  # from here: less than one int64 array of num_nodes
    linked = NodeBits(nonisolated_bits_everywhere(part), N)
    out = {"linked": _digest(_read(linked, rank, world)),
           "all": _digest(_read(AllNodes(N), rank, world))}
    return out, len(linked), bites


def test_sample_seed_path_without_num_nodes_arrays(tmp_path):
    g = _graph()
    linked = nonisolated_nodes(g)
    assert linked.size == N - N // 8
    one = {"linked": _read(NodeBits.nonisolated(g), 0, 1), "all": _read(AllNodes(N), 0, 1)}
    for name, ids in (("linked", linked), ("all", np.arange(N))):  # every seed once, shuffled
        got = np.concatenate([one[name][i] for i in sorted(one[name])])
        assert np.array_equal(np.sort(got), ids) and not np.array_equal(got, ids)
    d = str(partition(g, 2, "random", tmp_path / "p", seed=1))
    res = run_ranks(_seed_path, 2, d, timeout=300, env={"MNMG_SAMPLER_MALLOC": "default"})
    for name in ("linked", "all"):
        merged = {i: b for out, _, _ in res for i, b in out[name].items()}
        assert merged == _digest(one[name])  # the batches one process reads, bit for bit
    for _, n_linked, bites in res:
        assert n_linked == linked.size and bites == [True]  # the cap refuses a num_nodes array
