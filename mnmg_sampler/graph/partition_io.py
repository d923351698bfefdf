"""Partition directories on disk: the manifest, checksums and :func:`load_partition`.

A partition directory holds ``manifest.json`` beside ``.npy`` arrays (layout in
``docs/formats.md``, section "Partition directories"). Each rank memory-maps only its own part
plus the global id maps, after checking every file's size and checksum against the manifest, so
a truncated copy or a stale file fails at start-up with the file's name instead of producing
wrong samples later.
"""

from __future__ import annotations

import json
import logging
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import PartitionError, WorldSizeError

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "MANIFEST",
    "Partition",
    "load_partition",
    "read_manifest",
    "file_checksum",
    "sample_checksums",
    "verify_part",
    "VERIFY_MODES",
]

log = logging.getLogger(__name__)

FORMAT_NAME = "mnmg-sampler-partitions"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
TMP_PREFIX = ".mnmg-partial-"  # directories being written (or left by a killed writer)
_CHUNK = 1 << 22
_REDO = "re-run `mnmg-sampler partition INPUT --parts N --method M --out DIR --overwrite`"


def file_checksum(path: str | os.PathLike) -> str:
    """``crc32:xxxxxxxx`` of a file's bytes, read in chunks (fast; catches corruption)."""
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            crc = zlib.crc32(chunk, crc)
    return f"crc32:{crc & 0xFFFFFFFF:08x}"


def file_entry(path: Path, arr: np.ndarray) -> dict:
    """The manifest entry of a written ``.npy`` file (``samples``: see :func:`sample_checksums`)."""
    entry = {
        "dtype": np.dtype(arr.dtype).str,
        "shape": [int(s) for s in arr.shape],
        "bytes": path.stat().st_size,
        "checksum": file_checksum(path),
    }
    samples = sample_checksums(path)
    if samples:
        entry["samples"] = samples
    return entry


