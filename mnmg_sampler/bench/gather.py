"""The memory-latency reference of the one-hop benchmark: a random gather over a large array.

Sampling one neighbor is, at heart, one dependent random read of ``indices``; a plain loop that
sums ``arr[pos[i]]`` for random ``pos`` is the fastest any sampling kernel could go on this
machine, so the kernel is reported as a fraction of it.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True, parallel=True)
def gather_sum(arr: np.ndarray, pos: np.ndarray) -> int:
    """Sum of ``arr[pos]``: one random read per position (parallel over positions)."""
    s = 0
    for i in numba.prange(pos.shape[0]):
        s += arr[pos[i]]
    return s


def random_positions(n: int, reads: int, seed: int = 0) -> np.ndarray:
    """``reads`` uniform positions in ``[0, n)``, drawn outside any timed region."""
    return np.random.default_rng(seed).integers(0, n, reads, dtype=np.int64)
