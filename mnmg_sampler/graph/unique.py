"""Sorted distinct values of an integer array, by one sort.

numpy 2.3+ answers a bare ``np.unique(a)`` with a hash set, which measured 16x slower than a
sort here (30 ms against 1.9 ms for 100k int64 ids; 137 us against 11 us for a 1024-seed
duplicate check, paid on every request). Same results as ``np.unique``: sorted, same dtype.
"""

from __future__ import annotations

import numpy as np


def sorted_unique(a: np.ndarray) -> np.ndarray:
    """``np.unique(a)`` of a 1-D array (any other shape is flattened, as ``np.unique`` does)."""
    s = np.sort(np.asarray(a).ravel())
    if s.size < 2:
        return s
    keep = np.empty(s.size, bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def has_duplicates(a: np.ndarray) -> bool:
    """Whether some value occurs twice in ``a``."""
    s = np.sort(np.asarray(a).ravel())
    return bool(s.size > 1 and (s[1:] == s[:-1]).any())
