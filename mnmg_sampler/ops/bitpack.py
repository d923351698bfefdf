"""Bit-packed integer words for the wire (CPU, njit): what ids cost between ranks.

Ids, counts and headers travel as int32 or int64 words, but a graph of 82k nodes needs 17 bits
per id and a count bounded by a fanout of 15 needs 4. A block of words is sent as its word count
(8 bytes, little-endian) then mini-blocks of :data:`MINI` words, each one width byte ``w`` (the
bit length of the mini-block's largest word, read as unsigned: a negative word takes every bit)
followed by its words in ``w`` bits each, least significant bit first (bit-packing with one
width per mini-block, as Parquet and Lucene do). Decoding gives back exactly the words sent.
A block's encoded size never exceeds :func:`encoded_bound` of its word count, so a receiver
that knows a bound in words knows one in bytes: no size has to travel first.
"""

from __future__ import annotations

import numba
import numpy as np

MINI = 128  # words per mini-block (a whole mini-block is always 16 x width bytes)
HEADER = 8  # bytes of a block's word count


def encoded_bound(words: np.ndarray | int, itemsize: int) -> np.ndarray | int:
    """The most bytes a block of ``words`` words of ``itemsize`` bytes encodes to: every
    word at full width, one width byte per mini-block and the header."""
    return HEADER + (words + MINI - 1) // MINI + words * itemsize


@numba.njit(cache=True, nogil=True)
def _encode(vals, lo, n, out, p):
    """Encode ``vals[lo:lo + n]`` (uint32 or uint64) into ``out`` from byte ``p``; returns
    the byte after the block."""
    m = np.uint64(n)
    for i in range(HEADER):
        out[p + i] = np.uint8((m >> np.uint64(8 * i)) & np.uint64(0xFF))
    p += HEADER
    for s in range(lo, lo + n, MINI):
        e = min(s + MINI, lo + n)
        acc = np.uint64(0)
        for i in range(s, e):
            acc |= np.uint64(vals[i])
        w = 0
        while acc != np.uint64(0):
            acc >>= np.uint64(1)
            w += 1
        out[p] = np.uint8(w)
        p += 1
        if w == 0:
            continue
        # words in chunks of at most 32 bits through a 64-bit accumulator
        lo_w = min(w, 32)
        hi_w = w - lo_w
        lo_mask = (np.uint64(1) << np.uint64(lo_w)) - np.uint64(1)
        acc = np.uint64(0)
        bits = 0
        for i in range(s, e):
            v = np.uint64(vals[i])
            acc |= (v & lo_mask) << np.uint64(bits)
            bits += lo_w
            if bits >= 32:
                for b in range(4):
                    out[p + b] = np.uint8((acc >> np.uint64(8 * b)) & np.uint64(0xFF))
                p += 4
                acc >>= np.uint64(32)
                bits -= 32
            if hi_w > 0:
                acc |= (v >> np.uint64(32)) << np.uint64(bits)
                bits += hi_w
                if bits >= 32:
                    for b in range(4):
                        out[p + b] = np.uint8((acc >> np.uint64(8 * b)) & np.uint64(0xFF))
                    p += 4
                    acc >>= np.uint64(32)
                    bits -= 32
        while bits > 0:
            out[p] = np.uint8(acc & np.uint64(0xFF))
            p += 1
            acc >>= np.uint64(8)
            bits -= 8
    return p


