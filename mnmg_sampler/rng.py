"""Counter-based RNG shared by the CPU and CUDA kernels and the graph generators.

Every draw is a pure function of ``(seed, key, hop, node, slot)``, with no generator state: that
makes a minibatch independent of thread count, merge pattern, partitioning, world size and
device. The construction: ``docs/rng.md``; the functions here are plain Python over
``numpy.uint64``, which :func:`compile_rng` compiles for each device (the same arithmetic).

It imports nothing of the package (like ``errors``): the graph layer draws R-MAT edges and keyed
permutations from it and imports run graph -> ops, so it cannot live in ``ops``;
:mod:`mnmg_sampler.ops.rng` is the same RNG under the kernels' name.
"""

from __future__ import annotations

import types
from collections.abc import Callable

import numpy as np

# splitmix64 / Stafford "Mix13" constants (public domain finaliser).
GOLDEN = np.uint64(0x9E3779B97F4A7C15)
M1 = np.uint64(0xBF58476D1CE4E5B9)
M2 = np.uint64(0x94D049BB133111EB)
S30 = np.uint64(30)
S27 = np.uint64(27)
S31 = np.uint64(31)
S32 = np.uint64(32)
S11 = np.uint64(11)
INV53 = np.float64(2.0 ** -53)


def mix64(z):
    """Bijective 64-bit finaliser (splitmix64): every input bit affects every output bit."""
    z = (z ^ (z >> S30)) * M1
    z = (z ^ (z >> S27)) * M2
    return z ^ (z >> S31)


def stream_base(seed, key, hop, node):
    """The per-(seed, key, hop, node) stream state; ``slot`` draws are taken from it."""
    h = mix64(np.uint64(seed) + GOLDEN)
    h = mix64(h ^ (np.uint64(key) + GOLDEN))
    h = mix64(h ^ (np.uint64(hop) + GOLDEN))
    return mix64(h ^ (np.uint64(node) + GOLDEN))


def draw(base, slot):
    """The 64-bit draw number ``slot`` of a stream."""
    return mix64(base ^ ((np.uint64(slot) + np.uint64(1)) * GOLDEN))


def bounded(r, n):
    """Map a 64-bit draw to ``[0, n)`` by multiply-shift on its high 32 bits (n < 2**32).

    The bias is below n / 2**32 (under 1e-5 for a node of degree 40,000); documented in rng.md.
    """
    return np.int64(((r >> S32) * np.uint64(n)) >> S32)


def unit(r):
    """Map a 64-bit draw to a float64 in ``[0, 1)``: its high 53 bits times ``2**-53`` (exact)."""
    return np.float64(r >> S11) * INV53


RNG_FUNCTIONS = ("mix64", "stream_base", "draw", "bounded", "unit")


def compile_rng(jit: Callable) -> dict:
    """Compile the RNG with ``jit`` (``njit`` or ``cuda.jit(device=True)``); returns a namespace
    dict of the compiled functions, each calling the compiled versions of its callees."""
    ns = {k: v for k, v in globals().items() if k.isupper() or k == "np"}
    for name in RNG_FUNCTIONS:
        f = globals()[name]
        ns[name] = jit(types.FunctionType(f.__code__, ns, name))
    return ns


_U64 = (1 << 64) - 1


def _mix64_int(z: int) -> int:
    """``mix64`` on Python ints (no numpy overflow warnings) for host-side key derivation."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _U64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _U64
    return z ^ (z >> 31)


def request_key(seed: int, epoch: int, batch: int) -> int:
    """The request key of global batch ``batch`` in ``epoch``: a non-negative int63."""
    k = _mix64_int((seed & _U64) ^ _mix64_int((epoch + 0x9E3779B97F4A7C15) & _U64))
    k = _mix64_int(k ^ ((batch + 0x9E3779B97F4A7C15) & _U64))
    return k >> 1
