"""Sets of nodes as bitmaps: one bit per node (bit ``i % 64`` of word ``i // 64`` is node ``i``).

``mnmg-sampler sample`` draws its seeds from the nodes with a neighbor: 8 bytes per node on every
rank as an id array, one bit as a bitmap, built here a chunk of rows at a time (no temporary of
``num_nodes`` entries), read position by position by :class:`~mnmg_sampler.loaders.seeds.NodeBits`.
"""

from __future__ import annotations

import numpy as np

__all__ = ["ROW_CHUNK", "nonisolated_bits", "num_words"]

ROW_CHUNK = 1 << 15
"""Rows per step when a bitmap is built (a multiple of 64: each step fills whole words); each
temporary of a step is at most 256 KiB."""


def num_words(num_nodes: int) -> int:
    """uint64 words of a bitmap over ``num_nodes`` nodes."""
    return -(-int(num_nodes) // 64)


def nonisolated_bits(indptr, num_nodes: int, rows=None, words: np.ndarray | None = None
                     ) -> np.ndarray:
    """Bitmap of the rows with at least one neighbor (``indptr[r + 1] > indptr[r]``: in-degree,
    as :meth:`~mnmg_sampler.graph.csr.CSRGraph.degrees`), set in ``words`` (new if ``None``).

    Row ``r`` is node ``r`` (a whole graph) or node ``rows[r]`` (a partition's ``orig_ids``);
    read in chunks of :data:`ROW_CHUNK` rows, so no temporary is as large as the graph.
    """
    n_rows = int(np.shape(indptr)[0]) - 1
    if words is None:
        words = np.zeros(num_words(num_nodes), "<u8")
    for lo in range(0, n_rows, ROW_CHUNK):
        hi = min(n_rows, lo + ROW_CHUNK)
        ip = np.asarray(indptr[lo:hi + 1])
        has = ip[1:] > ip[:-1]
        if rows is None:  # rows lo.. are nodes lo..: whole bytes (lo is a multiple of 64)
            packed = np.packbits(has, bitorder="little")
            words.view(np.uint8)[lo // 8:lo // 8 + packed.size] |= packed
        else:
            ids = np.asarray(rows[lo:hi], np.int64)[has]
            np.bitwise_or.at(words, ids >> 6, np.left_shift(np.uint64(1),
                                                            (ids & 63).astype(np.uint64)))
    return words
