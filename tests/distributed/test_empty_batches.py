"""Empty minibatches next to full ones, with feature widths that are not a multiple of 8 bytes.

A round may merge a request with no seeds (rank 0) with ordinary requests (rank 1); the label
columns of the feature rows are viewed as int64, which must hold for zero rows too.
"""

from __future__ import annotations

import numpy as np

from mnmg_sampler.graph.csr import CSRGraph
from mnmg_sampler.graph.partition import partition

from .harness import run_ranks


def _graph(width: int) -> CSRGraph:
    rng = np.random.default_rng(width)
    n = 120
    src, dst = rng.integers(0, n, 900), rng.integers(0, n, 900)
    x = rng.standard_normal((n, width)).astype(np.float32)
    y = rng.integers(0, 5, n).astype(np.int64)
    return CSRGraph.from_edges(src, dst, n, name="odd", x=x, y=y)


def _run(rank, world, d, width):
    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.graph.partition_io import load_partition
    from mnmg_sampler.sampling.sampler import SampleRequest

    svc = SamplingService(load_partition(d, rank, world), seed=5)
    try:
        seeds = np.empty(0, np.int64) if rank == 0 else np.arange(rank, 40, 7)
        futs = [svc.submit(SampleRequest(seeds, [3, 2], key=rank)),
                svc.submit(SampleRequest(np.empty(0, np.int64), [2], key=9))]
        out = []
        for f in futs:
            b = svc.result(f)
            out.append((b.n_id.numpy(), b.x.numpy(), b.y.numpy()))
        return out
    finally:
        svc.shutdown()


WIDTHS = [1, 3, 5]


def _run_each(rank, world, dirs):
    """``_run`` on each width's partitions in turn, on the same ranks (one spawn for all)."""
    return [_run(rank, world, d, w) for d, w in zip(dirs, WIDTHS, strict=True)]


def test_empty_batches_with_odd_feature_widths(tmp_path):
    graphs = [_graph(w) for w in WIDTHS]
    dirs = [str(partition(g, 2, "random", tmp_path / f"p{w}", seed=1))
            for g, w in zip(graphs, WIDTHS, strict=True)]
    results = run_ranks(_run_each, 2, dirs, timeout=240)
    for i, (g, width) in enumerate(zip(graphs, WIDTHS, strict=True)):
        for rank, by_width in enumerate(results):
            out = by_width[i]
            for n_id, x, y in out:
                assert x.shape == (n_id.size, width) and y.shape == (n_id.size,)
                assert np.array_equal(x, g.x[n_id]) and np.array_equal(y, g.y[n_id])
            assert out[1][0].size == 0  # the empty request stays empty
            assert (out[0][0].size == 0) == (rank == 0)
