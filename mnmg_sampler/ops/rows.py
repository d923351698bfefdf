"""Row copies of the feature fetch: each row moves once, from where it is to where it goes.

A fetched row goes from its source (this rank's table, the host cache, the exchange's receive
buffer) straight to its place in the batch's feature matrix and extra columns (label, original-id
bits), with no staging array: numpy's ``dst[a] = src[b]`` would copy it twice (gather, scatter).
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def _scatter(dst_x, dst_m, dst_pos, src, src_rows):
    F = dst_x.shape[1]
    M = dst_m.shape[1]
    for k in range(dst_pos.shape[0]):
        s, d = src_rows[k], dst_pos[k]
        for j in range(F):
            dst_x[d, j] = src[s, j]
        for j in range(M):
            dst_m[d, j] = src[s, F + j]


def scatter_rows(dst_x: np.ndarray, dst_m: np.ndarray, dst_pos: np.ndarray, src: np.ndarray,
                 src_rows: np.ndarray) -> None:
    """``dst_x[dst_pos[k]] = src[src_rows[k], :F]`` and ``dst_m[dst_pos[k]] = src[src_rows[k],
    F:]`` for every ``k`` (``F`` = ``dst_x``'s columns; float32 arrays, ``src`` any row-major
    layout, a read-only mapping included)."""
    if dst_pos.size:
        _scatter(dst_x, dst_m, np.ascontiguousarray(dst_pos, np.int64), src,
                 np.ascontiguousarray(src_rows, np.int64))