@numba.njit(cache=True, nogil=True)
def _decode(buf, p, end, cap, out, lo):
    """Decode the block at ``buf[p:end]`` into ``out[lo:]``; returns its word count, or -1 when
    the block is malformed or says more than ``cap`` words (nothing is read past ``end``)."""
    if p + HEADER > end:
        return -1
    m = np.uint64(0)
    for i in range(HEADER):
        m |= np.uint64(buf[p + i]) << np.uint64(8 * i)
    p += HEADER
    if m > np.uint64(cap):
        return -1
    n = np.int64(m)
    full = out.itemsize * 8
    for s in range(lo, lo + n, MINI):
        e = min(s + MINI, lo + n)
        if p >= end:
            return -1
        w = np.int64(buf[p])
        p += 1
        if w > full:
            return -1
        if (e - s) * w > (end - p) * 8:
            return -1
        if w == 0:
            for i in range(s, e):
                out[i] = 0
            continue
        lo_w = min(w, 32)
        hi_w = w - lo_w
        lo_mask = (np.uint64(1) << np.uint64(lo_w)) - np.uint64(1)
        hi_mask = (np.uint64(1) << np.uint64(hi_w)) - np.uint64(1)
        acc = np.uint64(0)
        bits = 0
        for i in range(s, e):
            while bits < lo_w:
                acc |= np.uint64(buf[p]) << np.uint64(bits)
                p += 1
                bits += 8
            v = acc & lo_mask
            acc >>= np.uint64(lo_w)
            bits -= lo_w
            if hi_w > 0:
                while bits < hi_w:
                    acc |= np.uint64(buf[p]) << np.uint64(bits)
                    p += 1
                    bits += 8
                v |= (acc & hi_mask) << np.uint64(32)
                acc >>= np.uint64(hi_w)
                bits -= hi_w
            out[i] = v
        # the mini-block ends on a byte boundary: fewer than 8 bits are left in the accumulator
    return n


@numba.njit(cache=True, nogil=True)
def _encode_blocks(vals, raw, starts, counts, packed, skip, out, sizes):
    p = 0
    k = vals.itemsize
    for r in range(counts.size):
        if r == skip:
            continue
        if packed[r]:
            q = _encode(vals, starts[r], counts[r], out, p)
        else:  # raw little-endian words
            b = starts[r] * k
            q = p + counts[r] * k
            out[p:q] = raw[b:b + counts[r] * k]
        sizes[r] = q - p
        p = q
    return p


def encode_blocks(vals: np.ndarray, counts: np.ndarray, packed: np.ndarray, skip: int = -1
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Blocks of ``vals`` (``counts[r]`` words for destination ``r``, in order) one after the
    other, each encoded where ``packed[r]`` and copied as raw little-endian words elsewhere;
    block ``skip`` is left out (size 0). Returns ``(bytes, byte size of each block)``."""
    u = _unsigned(np.ascontiguousarray(vals))
    counts = np.asarray(counts, np.int64)
    packed = np.asarray(packed, np.bool_)
    starts = np.zeros(counts.size, np.int64)
    np.cumsum(counts[:-1], out=starts[1:])
    room = np.where(packed, encoded_bound(counts, u.itemsize), counts * u.itemsize)
    if skip >= 0:
        room[skip] = 0
    out = np.empty(int(room.sum()), np.uint8)
    sizes = np.zeros(counts.size, np.int64)
    end = _encode_blocks(u, u.view(np.uint8), starts, counts, packed, skip, out, sizes)
    return out[:end], sizes


def decode_block(buf: np.ndarray, out: np.ndarray, lo: int, cap: int) -> int:
    """Decode the encoded block filling ``buf`` (bytes past its end are ignored) into
    ``out[lo:lo + n]``; returns ``n``. A block that is malformed, runs past ``buf`` or says
    more than ``cap`` words raises ``RuntimeError``."""
    cap = min(int(cap), out.size - int(lo))
    n = int(_decode(buf, 0, buf.size, cap, _unsigned(out), lo)) if cap >= 0 else -1
    if n < 0 or lo + n > out.size:
        raise RuntimeError(f"a bit-packed block of {buf.size} bytes is malformed or holds more "
                           f"than its bound of {cap} words")
    return n


def _unsigned(a: np.ndarray) -> np.ndarray:
    """``a`` (int32/int64/uint32/uint64, contiguous) as unsigned words of the same size."""
    if a.dtype.itemsize not in (4, 8) or a.dtype.kind not in "iu":
        raise TypeError(f"bit-packing takes 4- or 8-byte integer words, not {a.dtype}")
    return a.view(np.uint32 if a.dtype.itemsize == 4 else np.uint64)
