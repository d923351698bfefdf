"""Partition directories on disk: the manifest, checksums and :func:`load_partition`.

A directory holds ``manifest.json`` beside ``.npy`` arrays
(docs/formats.md#partition-directories). Each rank memory-maps only its own part after checking
its files' sizes and checksums against the manifest, so a truncated copy or a stale file fails
at start-up with the file's name instead of producing wrong samples later.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import PartitionError, WorldSizeError
from .datasets import _DEFAULT_UNDIRECTED
from .names import parse_dataset_name
from .typed import EDGE_TYPE, NODE_TYPE, TypedGraph, typed_layout

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "TYPED_FORMAT_VERSION",
    "MANIFEST",
    "PLACEMENT_DIR",
    "Partition",
    "TypedPart",
    "load_partition",
    "part_graph",
    "read_manifest",
    "file_checksum",
    "sample_checksums",
    "verify_part",
    "VERIFY_MODES",
    "input_identity",
    "make_source",
    "source_differences",
    "check_replaceable",
]

log = logging.getLogger(__name__)

FORMAT_NAME = "mnmg-sampler-partitions"
FORMAT_VERSION = 1
TYPED_FORMAT_VERSION = 2
"""Typed partition directories (a ``typed`` manifest section) carry this version, so a reader
that knows only homogeneous parts (version 1) refuses them by their version, not later on a
missing array or a misread ``indptr``."""
MANIFEST = "manifest.json"
PLACEMENT_DIR = "placement"  # what hosts hold, beside the parts (distributed/placement_files)
TMP_PREFIX = ".mnmg-partial-"  # directories being written (or left by a killed writer)
_CHUNK = 1 << 22
_EDGE_MB = 1 << 20  # bytes hashed at each end of an input file for its identity
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
    """Read and validate the manifest of partition directory ``path``; no array is opened, so
    it is cheap enough to call before the process group exists."""
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
    version_problem = _version_problem(manifest)
    if version_problem:
        raise PartitionError(f"{mpath}: {version_problem}", "the arrays may be laid out "
                             "differently", f"{_REDO} with this version, or install the "
                             "mnmg-sampler that wrote it")
    problem = _manifest_problem(manifest)
    if problem:
        raise PartitionError(f"{mpath} is inconsistent: {problem}",
                             "the directory cannot be loaded", _REDO)
    return manifest


def _version_problem(m: dict) -> str:
    """Why this reader cannot read manifest ``m``'s format version ('' when it can): version 1
    is homogeneous, :data:`TYPED_FORMAT_VERSION` typed (a ``typed`` section), nothing else."""
    version = m.get("format_version")
    typed = "typed" in m
    if typed and version != TYPED_FORMAT_VERSION:
        return (f"this partition directory is typed (format {version!r}); this mnmg-sampler "
                f"reads typed partitions of format {TYPED_FORMAT_VERSION}")
    if not typed and version == TYPED_FORMAT_VERSION:
        return (f"this partition directory says typed format {version} but its manifest has "
                "no 'typed' section")
    if not typed and version != FORMAT_VERSION:
        return (f"has format version {version!r}; this mnmg-sampler reads version "
                f"{FORMAT_VERSION} (homogeneous) and {TYPED_FORMAT_VERSION} (typed)")
    return ""


def _manifest_problem(m: dict) -> str:
    """What is wrong with the structure of manifest ``m`` ('' when nothing): every key the
    loader reads is checked here, so a damaged manifest is a :class:`PartitionError`, never a
    ``KeyError`` later."""
    for key, kind in (("num_nodes", int), ("num_edges", int), ("num_parts", int),
                      ("boundaries", list), ("parts", list), ("files", dict)):
        if key not in m:
            return f"key {key!r} is missing"
        if not isinstance(m[key], kind) or isinstance(m[key], bool):
            return f"{key!r} is not a {kind.__name__}"
    parts = m["num_parts"]
    b = m["boundaries"]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in b):
        return "'boundaries' holds a value that is not an integer"
    if (parts < 1 or len(b) != parts + 1 or b[0] != 0 or b[-1] != m["num_nodes"]
            or any(x > y for x, y in zip(b[:-1], b[1:], strict=True))):
        return "'boundaries' does not split [0, num_nodes) into num_parts ranges"
    if len(m["parts"]) != parts:
        return f"'parts' lists {len(m['parts'])} parts, 'num_parts' says {parts}"
    for r, p in enumerate(m["parts"]):
        if not isinstance(p, dict) or not isinstance(p.get("files"), dict):
            return f"part {r} has no 'files' mapping"
        for name, rel in p["files"].items():
            if rel not in m["files"]:
                return f"part {r}'s {name!r} ({rel!r}) is not listed in 'files'"
    for rel, e in m["files"].items():
        if not _plain_relative(rel):
            return (f"file {rel!r} is not a relative path inside the directory (no absolute "
                    "path, no '..', no backslash)")
        if not isinstance(e, dict):
            return f"the entry of {rel!r} is not a mapping"
        for key, kind in (("dtype", str), ("shape", list), ("bytes", int), ("checksum", str)):
            if key not in e:
                return f"key {key!r} is missing from the entry of {rel!r}"
            if not isinstance(e[key], kind) or isinstance(e[key], bool):
                return f"{key!r} of {rel!r} is not a {kind.__name__}"
    for rel in ("new_to_orig.npy", "orig_to_new.npy"):
        if rel not in m["files"]:
            return f"{rel!r} is not listed in 'files'"
    src = m.get("source")
    if src is not None and not isinstance(src, dict):
        return "'source' is not a mapping"
    return ""


def _plain_relative(rel: object) -> bool:
    """``rel`` names a file below the partition directory: relative, '/'-separated, without
    ``..``, ``.`` or empty components (what the writers produce)."""
    if not isinstance(rel, str) or not rel or "\\" in rel or "\0" in rel:
        return False
    if rel.startswith("/") or os.path.isabs(rel) or os.path.splitdrive(rel)[0]:
        return False
    return all(c not in ("", ".", "..") for c in rel.split("/"))


def part_file(d: Path, rel: str) -> Path:
    """``d / rel``, or a :class:`PartitionError` when it resolves outside ``d`` (``..`` or a
    symbolic link leading out): a manifest never makes a rank read a file it does not own."""
    path = d / rel
    if not _plain_relative(rel) or not path.resolve().is_relative_to(d.resolve()):
        raise PartitionError(
            f"{d / MANIFEST} names {rel!r}, which resolves outside {d}",
            "files outside a partition directory are never read",
            f"keep every part file inside the directory (no '..', no symbolic link leading "
            f"out), or {_REDO}")
    return path


def _ends_digest(path: Path, size: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read(_EDGE_MB))
        if size > 2 * _EDGE_MB:
            f.seek(size - _EDGE_MB)
        h.update(f.read(_EDGE_MB))
    return h.hexdigest()


def input_identity(spec: str | os.PathLike) -> dict:
    """What a graph spec (or a node data file) names, for the manifest's ``source``.

    A built-in dataset by name; a generator by its arguments; a file by its resolved path, size,
    modification time and a sha256 of its first and last MiB (cheap, and it changes when the
    file's content is replaced, which is what makes partitions stale); a directory (e.g. an OGB
    dataset) by the same for every file in it.
    """
    text = str(spec)
    key = text.strip().lower()
    ds = parse_dataset_name(key)  # a generator's spec is valid here: its graph was made
    if ds.kind == "builtin":
        return {"kind": "builtin", "name": key}
    if ds.kind == "rmat":
        return {"kind": "generator", "name": "rmat", "scale": ds.scale,
                "edge_factor": ds.edge_factor}
    if ds.kind == "typed-sbm":
        return {"kind": "generator", "name": "typed-sbm", "papers": ds.papers,
                "classes": ds.classes}
    if ds.kind == "typed-useritem":  # version 2: tastes through 4 communities (1 is stale)
        return {"kind": "generator", "name": key.split(":")[0], "users": ds.users,
                "items": ds.items, **({"version": 2} if ds.temporal else {})}
    path = Path(text).expanduser()
    if path.is_file():
        st = path.stat()
        return {"kind": "file", "path": str(path.resolve()), "bytes": st.st_size,
                "mtime_ns": st.st_mtime_ns, "sha256_ends": _ends_digest(path, st.st_size)}
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file())
        h = hashlib.sha256()
        total = 0
        for f in files:
            size = f.stat().st_size
            total += size
            h.update(f"{f.relative_to(path).as_posix()}\0{size}\0"
                     f"{_ends_digest(f, size)}\n".encode())
        return {"kind": "directory", "path": str(path.resolve()), "bytes": total,
                "sha256_ends": h.hexdigest()}
    return {"kind": "unknown", "spec": text}


def make_source(spec: str | os.PathLike, *, method: str, seed: int, parts: int,
                undirected: bool | None = None, drop_self_loops: bool = False,
                drop_duplicates: bool = False, graph_seed: int = 0,
                feature_dim: int = 0, node_data: dict[str, str | None] | None = None,
                renumber: str | bool = "auto") -> dict:
    """The manifest's ``source``: the input's identity, the options it was loaded with (as
    :func:`~.datasets.load_graph` takes them, ``undirected`` resolved to the dataset default),
    the identities of separate node data files (``node_data``: e.g. ``features``, ``labels``,
    ``train_mask``; ``None`` entries are left out) and the partitioning settings.
    ``graph_seed`` is kept only where it changes the graph (generators, random features of
    ``feature_dim`` columns), ``renumber`` only when it is not the default ``auto``."""
    ident = input_identity(spec)
    if undirected is None:
        undirected = _DEFAULT_UNDIRECTED.get(str(spec).strip().lower(), False)
    load: dict = {"undirected": bool(undirected), "drop_self_loops": bool(drop_self_loops),
                  "drop_duplicates": bool(drop_duplicates), "feature_dim": int(feature_dim)}
    if ident["kind"] == "generator" or feature_dim:
        load["seed"] = int(graph_seed)
    renumber = ("true" if renumber else "false") if isinstance(renumber, bool) else str(renumber)
    if renumber != "auto":
        load["renumber"] = renumber
    return {"input": ident, "load": load,
            "node_data": {k: input_identity(v) for k, v in sorted((node_data or {}).items())
                          if v is not None},
            "partition": {"method": str(method), "seed": int(seed), "parts": int(parts)}}


_SAME_CONTENT = ("kind", "bytes", "sha256_ends")  # path and mtime: a copy is the same input


def _same_input(have: dict, want: dict) -> bool:
    if want.get("kind") == "unknown":
        return False
    if want.get("kind") in ("file", "directory"):
        return all(have.get(k) == want.get(k) for k in _SAME_CONTENT)
    return have == want


def source_differences(manifest: dict, want: dict) -> list[str]:
    """How the directory's recorded source differs from ``want`` (a :func:`make_source`);
    ``["no source recorded ..."]`` for a manifest written before sources were recorded."""
    have = manifest.get("source")
    if not isinstance(have, dict):
        return ["no source recorded (written by an older mnmg-sampler)"]
    out = []
    if not _same_input(have.get("input") or {}, want["input"]):
        out.append(f"input {_brief(have.get('input') or {})} -> {_brief(want['input'])}")
    hn, wn = have.get("node_data") or {}, want.get("node_data") or {}
    for k in sorted(set(hn) | set(wn)):
        if k not in hn or k not in wn or not _same_input(hn[k], wn[k]):
            out.append(f"node data {k} {_brief(hn.get(k))} -> {_brief(wn.get(k))}")
    for section in ("load", "partition"):
        h, w = have.get(section) or {}, want[section]
        for k in sorted(set(h) | set(w)):
            if h.get(k) != w.get(k):
                out.append(f"{section}.{k} {h.get(k)!r} -> {w.get(k)!r}")
    return out


def _brief(identity: dict | None) -> str:
    if not identity:
        return "none"
    if identity.get("kind") in ("file", "directory"):
        return f"{identity['kind']} {identity.get('path')} ({identity.get('bytes')} bytes)"
    if identity.get("kind") == "generator":
        return f"rmat:{identity.get('scale')}:{identity.get('edge_factor')}"
    return str(identity.get("name") or identity.get("spec") or identity or "?")


def check_replaceable(out: str | os.PathLike) -> None:
    """Raise :class:`PartitionError` unless ``out`` may be replaced by a new partitioning.

    Replaceable: a missing path, an empty directory, or a partition directory of ours (a
    manifest whose ``format`` is ours) holding nothing but what a partition directory holds.
    Anything else (a file, a foreign directory, ours with foreign files added) is refused, so
    ``--overwrite`` never deletes data it did not write.
    """
    d = Path(out)
    if not d.exists() and not d.is_symlink():
        return
    refuse = "it is left untouched"
    fix = "choose another --out (partition.dir), or move the directory away yourself"
    if not d.is_dir():
        raise PartitionError(f"{d} exists and is not a directory", refuse, fix)
    entries = sorted(p.name for p in d.iterdir())
    if not entries:
        return
    try:
        manifest = json.loads((d / MANIFEST).read_text())
        ours = isinstance(manifest, dict) and manifest.get("format") == FORMAT_NAME
    except (OSError, ValueError):
        ours = False
    if not ours:
        raise PartitionError(
            f"{d} is not empty and holds no mnmg-sampler partition manifest",
            f"it is not a partition directory, so {refuse}", fix)
    files = manifest.get("files") if isinstance(manifest.get("files"), dict) else {}
    known = {MANIFEST, MANIFEST + ".tmp", PLACEMENT_DIR} | {str(rel).split("/")[0]
                                                             for rel in files}
    foreign = [e for e in entries if e not in known]
    if foreign:
        raise PartitionError(
            f"partition directory {d} also holds {', '.join(foreign[:5])}"
            + (" ..." if len(foreign) > 5 else ""),
            f"these were not written by mnmg-sampler, so {refuse}",
            f"move them out of {d} and run again, or choose another --out")


_UNOPENED = object()


class _GlobalMap:
    """A global id map field of :class:`Partition`: the file is memory-mapped on first access
    only (tools, tests), so loading a part maps nothing of num_nodes size; sampling never
    reads it (:mod:`mnmg_sampler.distributed.id_maps`)."""

    def __init__(self, optional: bool = False) -> None:
        self.optional = optional  # node_ids.npy exists only for a renumbered graph

    def __set_name__(self, owner, name: str) -> None:
        self.name, self.slot = name, "_" + name

    def __get__(self, part, owner=None):
        if part is None:
            return _UNOPENED  # the dataclass default
        value = part.__dict__.get(self.slot, _UNOPENED)
        if value is _UNOPENED:
            if part.path is None or not part.manifest or (
                    self.optional and f"{self.name}.npy" not in part.manifest.get("files", {})):
                return None
            value = _open(Path(part.path), f"{self.name}.npy", part.manifest)
            part.__dict__[self.slot] = value
        return value

    def __set__(self, part, value) -> None:
        part.__dict__[self.slot] = value


@dataclass(eq=False)
class TypedPart:
    """The types of a part (:mod:`.partition`): local rows are grouped by type
    (``type_offset``), each row cut into one segment per relation of its type.

    Attributes:
        node_types, edge_types: as :class:`~.typed.TypedGraph` (sorted the same way).
        node_type_offset: int64 ``[T + 1]`` of the whole graph (internal id = offset + per-type
            id; ``orig_ids`` of the part are internal ids).
        type_offset: int64 ``[T + 1]`` first local row of each type.
        rel_offset, rel_src, rel_dst, weighted, seg_base: the kernel's tables (``seg_base`` for
            the local rows).
        x, y: owned rows per type; masks: ``{type: {split: bool}}`` of owned rows.
        edge_time, node_time, time_attr: the graph's times (per local entry, per owned node)
            and their name, or ``None``.
    """

    node_types: tuple[str, ...]
    edge_types: tuple[tuple[str, str, str], ...]
    node_type_offset: np.ndarray
    type_offset: np.ndarray
    rel_offset: np.ndarray
    rel_src: np.ndarray
    rel_dst: np.ndarray
    weighted: np.ndarray
    seg_base: np.ndarray
    x: dict[str, np.ndarray] = field(default_factory=dict)
    y: dict[str, np.ndarray] = field(default_factory=dict)
    masks: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    edge_time: np.ndarray | None = None
    node_time: np.ndarray | None = None
    time_attr: str | None = None

    @property
    def num_segments(self) -> int:
        return int((np.diff(self.type_offset) * np.diff(self.rel_offset)).sum())


def _typed_part(section: dict, files: dict, get) -> TypedPart:
    """The :class:`TypedPart` of a manifest's ``typed`` section (structure checked first)."""
    try:
        node_types = tuple(str(t) for t in section["node_types"])
        edge_types = tuple((str(a), str(b), str(c)) for a, b, c in section["edge_types"])
        node_off = np.asarray(section["node_type_offset"], np.int64)
        weighted = np.asarray(section["weighted"], np.uint8)
        type_offset = np.asarray(get("type_offset") if "type_offset" in files else None,
                                 np.int64)
        lay = typed_layout(dict(zip(node_types, np.diff(type_offset).tolist(), strict=True)),
                           edge_types)
    except (KeyError, TypeError, ValueError) as e:
        raise PartitionError(f"the manifest's 'typed' section is damaged ({e!r})",
                             "the typed part cannot be loaded", _REDO) from e
    if (node_off.shape != (len(node_types) + 1,) or weighted.shape != (len(edge_types),)
            or lay.node_types != node_types or lay.edge_types != edge_types):
        raise PartitionError("the manifest's 'typed' section does not match its types",
                             "the typed part cannot be loaded", _REDO)
    x, y, masks = {}, {}, {}
    for key in files:
        kind, _, rest = key.partition(".")
        if kind == "x":
            x[rest] = get(key)
        elif kind == "y":
            y[rest] = get(key)
        elif kind == "mask":
            t, _, split = rest.rpartition(".")
            masks.setdefault(t, {})[split] = get(key)
    return TypedPart(node_types, edge_types, node_off, type_offset, lay.rel_offset, lay.rel_src,
                     lay.rel_dst, weighted, lay.seg_base, x, y, masks,
                     get("edge_time") if "edge_time" in files else None,
                     get("node_time") if "node_time" in files else None,
                     section.get("time_attr"))


