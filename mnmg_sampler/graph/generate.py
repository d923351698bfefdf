"""Compiled generators (numba ``njit``, parallel over ids): R-MAT quadrant draws
(:mod:`.rmat`) and the keyed permutation of :mod:`.permute`.

Both are pure functions of (seed, id) built on :mod:`mnmg_sampler.rng`, so results do not depend
on the thread count or on how ids are split across calls and ranks. ``graph.permute`` holds the
reference NumPy version of the permutation; the two agree bit for bit (tested). Imported lazily
by both, so importing the graph layer stays light.
"""

from __future__ import annotations

import numba
import numpy as np

from .. import rng

_rng = rng.compile_rng(numba.njit(nogil=True, inline="always"))
_mix64 = _rng["mix64"]
_draw = _rng["draw"]


@numba.njit(cache=True, nogil=True, parallel=True)
def rmat_levels(h, lo, count, scale, ta, tab, tabc, src, dst):  # pragma: no cover - jitted
    """Quadrant bits of edges ``lo .. lo+count-1`` into ``src``/``dst`` (before relabelling).

    ``h`` is the RNG state after (seed, key, hop 0); edge ``i``'s stream is ``mix64(h ^ (i +
    GOLDEN))``, one 64-bit draw per two levels (high 32 bits, then low 32 bits).
    """
    gold = np.uint64(0x9E3779B97F4A7C15)
    for j in numba.prange(count):
        base = _mix64(h ^ (np.uint64(lo + j) + gold))
        s = np.uint64(0)
        d = np.uint64(0)
        r = np.uint64(0)
        for level in range(scale):
            if level % 2 == 0:
                r = _draw(base, np.uint64(level // 2))
                u = r >> np.uint64(32)
            else:
                u = r & np.uint64(0xFFFFFFFF)
            sb = u >= tab
            db = (u >= ta and not sb) or u >= tabc
            s = (s << np.uint64(1)) | np.uint64(sb)
            d = (d << np.uint64(1)) | np.uint64(db)
        src[j] = np.int64(s)
        dst[j] = np.int64(d)


@numba.njit(cache=True, nogil=True, parallel=True)
def permute_ids(ids, n, bits, adds, muls, out):  # pragma: no cover - jitted
    """``out[i]`` = image of ``ids[i]`` under the keyed bijection of ``[0, n)`` (cycle walking)."""
    mask = np.uint64((1 << bits) - 1)
    sh = np.uint64(max(1, (bits + 1) // 2))
    nn = np.uint64(n)
    for i in numba.prange(ids.shape[0]):
        x = np.uint64(ids[i])
        while True:
            for k in range(adds.shape[0]):
                x = (x + adds[k]) & mask
                x = (x * muls[k]) & mask
                x ^= x >> sh
            if x < nn:
                break
        out[i] = np.int64(x)


@numba.njit(cache=True, nogil=True)
def feistel_ids(ids, n, half, keys, inverse, out):  # pragma: no cover - jitted
    """``out[i]`` = image (or preimage, ``inverse``) of ``ids[i]`` under the keyed Feistel
    permutation of ``[0, n)``: a balanced network on ``2 * half`` bits, round ``k`` mapping
    ``(l, r)`` to ``(r, l ^ F_k(r))`` with ``F_k(r) = mix64(r ^ keys[k])``, walked until the
    value falls in ``[0, n)``."""
    hmask = np.uint64((1 << half) - 1)
    sh = np.uint64(half)
    nn = np.uint64(n)
    rounds = keys.shape[0]
    for i in range(ids.shape[0]):
        x = np.uint64(ids[i])
        while True:
            left = x >> sh
            right = x & hmask
            if inverse:
                for k in range(rounds - 1, -1, -1):
                    right, left = left, right ^ (_mix64(left ^ keys[k]) & hmask)
            else:
                for k in range(rounds):
                    left, right = right, left ^ (_mix64(right ^ keys[k]) & hmask)
            x = (left << sh) | right
            if x < nn:
                break
        out[i] = np.int64(x)
