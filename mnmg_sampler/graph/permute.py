"""Keyed permutations of ``[0, n)`` evaluated id by id, and counter-based node data.

Unlike ``np.random.default_rng(seed).permutation(n)``, :func:`permute` computes the image of any
id alone, so each rank places, generates or looks up only its ids and still agrees with a single
process (the R-MAT relabelling, the ``random`` partition method, synthetic features and labels:
:func:`node_features`, :func:`node_labels`). The bijection works on ``ceil(log2 n)`` bits: four
invertible rounds of add-key, multiply by an odd constant and xor-shift, cycle-walking ids that
land at or above ``n``. A mixing function, not a cryptographic one.

Shuffles (a loader's epoch order, a random split) use :func:`feistel`, a keyed Feistel network of
:data:`FEISTEL_ROUNDS` rounds whose orders are indistinguishable from uniform ones even for tiny
``n``. Either way a batch costs ``O(batch)`` memory.
"""

from __future__ import annotations

import numpy as np

from ..rng import _mix64_int, mix64

__all__ = ["permute", "unpermute", "feistel", "feistel_keys", "FEISTEL_ROUNDS", "hash_ids",
           "node_features", "node_labels"]

_ROUNDS = 4
_U64 = (1 << 64) - 1


def _keys(seed: int, salt: int) -> list[tuple[int, int]]:
    """Per-round (additive key, odd multiplier) derived from ``seed``."""
    out = []
    h = _mix64_int((int(seed) & _U64) ^ _mix64_int(salt))
    for _ in range(_ROUNDS):
        h = _mix64_int(h + 0x9E3779B97F4A7C15 & _U64)
        k = h
        h = _mix64_int(h + 0x9E3779B97F4A7C15 & _U64)
        out.append((k, h | 1))
    return out


def _bits(n: int) -> int:
    return max(1, int(n - 1).bit_length())