@dataclass(eq=False)
class Partition:
    """One rank's part of a partitioned graph, memory-mapped.

    Local row ``i`` is new (global) id ``boundaries[rank] + i``, original id ``orig_ids[i]``:
    keying the RNG on ``orig_ids`` gives exactly the draws of the unpartitioned graph.

    Attributes:
        boundaries: int64 ``[num_parts + 1]``.
        num_nodes, num_edges: of the whole graph.
        indptr: int64 local row offsets ``[num_local_nodes + 1]``.
        indices: int64 new global ids of each row's neighbors, in the input's canonical order.
        edge_ids: int64 original edge id of each entry.
        orig_ids: int64 original id of each owned node.
        x, y: owned feature rows and labels, or ``None``.
        weights: float32 weight of each local CSR entry (weighted sampling), or ``None``.
        masks: owned slices of boolean node masks by split name.
        new_to_orig, orig_to_new: int64 ``[num_nodes]`` id maps of the whole graph, for tools
            only (memory-mapped on first access; samplers use
            :class:`~mnmg_sampler.distributed.id_maps.IdMaps`).
        node_ids: for a renumbered graph, int64 ``[num_nodes]``: the input's id of each
            original id, ascending, as ``n_id`` shows and loaders take seeds (else ``None``).
        typed: a typed part's types and per-type node data (:class:`TypedPart`; ``indptr``
            is then over (node, relation) segments and ``orig_ids`` are internal ids), or
            ``None`` for a homogeneous part.
    """

    def __repr__(self) -> str:
        return (f"Partition(rank={self.rank}, num_parts={self.num_parts}, "
                f"num_nodes={self.num_nodes}, num_edges={self.num_edges}, "
                f"local_nodes={self.num_local_nodes}, path={str(self.path)!r})")

    rank: int
    num_parts: int
    boundaries: np.ndarray
    num_nodes: int
    num_edges: int
    indptr: np.ndarray
    indices: np.ndarray
    edge_ids: np.ndarray
    orig_ids: np.ndarray
    new_to_orig: np.ndarray | None = _GlobalMap()  # type: ignore[assignment]
    orig_to_new: np.ndarray | None = _GlobalMap()  # type: ignore[assignment]
    node_ids: np.ndarray | None = _GlobalMap(optional=True)  # type: ignore[assignment]
    x: np.ndarray | None = None
    y: np.ndarray | None = None
    masks: dict[str, np.ndarray] = field(default_factory=dict)
    weights: np.ndarray | None = None
    path: Path | None = None
    manifest: dict = field(default_factory=dict, repr=False)
    typed: TypedPart | None = None

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

    def input_ids(self, ids: np.ndarray) -> np.ndarray:
        """The input's ids of original ids: themselves, or ``node_ids[ids]`` when renumbered."""
        ids = np.asarray(ids, dtype=np.int64)
        node_ids = self.node_ids
        return ids if node_ids is None else np.asarray(node_ids[ids], dtype=np.int64)

    @property
    def num_local_edges(self) -> int:
        return int(self.indices.shape[0])

    @property
    def layout(self) -> TypedPart:
        """The part's types: :attr:`typed`, or for a homogeneous part its one type and one
        relation (:data:`~.typed.NODE_TYPE`, :data:`~.typed.EDGE_TYPE`), node data under it."""
        if self.typed is not None:
            return self.typed
        zero = np.zeros(1, np.int64)
        return TypedPart((NODE_TYPE,), (EDGE_TYPE,), np.array([0, self.num_nodes], np.int64),
                         np.array([0, self.num_local_nodes], np.int64),
                         np.array([0, 1], np.int64), zero, zero,
                         np.array([self.weights is not None], np.uint8), zero,
                         {} if self.x is None else {NODE_TYPE: self.x},
                         {} if self.y is None else {NODE_TYPE: self.y},
                         {NODE_TYPE: dict(self.masks)} if self.masks else {})


