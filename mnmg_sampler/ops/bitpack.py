"""Bit-packed integer words for the wire (CPU, njit): what ids cost between ranks.

Why and when: docs/architecture.md#bit-packed-words-between-hosts. A block of ``n`` words is
``n`` (8 bytes, little-endian), one width byte per mini-block of :data:`MINI` words (``w``: the
bit length of its largest word read as unsigned, so a negative word takes every bit), zeros up
to a multiple of 4 bytes, then each mini-block's words in ``w`` bits each, least significant bit
first, filling little-endian 32-bit words (a mini-block starts a new one), so 32-bit loads and
stores stay aligned. Decoding gives back exactly the words sent. A block never takes more than
:func:`encoded_bound` bytes, so a receiver that knows a bound in words knows one in bytes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numba
import numpy as np

MINI = 128  # words per mini-block
HEADER = 8  # bytes of a block's word count
_M32 = np.uint64(0xFFFFFFFF)


def encoded_bound(words: int, itemsize: int) -> int:
    """The most bytes a block of ``words`` words of ``itemsize`` bytes encodes to: every word
    at full width, the width bytes (rounded up to 4) and the header."""
    return HEADER + ((words + MINI - 1) // MINI + 3) // 4 * 4 + words * itemsize


@numba.njit(cache=True, nogil=True, inline="always")
def _pad4(x):
    return (x + 3) // 4 * 4


@numba.njit(cache=True, nogil=True, inline="always")
def _U(i):
    """A non-negative index as unsigned: numba then skips its negative-index wraparound."""
    return np.uint64(i)


@numba.njit(cache=True, nogil=True)
def _encode(vals, lo, n, out8, out32, p):
    """Encode ``vals[lo:lo + n]`` (uint32 or uint64) at byte ``p`` (a multiple of 4) of
    ``out8`` (``out32``: the same bytes as 32-bit words); returns the byte after the block.
    Words are read through a view of each mini-block and written at unsigned indices: numba
    guards a signed index against wrapping around, which keeps the loops from vectorising
    (the width pass alone was 10x slower)."""
    out32[_U(p // 4)] = np.uint32(np.uint64(n) & _M32)
    out32[_U(p // 4 + 1)] = np.uint32(np.uint64(n) >> np.uint64(32))
    p += HEADER
    nb = (n + MINI - 1) // MINI
    out8[p + nb:p + _pad4(nb)] = 0
    q = (p + _pad4(nb)) // 4
    for b in range(nb):
        s = lo + b * MINI
        blk = vals[s:min(s + MINI, lo + n)]
        acc = np.uint64(0)
        for i in range(blk.size):
            acc |= np.uint64(blk[i])
        w = 0
        while acc != np.uint64(0):
            acc >>= np.uint64(1)
            w += 1
        out8[_U(p + b)] = np.uint8(w)
        if w == 0:
            continue
        bits = np.uint64(0)
        if w <= 32:  # every word of the mini-block is below 2**w
            uw = np.uint64(w)
            for i in range(blk.size):
                acc |= np.uint64(blk[i]) << bits
                bits += uw
                if bits >= np.uint64(32):
                    out32[_U(q)] = np.uint32(acc & _M32)
                    q += 1
                    acc >>= np.uint64(32)
                    bits -= np.uint64(32)
        else:  # 64-bit words: the low 32 bits, then the high w - 32
            hw = np.uint64(w - 32)
            for i in range(blk.size):
                v = np.uint64(blk[i])
                acc |= (v & _M32) << bits
                out32[_U(q)] = np.uint32(acc & _M32)  # bits < 32: a whole word is full
                q += 1
                acc >>= np.uint64(32)
                acc |= (v >> np.uint64(32)) << bits
                bits += hw
                if bits >= np.uint64(32):
                    out32[_U(q)] = np.uint32(acc & _M32)
                    q += 1
                    acc >>= np.uint64(32)
                    bits -= np.uint64(32)
        if bits > np.uint64(0):
            out32[_U(q)] = np.uint32(acc & _M32)
            q += 1
    return q * 4


@numba.njit(cache=True, nogil=True)
def _decode(in8, in32, p, end, cap, out, lo):
    """Decode the block at bytes ``[p, end)`` (``p`` a multiple of 4) into ``out[lo:]``;
    returns its word count, or -1 when it is malformed, runs past ``end`` or says more than
    ``cap`` words. Nothing is read past ``end``. Indices as in :func:`_encode`."""
    if p + HEADER > end:
        return -1
    m = np.uint64(in32[_U(p // 4)]) | (np.uint64(in32[_U(p // 4 + 1)]) << np.uint64(32))
    if m > np.uint64(cap):
        return -1
    n = np.int64(m)
    p += HEADER
    nb = (n + MINI - 1) // MINI
    q = (p + _pad4(nb)) // 4
    if q * 4 > end:
        return -1
    full = out.itemsize * 8
    for b in range(nb):
        s = lo + b * MINI
        blk = out[s:min(s + MINI, lo + n)]
        w = np.int64(in8[_U(p + b)])
        if w > full or q + (blk.size * w + 31) // 32 > end // 4:
            return -1
        if w == 0:
            blk[:] = 0
            continue
        acc = np.uint64(0)
        bits = np.uint64(0)
        if w <= 32:
            uw = np.uint64(w)
            mask = (np.uint64(1) << uw) - np.uint64(1)
            for i in range(blk.size):
                if bits < uw:
                    acc |= np.uint64(in32[_U(q)]) << bits
                    q += 1
                    bits += np.uint64(32)
                blk[i] = acc & mask
                acc >>= uw
                bits -= uw
        else:
            hw = np.uint64(w - 32)
            hmask = (np.uint64(1) << hw) - np.uint64(1)
            for i in range(blk.size):
                acc |= np.uint64(in32[_U(q)]) << bits  # bits < 32: the low 32 bits are here
                q += 1
                v = acc & _M32
                acc >>= np.uint64(32)
                if bits < hw:
                    acc |= np.uint64(in32[_U(q)]) << bits
                    q += 1
                    bits += np.uint64(32)
                blk[i] = v | ((acc & hmask) << np.uint64(32))
                acc >>= hw
                bits -= hw
    return n


@numba.njit(cache=True, nogil=True)
def _encode_all(vals, raw, counts, packed, skip, out8, out32, sizes):
    k = vals.itemsize
    p = 0
    o = 0
    for r in range(counts.size):
        n = counts[r]
        if r != skip:
            if packed[r]:
                q = _encode(vals, o, n, out8, out32, p)
            else:  # raw little-endian words
                q = p + n * k
                out8[p:q] = raw[o * k:(o + n) * k]
            sizes[r] = q - p
            p = q
        o += n
    return p


@numba.njit(cache=True, nogil=True)
def _decode_all(in8, in32, byte_bounds, word_bounds, packed, skip, exact, out, out8):
    k = out.itemsize
    p = 0
    o = 0
    for r in range(word_bounds.size):
        nb, nw = byte_bounds[r], word_bounds[r]
        if r != skip and nw > 0:
            if packed[r]:
                n = _decode(in8, in32, p, p + nb, nw, out, o)
                if n < 0 or (exact and n != nw):
                    return r
            else:  # raw words (past the block's own size: whatever the buffer held)
                out8[o * k:(o + nw) * k] = in8[p:p + nw * k]
        p += nb
        o += nw
    return -1


def block_bytes(words: Sequence[int], packed: Sequence[bool], itemsize: int) -> list[int]:
    """Bytes each block of ``words`` words may take: :func:`encoded_bound` where packed (0 for
    a block of 0 words: nothing travels), raw words elsewhere."""
    return [encoded_bound(w, itemsize) if p and w > 0 else w * itemsize
            for w, p in zip(words, packed, strict=True)]


def encode_blocks(vals: np.ndarray, counts: Sequence[int], packed: Sequence[bool],
                  skip: int = -1) -> tuple[np.ndarray, np.ndarray]:
    """Blocks of ``vals`` (``counts[r]`` words for destination ``r``, in order) one after the
    other, each encoded where ``packed[r]`` and copied as raw little-endian words elsewhere;
    block ``skip`` is left out (size 0). Returns ``(bytes, byte size of each block)``."""
    u = _unsigned(np.ascontiguousarray(vals))
    counts = [int(c) for c in counts]
    packed = [bool(p) for p in packed]
    room = sum(encoded_bound(c, u.itemsize) if p else c * u.itemsize
               for r, (c, p) in enumerate(zip(counts, packed, strict=True)) if r != skip)
    out = np.empty(room, np.uint8)
    sizes = np.zeros(len(counts), np.int64)
    end = _encode_all(u, u.view(np.uint8), np.asarray(counts, np.int64),
                      np.asarray(packed, np.bool_), skip, out, out.view(np.uint32), sizes)
    return out[:end], sizes


def decode_blocks(buf: np.ndarray, byte_bounds: Sequence[int], word_bounds: Sequence[int],
                  packed: Sequence[bool], out: np.ndarray, skip: int = -1,
                  exact: bool = False) -> None:
    """Decode the blocks of a receive buffer (block ``r`` at byte ``sum(byte_bounds[:r])``,
    written to ``out`` from word ``sum(word_bounds[:r])``): packed blocks where ``packed[r]``,
    raw words elsewhere; block ``skip`` and blocks of bound 0 are left alone. ``exact``: every
    packed block must hold exactly its bound, else at most its bound. A malformed block
    raises ``RuntimeError``."""
    if len(buf) < sum(byte_bounds) or len(out) < sum(word_bounds):
        raise RuntimeError("a receive buffer is shorter than its bounds")
    bad = _decode_all(buf, buf.view(np.uint32), np.asarray(byte_bounds, np.int64),
                      np.asarray(word_bounds, np.int64), np.asarray(packed, np.bool_), skip,
                      exact, _unsigned(out), out.view(np.uint8))
    if bad >= 0:
        raise RuntimeError(f"the bit-packed block from rank {bad} is malformed or does not "
                           f"hold {'exactly' if exact else 'at most'} its "
                           f"{word_bounds[bad]} words")


def decode_block(buf: np.ndarray, out: np.ndarray, lo: int, cap: int) -> int:
    """Decode the encoded block at the start of ``buf`` (a multiple of 4 bytes long; bytes past
    the block are ignored) into ``out[lo:lo + n]``; returns ``n``. A block that is malformed,
    runs past ``buf`` or says more than ``cap`` words raises ``RuntimeError``."""
    cap = min(int(cap), out.size - int(lo))
    n = -1
    if cap >= 0 and buf.size % 4 == 0:
        n = int(_decode(buf, buf.view(np.uint32), 0, buf.size, cap, _unsigned(out), lo))
    if n < 0:
        raise RuntimeError(f"a bit-packed block of {buf.size} bytes is malformed or holds more "
                           f"than its bound of {cap} words")
    return n


def _unsigned(a: np.ndarray) -> np.ndarray:
    """``a`` (int32/int64/uint32/uint64, contiguous) as unsigned words of the same size."""
    if a.dtype.itemsize not in (4, 8) or a.dtype.kind not in "iu":
        raise TypeError(f"bit-packing takes 4- or 8-byte integer words, not {a.dtype}")
    return a.view(np.uint32 if a.dtype.itemsize == 4 else np.uint64)
