"""Bit-packed ids on real gloo ranks: ``Exchanger.payload`` and ``Exchanger.bounded`` deliver
exactly the words sent (int32 and int64, empty blocks, full-width and negative words, blocks
shorter than their bound; packed to other hosts' ranks, raw to this host's), the counters count
the bytes that travel (encoded ones to other hosts), and sampling between hosts gives the one
process's batches with fewer id bytes than raw words would cost."""

from __future__ import annotations

import numpy as np

from mnmg_sampler.graph.partition import partition
from mnmg_sampler.graph.partition_io import load_partition
from mnmg_sampler.ops import bitpack
from mnmg_sampler.ops.rng import request_key
from mnmg_sampler.sampling.sampler import MultiHopSampler, SampleRequest, local_hop_fn

from .common import FANOUTS, SEED, as_arrays, assert_same, small_graph
from .harness import run_ranks

SIZES = (0, 1, bitpack.MINI, 3 * bitpack.MINI + 5)


def _block(src: int, dst: int, case: int, dtype) -> np.ndarray:
    """What rank ``src`` sends rank ``dst`` in ``case``: every receiver can rebuild it."""
    rng = np.random.default_rng([src, dst, case])
    n = SIZES[(src + 2 * dst + case) % len(SIZES)]
    info = np.iinfo(dtype)
    kind = case % 3
    if kind == 0:  # small ids
        v = rng.integers(0, 1000, n, dtype=dtype)
    elif kind == 1:  # full width, negative words included
        v = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    else:  # narrow mini-blocks beside one full-width word
        v = rng.integers(0, 2, n, dtype=dtype)
        if n:
            v[n // 2] = info.min
    return v


def _exchanges(rank, world, far):
    import torch

    from mnmg_sampler.distributed.collective import Exchanger

    ex = Exchanger()
    ex.far = far[rank]
    me = rank
    expect = {"pay": [0, 0], "bnd": [0, 0]}
    cross = {"pay": 0, "bnd": 0}
    for case in range(6):
        for dtype, tdt in ((np.int32, torch.int32), (np.int64, torch.int64)):
            isz = np.dtype(dtype).itemsize
            blocks = [_block(me, r, case, dtype) for r in range(world)]
            counts = [b.size for b in blocks]
            got_from = [_block(r, me, case, dtype) for r in range(world)]
            # payload: counts known on both sides
            out = ex.payload(torch.from_numpy(np.concatenate(blocks)), counts,
                             [b.size for b in got_from], "pay")
            assert out.dtype == tdt
            assert np.array_equal(out.numpy(), np.concatenate(got_from))
            # bounded: every block below a bound of its size + 7 (+0 to self)
            sb = [c + 7 if r != me else c for r, c in enumerate(counts)]
            rb = [b.size + 7 if r != me else b.size for r, b in enumerate(got_from)]
            out = ex.bounded(torch.from_numpy(np.concatenate(blocks)), counts, sb, rb,
                             "bnd").numpy()
            offs = np.concatenate(([0], np.cumsum(rb)))
            for r in range(world):
                assert np.array_equal(out[offs[r]:offs[r] + got_from[r].size], got_from[r])
            # what travels: blocks to other hosts encoded (a block of bound 0: nothing),
            # raw words to this host's ranks
            for tag, bounds in (("pay", counts), ("bnd", sb)):
                expect[tag][0] += counts[me] * isz
                for r in range(world):
                    if r == me or bounds[r] == 0:
                        continue
                    if not far[rank][r]:
                        expect[tag][1] += counts[r] * isz
                        continue
                    _, size = bitpack.encode_blocks(blocks[r], [counts[r]], [True])
                    expect[tag][1] += int(size[0])
                    cross[tag] += int(size[0])
    return ({t: ex.bytes[t] for t in ("pay", "bnd")}, expect,
            {t: ex.cross_bytes.get(t, 0) for t in ("pay", "bnd")}, cross)


def test_exchanges_deliver_the_words_and_count_encoded_bytes():
    hosts = [0, 0, 1]
    far = [[hosts[p] != hosts[r] for p in range(3)] for r in range(3)]
    for got, expect, cross_got, cross in run_ranks(_exchanges, 3, far, timeout=180):
        assert got == expect
        assert cross_got == cross and cross["pay"] > 0


def _sample(rank, world, d, packed):
    import os

    from mnmg_sampler.distributed import collective
    from mnmg_sampler.distributed.sampler import DistSampler

    os.environ["MNMG_HOST_ID"] = f"host-{rank}"  # 2 hosts x 1 rank: the wire path
    if not packed:  # the raw words, for comparison
        collective.Exchanger._pack_peers = lambda self: np.zeros(self.world_size, bool)
    sent = []
    real = bitpack.encode_blocks

    def spy(*a, **k):
        buf, sizes = real(*a, **k)
        sent.append(int(sizes.sum()))
        return buf, sizes

    collective.bitpack.encode_blocks = spy
    part = load_partition(d, rank, world)
    s = DistSampler(part, seed=SEED, shared_topology="auto", host_memory=0)
    counted = []  # raw count words (exchanges of unknown sizes send them first)
    real_counts = s.ex.counts

    def counts(t, tag="counts"):
        counted.append(8 * (world - 1))
        return real_counts(t, tag)

    s.ex.counts = counts
    b0 = s.ex.remote_bytes
    cross0 = dict(s.ex.cross_bytes)
    sent.clear()
    rng = np.random.default_rng([rank, 5])
    got = []
    for rnd in range(3):
        reqs = [SampleRequest(rng.choice(int(part.num_nodes), 20, replace=False), FANOUTS,
                              request_key(SEED, rnd, 10 * rank + j)) for j in range(2)]
        for r, b in zip(reqs, s.sample(reqs), strict=True):
            got.append(((r.seeds, r.key), as_arrays(b)))
    cross = {k: v - cross0.get(k, 0) for k, v in s.ex.cross_bytes.items()}
    return got, s.ex.remote_bytes - b0 - sum(counted), sum(sent), cross, sum(counted)


def test_wire_batches_equal_one_process_with_fewer_bytes(tmp_path):
    g = small_graph()
    d = str(partition(g, 2, "random", tmp_path / "p", seed=1))
    ref = MultiHopSampler(local_hop_fn(g, SEED), g.num_nodes)
    on = run_ranks(_sample, 2, d, True, timeout=240)
    off = run_ranks(_sample, 2, d, False, timeout=240)
    for (got, remote, sent, cross, counts_b), (got_off, remote_off, sent_off, *_) in zip(
            on, off, strict=True):
        for ((seeds, key), mb), (_, mb_off) in zip(got, got_off, strict=True):
            want = as_arrays(ref.sample([SampleRequest(seeds, FANOUTS, key)])[0])
            assert_same(mb, want)
            assert_same(mb_off, want)
        # every byte counted to the other rank (the other host) is one the encoder produced
        assert remote > 0 and remote == sent and sent_off == 0
        assert sum(cross.values()) == remote + counts_b
        # ids of 240 nodes need 8 bits, counts <= 4 need 3: well under 4 bytes a word
        assert remote < 0.6 * remote_off