def part_graph(part: Partition) -> TypedGraph:
    """A part as the :class:`~.typed.TypedGraph` the typed kernel reads: rows are the part's
    local rows (``type_offset`` in place of the internal offsets), ``indices`` new global ids;
    key the RNG on ``part.orig_ids[rows]`` (internal ids). A homogeneous part is its one type
    and one relation (:attr:`Partition.layout`)."""
    tp = part.layout
    weights = None if part.weights is None else np.asarray(part.weights)
    return TypedGraph(tp.node_types, tp.edge_types, tp.type_offset, tp.rel_offset, tp.seg_base,
                      np.asarray(part.indptr), np.asarray(part.indices),
                      np.asarray(part.edge_ids), tp.rel_src, tp.rel_dst, weights, tp.weighted,
                      name=str(part.path))


def _open(d: Path, rel: str, manifest: dict) -> np.ndarray:
    entry = manifest["files"].get(rel)
    if entry is None:
        raise PartitionError(f"{d / MANIFEST} does not list {rel}",
                             "the directory cannot be loaded", _REDO)
    path = part_file(d, rel)
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
            f"partition again for {world_size} ranks (`mnmg-sampler partition INPUT --parts "
            f"{world_size} ...`), or launch {parts} ranks in total "
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
        x=get("x"),
        y=get("y"),
        masks={k[len("mask_"):]: get(k) for k in files if k.startswith("mask_")},
        weights=get("weights"),
        path=d,
        manifest=manifest,
    )
    n_local = int(b[rank + 1] - b[rank])
    if "typed" in manifest:
        part.typed = _typed_part(manifest["typed"], files, get)
    tp = part.layout  # a homogeneous part: one type, one relation
    if (tp.type_offset.shape != tp.node_type_offset.shape or tp.type_offset[0] != 0
            or tp.type_offset[-1] != n_local or np.any(np.diff(tp.type_offset) < 0)):
        raise PartitionError(f"part {rank} of {d}: type_offset does not match its "
                             "boundaries", "the part cannot be loaded", _REDO)
    if (part.indptr.shape[0] != tp.num_segments + 1 or part.orig_ids.shape[0] != n_local
            or int(part.indptr[-1]) != part.indices.shape[0]
            or part.edge_ids.shape[0] != part.indices.shape[0]
            or (part.weights is not None and (part.weights.shape != part.indices.shape
                                              or part.weights.dtype != np.float32))):
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
_STAMP = "part{rank}/.verified.json"  # inside the part: check_replaceable knows part{r}/


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
    """The files rank ``rank`` verifies: its part's (no rank reads the global id maps)."""
    return list(manifest["parts"][rank]["files"].values())


def _check_file(d: Path, rel: str, entry: dict, mode: str) -> None:
    path = part_file(d, rel)
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
        st = part_file(d, rel).stat()
        sig[rel] = [st.st_size, st.st_mtime_ns, manifest["files"][rel]["checksum"]]
    return sig


def verify_part(d: Path, manifest: dict, rank: int, verify: bool | str = "auto") -> str:
    """Check the checksums of the files rank ``rank`` owns; returns what was done.

    ``full`` reads every byte, ``sampled`` the blocks listed in the manifest, ``off`` nothing.
    A passed check writes a stamp ``part{rank}/.verified.json`` (size, mtime, checksum per
    file; skipped on a read-only directory), so a later start with matching files skips the
    reading (``"stamped"``). Missing or resized files are reported by the loader.
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
