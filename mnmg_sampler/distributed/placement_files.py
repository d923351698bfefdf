"""The placement beside the parts: decided once per layout, then mapped by later starts.

A host's first rank writes ``<parts>/placement/<key>/host-<k>/``: its host cache's slices
(``ids.<type>.<j>.<tag>.npy``, ``rows...``) and last ``placement.json``, each renamed into
place, so no reader sees half a placement. ``<key>`` hashes the partition, world and hosts:
one placement each, which another budget or plan replaces (no file set per budget piles up).
A later start whose decision it matches maps the files instead of choosing and fetching the
rows (docs/formats.md#placements-beside-the-parts).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
from pathlib import Path

import numpy as np

from ..graph.partition_io import PLACEMENT_DIR
from .consistency import manifest_fingerprint
from .fit import Placement
from .host_groups import map_array

__all__ = ["HostFiles", "listing"]

log = logging.getLogger(__name__)

META = "placement.json"


class HostFiles:
    """This rank's host's placement files for one layout: the agreed ``fit``, each host's
    ``cache_rows``, the ``plan`` its rows are chosen for, and ``rows``: per node type, the
    cache rows' ``[dtype, columns]`` (a partition without a directory: nothing is kept)."""

    def __init__(self, part, fit: Placement, rank: int, cache_rows, plan, rows: dict) -> None:
        k = fit.host_of[rank]
        self.writer = fit.hosts[k].ranks[0] == rank
        self.report = fit.report([int(c) for c in cache_rows])[k]
        plan = None if plan is None or not any(cache_rows) else [plan.fanouts, plan.batch_size,
                                                                 plan.per_round]
        self.layout = json.loads(json.dumps({
            "partition": "".join(f"{v & (2**64 - 1):016x}" for v in manifest_fingerprint(part)),
            "world_size": len(fit.host_of), "host_of": fit.host_of, "plan": plan, "rows": rows,
            "hosts": [[h.topology, h.rows, int(c)] for h, c in zip(fit.hosts, cache_rows,
                                                                 strict=True)]}))
        # one placement per partition, world and hosts: another budget or plan replaces it
        where = {n: self.layout[n] for n in ("partition", "world_size", "host_of", "rows")}
        key = hashlib.sha256(json.dumps(where, sort_keys=True).encode()).hexdigest()[:16]
        self.dir = None if part.path is None else \
            Path(part.path) / PLACEMENT_DIR / key / f"host-{k}"

    def load(self, num_nodes: int) -> tuple[dict | None, str]:
        """The host cache as written (per type, ``(ids, rows)`` per slice, mapped read-only)
        and how it was chosen; ``None`` and why when a file is missing or does not match."""
        if self.dir is None:
            return None, "the partition was not loaded from a directory"
        try:
            meta = json.loads((self.dir / META).read_text())
            if meta.get("layout") != self.layout:
                return None, f"{self.dir / META} holds another decision (budget, plan)"
            out = {}
            for t, sizes in meta["slices"].items():
                dtype, cols = self.layout["rows"][t]
                out[t] = []
                for j, n in enumerate(sizes):
                    ids = map_array(self.dir / f"ids.{t}.{j}.{meta['tag']}.npy")
                    rows = map_array(self.dir / f"rows.{t}.{j}.{meta['tag']}.npy")
                    if (ids.dtype != np.int64 or ids.shape != (n,) or rows.dtype != dtype
                            or rows.shape != (n, cols) or (n and not (
                                0 <= ids[0] and ids[-1] < num_nodes
                                and (ids[1:] > ids[:-1]).all()))):
                        return None, f"slice {j} of type {t} does not hold what {META} says"
                    out[t].append((ids, rows))
            return out, meta["choice"]
        except FileNotFoundError as e:
            return None, f"no {e.filename}"
        except (OSError, ValueError, KeyError, TypeError) as e:
            return None, f"{self.dir}: {e}"

    def save(self, cache: dict, choice: str) -> None:
        """Write the host cache ``cache`` (per type, ``(ids, rows)`` per slice) and this
        placement, on the host's first rank; a directory that cannot be written is logged."""
        if not self.writer or self.dir is None:
            return
        tag = secrets.token_hex(4)  # new names: a reader of the last JSON maps its own files
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            for t, slices in cache.items():
                for j, (ids, rows) in enumerate(slices):
                    _write(self.dir / f"ids.{t}.{j}.{tag}.npy", ids)
                    _write(self.dir / f"rows.{t}.{j}.{tag}.npy", rows)
            meta = {"layout": self.layout, "host": self.report, "choice": choice, "tag": tag,
                    "slices": {t: [int(i.size) for i, _ in s] for t, s in cache.items()}}
            _write(self.dir / META, json.dumps(meta, indent=1).encode())
            for old in self.dir.glob("*.npy"):  # the placement it replaced (mapped ones stay)
                if not old.name.endswith(f".{tag}.npy"):
                    old.unlink(missing_ok=True)
        except OSError as e:
            log.info("placement not written beside the parts (%s); the next start decides it "
                     "again", e)


def _write(path: Path, data: np.ndarray | bytes) -> None:
    """An array (``.npy``, no pickle) or bytes under a temporary name, renamed to ``path``."""
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            if isinstance(data, bytes):
                f.write(data)
            else:
                np.save(f, data, allow_pickle=False)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def listing(parts: str | os.PathLike) -> list[dict]:
    """Every placement written beside the parts: per host, its report (:meth:`.Placement.report`),
    key, cache rows and the bytes of its files."""
    out = []
    for meta_path in sorted(Path(parts, PLACEMENT_DIR).glob(f"*/host-*/{META}")):
        try:
            meta = json.loads(meta_path.read_text())
            out.append({**meta["host"], "key": meta_path.parent.parent.name,
                        "cache_rows": sum(map(sum, meta["slices"].values())),
                        "bytes": sum(p.stat().st_size for p in meta_path.parent.iterdir())})
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out
