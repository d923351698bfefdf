"""Start-up agreement: every rank must serve its own part of one and the same partitioning.

A rank that loaded another directory (same graph, another seed or method) or another rank's
part would answer frontier requests from the wrong rows, silently. So before the first round
every rank hashes what it loaded (which part, the manifest's and its part's fingerprints, from
the checksums the manifest already holds) into a fixed-size int64 row; one all-gather (no
pickle) and every rank checks the table. Any difference raises the same
:class:`~mnmg_sampler.errors.PartitionMismatchError` on every rank, naming the ranks.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import torch
import torch.distributed as dist

from ..errors import MnmgError, PartitionMismatchError
from .collective import backend_device

__all__ = ["manifest_fingerprint", "part_fingerprint", "check_same_partitioning",
           "fingerprint_array", "check_same_on_every_rank"]

_WORDS = 3  # int64 words per fingerprint (192 bits of sha256)
_MANIFEST_KEYS = ("format_version", "num_nodes", "num_edges", "num_parts", "boundaries", "files")


def _digest(obj) -> list[int]:
    raw = hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode())
    return [int(v) for v in np.frombuffer(raw.digest()[: 8 * _WORDS], dtype="<i8")]


def manifest_fingerprint(part) -> list[int]:
    """Hash of what defines the partitioning: sizes, boundaries and every file's checksum.

    The manifest's ``source`` (paths, times) is left out, so copies of one directory on
    different nodes agree. A partition built in memory (no manifest) hashes its sizes and
    boundaries.
    """
    m = part.manifest or {}
    core = {k: m.get(k) for k in _MANIFEST_KEYS}
    if not m:
        core.update(num_nodes=int(part.num_nodes), num_edges=int(part.num_edges),
                    num_parts=int(part.num_parts),
                    boundaries=[int(b) for b in np.asarray(part.boundaries)])
    return _digest(core)


def part_fingerprint(part, index: int | None = None) -> list[int]:
    """Hash of part ``index`` (default: the loaded one): its files' checksums in the manifest,
    and, for the loaded part, the shapes of the arrays actually opened."""
    r = part.rank if index is None else index
    m = part.manifest or {}
    files = m.get("parts", [{}] * (r + 1))[r].get("files", {}) if m else {}
    entries = sorted((name, rel, m["files"][rel]["checksum"]) for name, rel in files.items())
    lo, hi = int(np.asarray(part.boundaries)[r]), int(np.asarray(part.boundaries)[r + 1])
    if not m:  # built in memory: nothing on disk to compare with
        shapes = None
    elif index is None or index == part.rank:
        shapes = [list(np.shape(a)) for a in (part.indptr, part.indices, part.edge_ids,
                                                part.orig_ids)]
    else:  # what part ``index``'s arrays must look like, from the manifest alone
        shapes = [m["files"][files[k]]["shape"] if k in files else None
                  for k in ("indptr", "indices", "edge_ids", "orig_ids")]
    return _digest({"part": r, "range": [lo, hi], "files": entries, "shapes": shapes})


def check_same_partitioning(part, group: dist.ProcessGroup | None = None) -> None:
    """Collective: raise :class:`PartitionMismatchError` on every rank unless each rank ``r``
    of ``group`` loaded part ``r`` of one and the same partitioning."""
    world = dist.get_world_size(group)
    table = _gather([int(part.rank), int(part.num_parts), *manifest_fingerprint(part),
                     *part_fingerprint(part)], group)
    problems = _problems(table, part, world)
    if problems:
        path = f" ({part.path})" if part.path is not None else ""
        raise PartitionMismatchError(
            "the ranks did not load one partitioning: " + "; ".join(problems),
            "their samples would mix rows of different partitionings (wrong edges), so no rank "
            f"samples; this rank loaded part {part.rank}{path}",
            "give every rank the same partition directory (one copy of a single "
            "`mnmg-sampler partition` run) and let rank r load part r",
        )


def _problems(table: list[list[int]], part, world: int) -> list[str]:
    """Human-readable differences in the gathered table; identical on every rank."""
    out = []
    wrong_part = [r for r, row in enumerate(table) if row[0] != r]
    if wrong_part:
        out.append(", ".join(f"rank {r} loaded part {table[r][0]}" for r in wrong_part))
    groups: dict[tuple, list[int]] = {}
    for r, row in enumerate(table):
        groups.setdefault(tuple(row[1:2 + _WORDS]), []).append(r)
    if len(groups) > 1:
        desc = " vs ".join(f"{_ranks(rs)} ({row[0]} parts, manifest "
                           f"{row[1] & 0xFFFFFFFF:08x})" for row, rs in groups.items())
        out.append(f"the manifests differ: {desc}")
        return out  # part fingerprints of different partitionings are not comparable
    if table[0][1] != world:
        out.append(f"the partitioning has {table[0][1]} parts for {world} ranks")
        return out
    # one manifest everywhere: each rank's part must be the one that manifest describes
    bad = [r for r, row in enumerate(table)
           if row[0] == r and row[2 + _WORDS:] != part_fingerprint(part, r)]
    if bad:
        out.append(f"{_ranks(bad)}: part does not match the manifest")
    return out


def _gather(values: list[int], group: dist.ProcessGroup | None) -> list[list[int]]:
    """Collective: every rank's ``values`` (one fixed-length int64 row each), by rank."""
    mine = torch.tensor([int(v) for v in values], dtype=torch.int64,
                        device=backend_device(group))
    rows = [torch.empty_like(mine) for _ in range(dist.get_world_size(group))]
    dist.all_gather(rows, mine, group=group)
    return [[int(v) for v in t.cpu().tolist()] for t in rows]


def _ranks(rs: list[int]) -> str:
    return ("rank " if len(rs) == 1 else "ranks ") + ", ".join(str(r) for r in rs)


def fingerprint_array(a: np.ndarray) -> list[int]:
    """Two int64 words of sha256 over an array's dtype, shape and bytes."""
    a = np.ascontiguousarray(a)
    h = hashlib.sha256(f"{a.dtype.str}{a.shape}".encode())
    h.update(a.data)
    return [int(v) for v in np.frombuffer(h.digest()[:16], dtype="<i8")]


def check_same_on_every_rank(values: list[int], what: str, consequence: str, fix: str, *,
                             error: type[MnmgError] = PartitionMismatchError,
                             group: dist.ProcessGroup | None = None) -> None:
    """Collective: raise ``error`` on every rank unless every rank passed the same ``values``
    (a fixed-length list of ints); the message names which ranks differ."""
    if dist.get_world_size(group) == 1:
        return
    groups: dict[tuple, list[int]] = {}
    for r, row in enumerate(_gather(values, group)):
        groups.setdefault(tuple(row), []).append(r)
    if len(groups) > 1:
        raise error(f"{what} differs between ranks: "
                    + " vs ".join(_ranks(rs) for rs in groups.values()),
                    consequence, fix)
