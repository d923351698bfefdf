"""The fused gloo exchange (opt-in: one point-to-point message per peer, counts inside)
delivers exactly what the counts-then-payload all-to-alls deliver: any row shape and dtype, empty
pairs, messages longer than any before (their tail travels as a second message), and the max
agreement."""

from __future__ import annotations

import numpy as np

from mnmg_sampler.distributed.collective import EXCHANGE_ENV

from .harness import run_ranks


def _rows_for(src: int, dst: int, size: int, cols: int, dtype) -> np.ndarray:
    base = 1_000_000 * src + 1_000 * dst
    return (base + np.arange(size * cols)).reshape(size, cols).astype(dtype)


def _exchange(rank, world, plan):
    import torch

    from mnmg_sampler.distributed.collective import Exchanger

    fused, coll = Exchanger(None), Exchanger(None)
    coll.fused = False  # the path NCCL takes, on the same gloo group
    out = []
    for sizes, cols, dtype in plan:
        send = sizes[rank]
        pay = np.concatenate([_rows_for(rank, d, send[d], cols, dtype) for d in range(world)])
        counts = torch.tensor(send, dtype=torch.int64)
        got = []
        for ex in (fused, coll):
            rows, rc = ex.exchange(torch.from_numpy(pay.copy()), counts.clone(), "t")
            # and back again, with counts both sides know
            back = ex.payload(rows, rc.tolist(), send, "t")
            got.append((rows.numpy().copy(), rc.tolist(), back.numpy().copy()))
        out.append(got)
    flags = fused.agree_max([rank, 7 - rank, 0]), coll.agree_max([rank, 7 - rank, 0])
    return fused.fused, coll.fused, out, flags, fused.bytes["t"], fused.calls


def test_fused_exchange_equals_all_to_all(tmp_path):
    world = 3
    rng = np.random.default_rng(5)
    plan = []
    for step in range(6):
        # sizes[src][dst] rows; some pairs empty; step 3 sends 2 MB to one peer (over the
        # 64 KiB starting capacity: a tail message), step 4 the same again (capacity grown)
        sizes = rng.integers(0, 50, (world, world))
        sizes[rng.random((world, world)) < 0.3] = 0
        if step in (3, 4):
            sizes[1][2] = 200_000
        cols, dtype = [(1, np.int32), (3, np.float32), (2, np.int64), (1, np.uint8),
                       (1, np.int32), (4, np.float32)][step]
        plan.append((sizes.tolist(), cols, dtype))
    res = run_ranks(_exchange, world, plan, timeout=180, env={EXCHANGE_ENV: "fused"})
    for rank, (is_fused, coll_fused, out, flags, nbytes, calls) in enumerate(res):
        assert is_fused and not coll_fused
        assert flags == ([2, 7, 0], [2, 7, 0])
        for (sizes, cols, dtype), (f, c) in zip(plan, out, strict=True):
            want = np.concatenate([_rows_for(s, rank, sizes[s][rank], cols, dtype)
                                   for s in range(world)])
            mine = np.concatenate([_rows_for(rank, d, sizes[rank][d], cols, dtype)
                                   for d in range(world)])
            for rows, rc, back in (f, c):
                assert rows.dtype == dtype and rows.shape == want.shape
                assert np.array_equal(rows, want)
                assert rc == [sizes[s][rank] for s in range(world)]
                assert np.array_equal(back, mine)
        # bytes to others: every row sent away, every row sent back, plus one 8-byte count
        # per peer and fused exchange; to self: its own rows, counted as handed over
        row_b = [cols * np.dtype(dt).itemsize for _s, cols, dt in plan]
        away = sum(sum(sz[rank][d] + sz[d][rank] for d in range(world) if d != rank) * rb
                   for (sz, _c, _d), rb in zip(plan, row_b, strict=True))
        here = sum(sz[rank][rank] * rb for (sz, _c, _d), rb in zip(plan, row_b, strict=True))
        assert nbytes == [2 * here, away + 8 * (world - 1) * len(plan)]
        assert calls == 2 * len(plan) + 1
