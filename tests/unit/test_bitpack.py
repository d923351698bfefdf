"""Bit-packed words (ops/bitpack.py): exact round trips for every width and word size, empty
and partial mini-blocks, raw and skipped blocks beside packed ones, sizes within the bound the
receiver computes, the format itself on a hand-made example, and malformed blocks refused."""

from __future__ import annotations

import numpy as np
import pytest

from mnmg_sampler.ops import bitpack as bp


def _one(vals: np.ndarray) -> tuple[np.ndarray, int]:
    buf, sizes = bp.encode_blocks(vals, np.array([vals.size]), np.array([True]))
    assert buf.size == sizes[0] <= bp.encoded_bound(vals.size, vals.itemsize)
    return buf, int(sizes[0])


def _round_trip(vals: np.ndarray) -> np.ndarray:
    buf, _ = _one(vals)
    out = np.full(vals.size + 3, 7, vals.dtype)  # the words around the block stay untouched
    assert bp.decode_block(buf, out, 1, vals.size) == vals.size
    assert out[0] == 7 and (out[vals.size + 1:] == 7).all()
    return out[1:vals.size + 1]


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32, np.uint64])
def test_every_width_round_trips(dtype):
    bits = np.dtype(dtype).itemsize * 8
    rng = np.random.default_rng(bits)
    for w in range(bits + 1):
        top = (1 << w) - 1  # the widest word of width w
        for n in (1, 5, bp.MINI - 1, bp.MINI, bp.MINI + 1, 3 * bp.MINI + 17):
            raw = rng.integers(0, 1 << 62, n, dtype=np.uint64) & np.uint64(top)
            raw[::bp.MINI] = top  # every mini-block at width w
            vals = raw.astype(np.uint64).view(np.int64).astype(dtype) if bits == 64 \
                else raw.astype(np.uint32).view(np.int32).astype(dtype)
            got = _round_trip(vals)
            assert got.dtype == vals.dtype and np.array_equal(got, vals), (w, n)
            # w bits per word, a byte per mini-block (rounded up to 4), each mini-block
            # ending on a 32-bit word
            full, tail = divmod(n, bp.MINI)
            widths = -(-(full + (tail > 0)) // 4) * 4
            assert _one(vals)[1] == (bp.HEADER + widths + full * bp.MINI * w // 8
                                     + 4 * -(-tail * w // 32))


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_adversarial_words(dtype):
    info = np.iinfo(dtype)
    rng = np.random.default_rng(3)
    cases = [
        np.array([], dtype),
        np.array([0], dtype),
        np.array([-1], dtype),
        np.array([info.min, info.max, 0, -1, 1], dtype),
        np.zeros(1000, dtype),  # width 0: the block is its header and one byte per mini-block
        rng.integers(info.min, info.max, 1000, dtype=dtype, endpoint=True),
        np.concatenate([np.zeros(bp.MINI, dtype), [info.min], np.arange(300, dtype=dtype)]),
    ]
    for vals in cases:
        assert np.array_equal(_round_trip(vals), vals)
    assert _one(np.zeros(1000, dtype))[1] == bp.HEADER + 8  # 8 width bytes of 0, no data


def test_the_format_on_a_small_block():
    """Header: the word count in 8 little-endian bytes; the width byte (2: the largest word
    is 3) padded to 4 bytes; the words 1, 2, 3 in 2 bits each from the least significant bit
    of a little-endian 32-bit word: 0b11_10_01 = 0x39."""
    buf, size = _one(np.array([1, 2, 3], np.int32))
    assert size == 16
    assert buf.tolist() == [3, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0x39, 0, 0, 0]


def test_blocks_packed_raw_and_skipped():
    rng = np.random.default_rng(5)
    counts = np.array([7, 0, 300, 129, 4])
    vals = rng.integers(-5, 1 << 20, int(counts.sum())).astype(np.int32)
    packed = np.array([True, True, False, True, False])
    buf, sizes = bp.encode_blocks(vals, counts, packed, skip=3)
    assert sizes[3] == 0 and buf.size == sizes.sum()
    assert sizes[2] == 300 * 4 and sizes[4] == 4 * 4 and sizes[1] == bp.HEADER
    starts, o = np.concatenate(([0], np.cumsum(counts))), 0
    for r in range(counts.size):
        block, o = buf[o:o + sizes[r]], o + sizes[r]
        want = vals[starts[r]:starts[r + 1]]
        if r == 3:
            continue
        if packed[r]:
            out = np.empty(counts[r], np.int32)
            assert bp.decode_block(block, out, 0, counts[r]) == counts[r]
            assert np.array_equal(out, want)
        else:
            assert np.array_equal(block.view(np.int32), want)


def test_malformed_blocks_raise():
    vals = np.arange(1000, dtype=np.int32) * 37
    buf, size = _one(vals)
    out = np.empty(1000, np.int32)
    with pytest.raises(RuntimeError, match="malformed"):  # cut short
        bp.decode_block(buf[:size - 4], out, 0, 1000)
    with pytest.raises(RuntimeError, match="malformed"):  # more words than the bound
        bp.decode_block(buf, out, 0, 999)
    with pytest.raises(RuntimeError, match="malformed"):  # no room in the output
        bp.decode_block(buf, out, 1, 1000)
    bad = buf.copy()
    bad[bp.HEADER] = 33  # a width above the word's bits
    with pytest.raises(RuntimeError, match="malformed"):
        bp.decode_block(bad, out, 0, 1000)
    with pytest.raises(RuntimeError, match="malformed"):  # no header at all
        bp.decode_block(buf[:4], out, 0, 1000)
    with pytest.raises(TypeError):
        bp.encode_blocks(np.zeros(3, np.float32), np.array([3]), np.array([True]))


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_decode_blocks_of_a_receive_buffer(dtype):
    """Blocks laid out at their byte bounds (as a receive of bounds gets them): packed, raw,
    skipped and empty ones, words written at their word bounds; ``exact`` refuses a block
    shorter than its bound."""
    rng = np.random.default_rng(9)
    words = [5, 0, 200, 3]  # what each block holds
    bounds = [9, 0, 200, 3]  # words both sides know (block 0 holds fewer than its bound)
    packed = [True, False, True, False]
    vals = [rng.integers(-9, 1 << 30, w).astype(dtype) for w in words]
    bb = bp.block_bytes(bounds, packed, np.dtype(dtype).itemsize)
    buf = np.zeros(sum(bb), np.uint8)
    o = 0
    for r in range(4):
        if r != 3:  # block 3 is the skipped one (to self): never in the buffer
            blk, size = bp.encode_blocks(vals[r], [words[r]], [packed[r]])
            assert size[0] <= bb[r]
            buf[o:o + size[0]] = blk
        o += bb[r]
    out = np.full(sum(bounds), 77, dtype)
    bp.decode_blocks(buf, bb, bounds, packed, out, skip=3)
    assert np.array_equal(out[:5], vals[0]) and (out[5:9] == 77).all()
    assert np.array_equal(out[9:209], vals[2]) and (out[209:] == 77).all()
    with pytest.raises(RuntimeError, match="rank 0 .* exactly its 9 words"):
        bp.decode_blocks(buf, bb, bounds, packed, out, skip=3, exact=True)
    with pytest.raises(RuntimeError, match="shorter"):
        bp.decode_blocks(buf[:-4], bb, bounds, packed, out, skip=3)
