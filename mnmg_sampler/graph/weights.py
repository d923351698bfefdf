"""Edge weights of a job (``sampler.weights``): one value per *input* edge, mapped to CSR entries.

Weights come in the order of the dataset's own edges: an array of the dataset's ``.npz`` (the
gnn-benchmark layout's ``adj_data``: one value per stored adjacency entry; a ``src``/``dst``
archive: any array of that length) or a ``.npy`` of one value per input edge. The loaded graph
may differ from the input (reverses added, duplicates or self-loops dropped, held-out edges
removed), so a CSR entry ``u -> v`` takes the weight of the first input edge ``u -> v``, else
(an added reverse) of the first ``v -> u``. The result is in CSR order for
``partition(..., weights=...)``, which validates it (:func:`.csr.check_weights`).
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path

import numpy as np

from ..errors import GraphFormatError
from .csr import CSRGraph, entry_rows
from .datasets import BUILTINS, load_graph

__all__ = ["input_edge_weights", "map_pair_weights", "resolve_edge_weights"]


def _npz_path(dataset: str) -> Path | None:
    key = dataset.strip().lower()
    if key in BUILTINS:
        res = importlib.resources.files("mnmg_sampler.data").joinpath(BUILTINS[key])
        return Path(str(res))
    p = Path(dataset).expanduser()
    return p if p.name.lower().endswith(".npz") else None


def input_edge_weights(spec: str, dataset: str, num_input_edges: int,
                       key: str = "sampler.weights") -> np.ndarray:
    """The raw weights named by ``spec``: a ``.npy`` file, or an array of the dataset's ``.npz``.

    ``key`` names the setting in error messages (``--weights`` on the command line)."""
    p = Path(spec).expanduser()
    if spec.lower().endswith(".npy") or p.is_file():
        try:
            w = np.load(p, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise GraphFormatError(f"{key}: {spec} is not a readable .npy file ({e})",
                                   "no edge weights can be loaded",
                                   "save one float per input edge with numpy.save") from e
        where = str(p)
    else:
        npz = _npz_path(dataset)
        if npz is None:
            raise GraphFormatError(
                f"{key}: {spec!r} is neither a .npy file nor an array of an .npz "
                f"dataset (dataset {dataset!r})", "no edge weights can be loaded",
                "give a .npy file with one weight per input edge")
        with np.load(npz, allow_pickle=False) as z:
            if spec not in z.files:
                raise GraphFormatError(f"{key}: {npz.name} has no array {spec!r} "
                                       f"(arrays: {', '.join(sorted(z.files))})",
                                       "no edge weights can be loaded",
                                       "name one of its arrays, or give a .npy file")
            w = z[spec]
        where = f"{npz.name}[{spec!r}]"
    w = np.asarray(w)
    if w.ndim != 1 or w.shape[0] != num_input_edges:
        raise GraphFormatError(f"{key}: {where} has shape {list(w.shape)}, but the "
                               f"dataset has {num_input_edges} input edges",
                               "weights are one value per input edge, in the dataset's order",
                               f"give {num_input_edges} values")
    return w


def map_pair_weights(src: np.ndarray, dst: np.ndarray, w: np.ndarray, graph: CSRGraph
                     ) -> np.ndarray:
    """Weight of every CSR entry of ``graph`` from input edges ``src[i] -> dst[i]`` with weight
    ``w[i]`` (first occurrence of a pair wins; a missing pair takes its reverse's weight)."""
    n = np.int64(max(graph.num_nodes, 1))
    codes = np.asarray(src, np.int64) * n + np.asarray(dst, np.int64)
    uniq, first = np.unique(codes, return_index=True)
    s, d = np.asarray(graph.indices, np.int64), entry_rows(graph.indptr)

    def find(c):
        i = np.minimum(np.searchsorted(uniq, c), max(uniq.size - 1, 0))
        return i, (uniq[i] == c) if uniq.size else np.zeros(c.size, bool)

    i, ok = find(s * n + d)
    if not ok.all():
        j, ok_r = find(d * n + s)
        i = np.where(ok, i, j)
        ok = ok | ok_r
    if not ok.all():
        k = int(np.flatnonzero(~ok)[0])
        raise GraphFormatError(f"edge {int(s[k])} -> {int(d[k])} of graph '{graph.name}' is "
                               "not among the input edges the weights were given for",
                               "its weight is unknown",
                               "give weights for the dataset the graph was loaded from")
    return np.asarray(w)[first[i]]


def resolve_edge_weights(spec: str, dataset: str, graph: CSRGraph, *, seed: int = 0,
                         key: str = "sampler.weights") -> np.ndarray:
    """Per-CSR-entry weights of ``graph`` (loaded from ``dataset``) for ``sampler.weights``
    (``key`` in messages: the CLI's ``--weights``)."""
    raw = load_graph(dataset, undirected=False, seed=seed)  # no cleaning: ids = input order
    m = raw.num_edges
    src, dst = np.empty(m, np.int64), np.empty(m, np.int64)
    src[raw.edge_ids] = raw.indices
    dst[raw.edge_ids] = entry_rows(raw.indptr)
    return map_pair_weights(src, dst, input_edge_weights(spec, dataset, m, key), graph)