def _forward(x: np.ndarray, bits: int, keys) -> np.ndarray:
    mask = np.uint64((1 << bits) - 1)
    s = np.uint64(max(1, (bits + 1) // 2))
    for k, m in keys:
        x = (x + np.uint64(k)) & mask
        x = (x * np.uint64(m)) & mask
        x ^= x >> s
    return x


def _backward(y: np.ndarray, bits: int, keys) -> np.ndarray:
    mask = np.uint64((1 << bits) - 1)
    sh = max(1, (bits + 1) // 2)
    s = np.uint64(sh)
    for k, m in reversed(keys):
        x = y.copy()
        for _ in range(-(-bits // sh)):  # undo y = x ^ (x >> s): top bits first
            x = y ^ (x >> s)
        inv = pow(m, -1, 1 << 64)
        x = (x * np.uint64(inv)) & mask
        y = (x - np.uint64(k & ((1 << bits) - 1))) & mask
    return y


_COMPILED_FROM = 1 << 16  # ids per call from which the numba kernel beats NumPy


def _walk(ids: np.ndarray, n: int, seed: int, salt: int, step) -> np.ndarray:
    ids = np.asarray(ids, dtype=np.int64)
    if n <= 1:
        return np.zeros_like(ids)
    bits, keys = _bits(n), _keys(seed, salt)
    if step is _forward and ids.size >= _COMPILED_FROM:
        from .generate import permute_ids

        out = np.empty(ids.shape, np.int64)
        adds = np.array([k & ((1 << bits) - 1) for k, _ in keys], np.uint64)
        muls = np.array([m for _, m in keys], np.uint64)
        permute_ids(ids.ravel(), n, bits, adds, muls, out.ravel())
        return out
    y = step(ids.astype(np.uint64), bits, keys)
    bad = np.flatnonzero(y >= np.uint64(n))
    while bad.size:  # cycle walking: at most a few steps, the domain is < 2n
        y[bad] = step(y[bad], bits, keys)
        bad = bad[y[bad] >= np.uint64(n)]
    return y.astype(np.int64)


def permute(ids: np.ndarray, n: int, seed: int, salt: int = 0x9E37) -> np.ndarray:
    """Images of ``ids`` (int64 in ``[0, n)``) under the permutation of ``[0, n)`` keyed by
    ``(seed, salt)``; the same for any subset or order of ``ids``."""
    return _walk(ids, n, seed, salt, _forward)


def unpermute(pos: np.ndarray, n: int, seed: int, salt: int = 0x9E37) -> np.ndarray:
    """Inverse of :func:`permute`: the ids whose images are ``pos``."""
    return _walk(pos, n, seed, salt, _backward)


FEISTEL_ROUNDS = 12
"""Rounds of :func:`feistel`: on the smallest domain (4 values, one bit per half) the distance
of the orders' distribution from uniform halves with each round (1/24 of 2**-9 at 12)."""


def feistel_keys(seed: int, *words: int, rounds: int = FEISTEL_ROUNDS) -> np.ndarray:
    """Round keys (uint64) of the permutation keyed by ``seed`` and ``words`` (epoch, salt...)."""
    h = _mix64_int((int(seed) & _U64) ^ 0x5EED5EED)
    for w in words:
        h = _mix64_int(h ^ ((int(w) + 0x9E3779B97F4A7C15) & _U64))
    out = np.empty(int(rounds), np.uint64)
    for k in range(int(rounds)):
        h = _mix64_int((h + 0x9E3779B97F4A7C15) & _U64)
        out[k] = h
    return out


def feistel(ids: np.ndarray, n: int, keys: np.ndarray, inverse: bool = False) -> np.ndarray:
    """Images of ``ids`` (int64 in ``[0, n)``) under the permutation of ``[0, n)`` with round keys
    ``keys`` (:func:`feistel_keys`), or their preimages with ``inverse``; the same for any subset
    or order of ``ids``, in ``O(len(ids))`` memory.

    A balanced Feistel network on the smallest even number of bits (at least 2) that holds
    ``n``, walked until the value is below ``n`` (fewer than 4 steps on average).
    """
    ids = np.ascontiguousarray(ids, dtype=np.int64)
    out = np.empty(ids.shape, np.int64)
    if int(n) <= 1:
        out[...] = 0
        return out
    from .generate import feistel_ids

    half = max(1, -(-_bits(int(n)) // 2))
    feistel_ids(ids.ravel(), np.uint64(n), half, np.ascontiguousarray(keys, np.uint64),
                bool(inverse), out.ravel())
    return out


def hash_ids(ids: np.ndarray, seed: int, salt: int) -> np.ndarray:
    """A 64-bit hash (uint64) of every id, keyed by ``(seed, salt)``."""
    key = np.uint64(_mix64_int((int(seed) & _U64) ^ _mix64_int(salt)))
    return mix64(np.asarray(ids, dtype=np.int64).astype(np.uint64) ^ key)


_FEAT_SALT, _LABEL_SALT, _CENTER_SALT = 0xFEA7, 0x1AB, 0xCE7


def node_labels(ids: np.ndarray, num_classes: int, seed: int) -> np.ndarray:
    """Synthetic int64 labels in ``[0, num_classes)``, a pure function of ``(seed, id)``."""
    h = hash_ids(ids, seed, _LABEL_SALT)
    return ((h >> np.uint64(32)) * np.uint64(num_classes) >> np.uint64(32)).astype(np.int64)


def _normals(ids: np.ndarray, dim: int, seed: int, salt: int) -> np.ndarray:
    """Standard normal float32 ``[len(ids), dim]`` by Box-Muller on counter-based draws."""
    ids = np.asarray(ids, dtype=np.int64)
    half = -(-dim // 2)
    cols = np.arange(half, dtype=np.uint64)
    base = hash_ids(ids, seed, salt)[:, None]
    r = mix64(base ^ ((cols + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15)))
    u1 = ((r >> np.uint64(40)).astype(np.float64) + 0.5) / float(1 << 24)
    u2 = (r & np.uint64((1 << 24) - 1)).astype(np.float64) / float(1 << 24)
    rad = np.sqrt(-2.0 * np.log(u1))
    out = np.empty((ids.shape[0], 2 * half), np.float32)
    out[:, 0::2] = rad * np.cos(2 * np.pi * u2)
    out[:, 1::2] = rad * np.sin(2 * np.pi * u2)
    return out[:, :dim]


def node_features(ids: np.ndarray, dim: int, seed: int, num_classes: int = 0,
                  signal: float = 1.0) -> np.ndarray:
    """Synthetic float32 features ``[len(ids), dim]``, row ``i`` a pure function of
    ``(seed, ids[i])``: standard normal noise, plus ``signal`` times a class centre when
    ``num_classes > 0`` (so labels from :func:`node_labels` are learnable from the features)."""
    x = _normals(ids, dim, seed, _FEAT_SALT)
    if num_classes > 0 and x.size:
        centres = _normals(np.arange(num_classes), dim, seed, _CENTER_SALT)
        x += np.float32(signal) * centres[node_labels(ids, num_classes, seed)]
    return x