def write_manifest(directory: Path, manifest: dict) -> None:
    """Write ``manifest.json`` durably (tmp file, fsync, rename)."""
    tmp = directory / (MANIFEST + ".tmp")
    with open(tmp, "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, directory / MANIFEST)


def read_manifest(path: str | os.PathLike) -> dict:
    """Read and validate the manifest of partition directory ``path`` (no array is opened).

    Cheap enough to call before the process group exists, e.g. to compare ``num_parts`` with
    the world size.
    """
    d = Path(path)
    if d.name.startswith(TMP_PREFIX):
        raise PartitionError(
            f"{d} is the temporary directory of an unfinished partition write",
            "its contents may be incomplete",
            f"delete it and {_REDO}",
        )
    if not d.is_dir():
        raise PartitionError(
            f"partition directory {d} does not exist",
            "there is no graph to load",
            "create it with `mnmg-sampler partition INPUT --parts N --method M --out DIR` "
            "or fix the path",
        )
    mpath = d / MANIFEST
    if not mpath.is_file():
        raise PartitionError(
            f"{mpath} is missing",
            f"{d} is not a complete partition directory (or its write was interrupted)",
            _REDO,
        )
    try:
        manifest = json.loads(mpath.read_text())
    except (OSError, ValueError) as e:
        raise PartitionError(f"{mpath} cannot be read as JSON ({e})",
                             "the partition directory cannot be used", _REDO) from e
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        raise PartitionError(f"{mpath} is not an mnmg-sampler partition manifest",
                             "the directory cannot be loaded", _REDO)
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise PartitionError(
            f"{mpath} has format version {version!r}; this mnmg-sampler reads version "
            f"{FORMAT_VERSION}",
            "the arrays may be laid out differently",
            f"{_REDO} with this version, or install the mnmg-sampler that wrote it",
        )
    try:
        b = np.asarray(manifest["boundaries"], dtype=np.int64)
        parts = int(manifest["num_parts"])
        ok = (b.ndim == 1 and b.shape[0] == parts + 1 and b[0] == 0
              and b[-1] == int(manifest["num_nodes"]) and bool(np.all(np.diff(b) >= 0))
              and len(manifest["parts"]) == parts and isinstance(manifest["files"], dict))
    except (KeyError, TypeError, ValueError):
        ok = False
    if not ok:
        raise PartitionError(f"{mpath} is inconsistent (boundaries, num_parts or files)",
                             "the directory cannot be loaded", _REDO)
    return manifest


@dataclass
class Partition:
    """One rank's part of a partitioned graph, memory-mapped.

    New ids are global: part ``r`` owns ``[boundaries[r], boundaries[r+1])`` and local row ``i``
    is new id ``boundaries[r] + i``, original id ``orig_ids[i]``. Key the sampling RNG on
    ``orig_ids`` and map results back with ``new_to_orig`` to get exactly the draws of the
    unpartitioned graph.

    Attributes:
        rank, num_parts: this part and how many there are.
        boundaries: int64 ``[num_parts + 1]``.
        num_nodes, num_edges: of the whole graph.
        indptr: int64 local row offsets ``[num_local_nodes + 1]``.
        indices: int64 new global ids of each row's neighbors, in the input's canonical order.
        edge_ids: int64 original edge id of each entry.
        orig_ids: int64 original id of each owned node.
        x, y: owned feature rows and labels, or ``None``.
        masks: owned slices of boolean node masks by split name.
        new_to_orig, orig_to_new: int64 ``[num_nodes]`` id maps of the whole graph.
        path, manifest: where it came from.
    """

    rank: int
    num_parts: int
    boundaries: np.ndarray
    num_nodes: int
    num_edges: int
    indptr: np.ndarray
    indices: np.ndarray
    edge_ids: np.ndarray
    orig_ids: np.ndarray
    new_to_orig: np.ndarray
    orig_to_new: np.ndarray
    x: np.ndarray | None = None
    y: np.ndarray | None = None
    masks: dict[str, np.ndarray] = field(default_factory=dict)
    path: Path | None = None
    manifest: dict = field(default_factory=dict, repr=False)

    @property
    def start(self) -> int:
        """First new id owned by this part."""
        return int(self.boundaries[self.rank])

    @property
    def end(self) -> int:
        """One past the last new id owned by this part."""
        return int(self.boundaries[self.rank + 1])

    @property
    def num_local_nodes(self) -> int:
        return self.end - self.start

    @property
    def num_local_edges(self) -> int:
        return int(self.indices.shape[0])


def _open(d: Path, rel: str, manifest: dict) -> np.ndarray:
    entry = manifest["files"].get(rel)
    path = d / rel
    if entry is None:
        raise PartitionError(f"{d / MANIFEST} does not list {rel}",
                             "the directory cannot be loaded", _REDO)
    if not path.is_file():
        raise PartitionError(f"{path} is missing", "this rank's part cannot be loaded",
                             f"copy the whole partition directory again, or {_REDO}")
    size = path.stat().st_size
    if size != entry["bytes"]:
        raise PartitionError(
            f"{path} has {size} bytes but the manifest says {entry['bytes']}",
            "the file is truncated or from another partitioning",
            f"copy the whole partition directory again, or {_REDO}",
        )
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as e:
        raise PartitionError(f"{path} is not a readable .npy file ({e})",
                             "this rank's part cannot be loaded", _REDO) from e
    if np.dtype(arr.dtype).str != entry["dtype"] or list(arr.shape) != entry["shape"]:
        raise PartitionError(
            f"{path} holds {arr.dtype}{list(arr.shape)} but the manifest says "
            f"{entry['dtype']}{entry['shape']}",
            "the file is from another partitioning",
            _REDO,
        )
    return arr


def load_partition(
    path: str | os.PathLike, rank: int, world_size: int | None = None, *,
    verify: bool | str = True,
) -> Partition:
    """Memory-map part ``rank`` of partition directory ``path``.

    Args:
        path: a directory written by :func:`mnmg_sampler.graph.partition.write_partitions`.
        rank: which part to open (this process's rank).
        world_size: when given, must equal the number of parts (:class:`WorldSizeError`).
        verify: checksums of this rank's files: ``"full"`` (or ``True``: every byte),
            ``"sampled"`` (a few blocks per file), ``"off"`` (or ``False``), ``"auto"`` (full up
            to 1 GiB per part, else sampled); see :func:`verify_part`. Sizes, dtypes and shapes
            are always checked.

    Raises:
        PartitionError: missing or corrupt directory, manifest or file (the message names it).
        WorldSizeError: ``world_size`` differs from the number of parts.
    """
    d = Path(path)
    manifest = read_manifest(d)
    parts = int(manifest["num_parts"])
    if world_size is not None and int(world_size) != parts:
        raise WorldSizeError(
            f"{d} has {parts} parts but the job runs {world_size} ranks",
            "each rank serves exactly one part",
            f"re-partition with `--parts {world_size}`, or launch {parts} ranks in total "
            f"(e.g. `torchrun --nproc-per-node {parts}` on one node)",
        )
    if isinstance(rank, bool) or not 0 <= int(rank) < parts:
        raise PartitionError(f"rank {rank} is out of range for {d} with {parts} parts",
                             "there is no such part", f"pass a rank in [0, {parts})")
    rank = int(rank)
    files = manifest["parts"][rank]["files"]

    def get(key: str) -> np.ndarray | None:
        rel = files.get(key)
        return None if rel is None else _open(d, rel, manifest)

    required = ("indptr", "indices", "edge_ids", "orig_ids")
    missing = [k for k in required if k not in files]
    if missing:
        raise PartitionError(f"{d / MANIFEST} lists no {', '.join(missing)} for part {rank}",
                             "the part cannot be loaded", _REDO)
    verify_part(d, manifest, rank, verify)
    b = np.asarray(manifest["boundaries"], dtype=np.int64)
    part = Partition(
        rank=rank,
        num_parts=parts,
        boundaries=b,
        num_nodes=int(manifest["num_nodes"]),
        num_edges=int(manifest["num_edges"]),
        indptr=get("indptr"),
        indices=get("indices"),
        edge_ids=get("edge_ids"),
        orig_ids=get("orig_ids"),
        new_to_orig=_open(d, "new_to_orig.npy", manifest),
        orig_to_new=_open(d, "orig_to_new.npy", manifest),
        x=get("x"),
        y=get("y"),
        masks={k[len("mask_"):]: get(k) for k in files if k.startswith("mask_")},
        path=d,
        manifest=manifest,
    )
    n_local = int(b[rank + 1] - b[rank])
    if (part.indptr.shape[0] != n_local + 1 or part.orig_ids.shape[0] != n_local
            or int(part.indptr[-1]) != part.indices.shape[0]
            or part.edge_ids.shape[0] != part.indices.shape[0]):
        raise PartitionError(f"part {rank} of {d} does not match its boundaries",
                             "the part cannot be loaded", _REDO)
    log.debug("loaded part %d/%d of %s: %d nodes, %d edges", rank, parts, d, n_local,
              part.num_local_edges)
    return part


# -- start-up verification ------------------------------------------------------------------
VERIFY_MODES = ("auto", "full", "sampled", "off")
AUTO_FULL_BYTES = 1 << 30
"""``auto`` verification reads every byte of a part up to this size, else samples blocks."""
SAMPLE_BLOCKS = 8
SAMPLE_BLOCK = 1 << 16
_STAMP = ".verified-part{rank}.json"


def sample_checksums(path: str | os.PathLike) -> list[str]:
    """CRC32 of :data:`SAMPLE_BLOCKS` blocks of :data:`SAMPLE_BLOCK` bytes spread evenly over a
    file (first and last included), or ``[]`` for a file small enough to check whole."""
    size = os.stat(path).st_size
    if size <= SAMPLE_BLOCKS * SAMPLE_BLOCK:
        return []
    out = []
    with open(path, "rb") as f:
        for i in range(SAMPLE_BLOCKS):
            f.seek(i * (size - SAMPLE_BLOCK) // (SAMPLE_BLOCKS - 1))
            out.append(f"crc32:{zlib.crc32(f.read(SAMPLE_BLOCK)) & 0xFFFFFFFF:08x}")
    return out


def _mode(verify: bool | str) -> str:
    if verify is True:
        return "full"
    if verify is False or verify is None:
        return "off"
    if verify not in VERIFY_MODES:
        raise PartitionError(f"unknown verification mode {verify!r}",
                             "the partition cannot be checked",
                             f"use one of {', '.join(VERIFY_MODES)}")
    return verify


def _own_files(manifest: dict, rank: int) -> list[str]:
    """The files rank ``rank`` verifies: its part's, plus the global id maps on rank 0."""
    rels = list(manifest["parts"][rank]["files"].values())
    if rank == 0:
        rels += [r for r in ("new_to_orig.npy", "orig_to_new.npy") if r in manifest["files"]]
    return rels


def _check_file(d: Path, rel: str, entry: dict, mode: str) -> None:
    path = d / rel
    if mode == "sampled" and entry.get("samples"):
        got, want = sample_checksums(path), entry["samples"]
        what = "sampled blocks"
    else:
        got, want = file_checksum(path), entry["checksum"]
        what = "checksum"
    if got != want:
        raise PartitionError(
            f"{path} has {what} {got} but the manifest says {want}",
            "the file is corrupt or from another partitioning",
            f"copy the whole partition directory again, or {_REDO}",
        )


def _signature(d: Path, rels: list[str], manifest: dict) -> dict:
    sig = {}
    for rel in rels:
        st = (d / rel).stat()
        sig[rel] = [st.st_size, st.st_mtime_ns, manifest["files"][rel]["checksum"]]
    return sig


def verify_part(d: Path, manifest: dict, rank: int, verify: bool | str = "auto") -> str:
    """Check the checksums of the files rank ``rank`` owns; returns what was done.

    Each rank reads only its own part's files (rank 0 also the global id maps): ``full`` every
    byte, ``sampled`` the blocks listed in the manifest (``samples``; whole files when small),
    ``off`` nothing. After a check passes, a stamp ``.verified-part{rank}.json`` records each
    file's size, mtime and manifest checksum; a later start whose files still match the stamp
    skips the reading (``"stamped"``). A stamp that cannot be written (read-only directory) is
    skipped. Missing or resized files are reported by the loader, not here.
    """
    mode = _mode(verify)
    if mode == "off":
        return "off"
    rels = [r for r in _own_files(manifest, rank) if r in manifest["files"]
            and (d / r).is_file()]
    if mode == "auto":
        total = sum(manifest["files"][r]["bytes"] for r in rels)
        mode = "full" if total <= AUTO_FULL_BYTES else "sampled"
    stamp = d / _STAMP.format(rank=rank)
    sig = _signature(d, rels, manifest)
    try:
        old = json.loads(stamp.read_text())
    except (OSError, ValueError):
        old = None
    if isinstance(old, dict) and old.get("files") == sig and \
            (old.get("mode") == "full" or old.get("mode") == mode):
        log.debug("part %d of %s: verified stamp matches, not rereading", rank, d)
        return "stamped"
    for rel in rels:
        _check_file(d, rel, manifest["files"][rel], mode)
    try:
        tmp = stamp.with_name(stamp.name + f".tmp-{os.getpid()}")
        tmp.write_text(json.dumps({"mode": mode, "files": sig}, sort_keys=True))
        os.replace(tmp, stamp)
    except OSError as e:
        log.debug("cannot write verified stamp %s (%s)", stamp, e)
    return mode
