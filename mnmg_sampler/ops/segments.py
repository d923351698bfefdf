"""Variable-length segments (one neighbor list per node) moved between orders (CPU, njit).

A distributed hop gets each node's neighbor list back grouped by owner rank; the requester needs
them in frontier order. :func:`reorder_segments` does that in one sequential pass instead of the
repeat/arange/gather index arrays numpy would build.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def _reorder(counts_src, vals_src, src_pos, out_counts, out):
    n = src_pos.shape[0]
    off_src = np.empty(counts_src.shape[0] + 1, np.int64)
    off_src[0] = 0
    for p in range(counts_src.shape[0]):
        off_src[p + 1] = off_src[p] + counts_src[p]
    o = 0
    for j in range(n):
        p = src_pos[j]
        a = off_src[p]
        c = off_src[p + 1] - a
        out_counts[j] = c
        for k in range(c):
            out[o + k] = vals_src[a + k]
        o += c


def reorder_segments(counts_src: np.ndarray, vals_src: np.ndarray, src_pos: np.ndarray,
                     out_dtype=np.int64) -> tuple[np.ndarray, np.ndarray]:
    """Segments from source order to target order.

    Node ``j`` of the target order is node ``src_pos[j]`` of the source order, whose segment is
    ``vals_src[sum(counts_src[:p]):][:counts_src[p]]``. Returns ``(counts, values)`` in target
    order; values are converted to ``out_dtype`` on the way (e.g. int32 wire ids to int64).
    """
    out_counts = np.empty(src_pos.shape[0], np.int64)
    out = np.empty(vals_src.shape[0], out_dtype)
    _reorder(counts_src, vals_src, src_pos, out_counts, out)
    return out_counts, out
