"""Training checkpoints: tensors and plain types only, written atomically, read without code.

A checkpoint (docs/formats.md#training-checkpoints-outputdircheckpoints) is read with
``torch.load(weights_only=True)``, which refuses any object that needs code to rebuild (a
:class:`~mnmg_sampler.errors.CheckpointError`, never silently skipped). Each rank writes its
embedding rows before rank 0 writes the checkpoint (so its rows always exist); a resume at any
world size keeps the rows it owns. A file that is not a complete zip archive (a copy cut short, a
full disk) is not a checkpoint: :func:`load_latest` falls back to the previous one. Only names
this module writes are ever read or pruned.
"""

from __future__ import annotations

import logging
import os
import re
import zipfile
from pathlib import Path

import torch

from ..errors import CheckpointError

__all__ = ["PREFIX", "list_checkpoints", "save_checkpoint", "load_checkpoint", "load_latest",
           "check_model_state", "agree_on_checkpoint", "save_rows", "load_rows"]

log = logging.getLogger(__name__)

PREFIX = "checkpoint-epoch"
_NAME = re.compile(rf"^{PREFIX}(\d{{5,}})\.pt$")
_ROWS = re.compile(rf"^{PREFIX}(\d{{5,}})\.rows-(\d+)-of-(\d+)\.pt$")
REQUIRED = {"model": dict, "optimizer": dict, "epoch": int, "loader": dict, "world_size": int}


def list_checkpoints(directory: str | os.PathLike) -> list[tuple[int, Path]]:
    """``(epoch, path)`` of every checkpoint this module wrote in ``directory``, oldest first."""
    d = Path(directory)
    return sorted((int(m.group(1)), p) for p in (d.iterdir() if d.is_dir() else ())
                  if (m := _NAME.match(p.name)) and p.is_file())


def _write(path: Path, state: dict) -> Path:
    """``torch.save`` to ``path`` atomically (tmp file, fsync, rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def save_checkpoint(directory: str | os.PathLike, state: dict, epoch: int,
                    keep: int = 0) -> Path:
    """Write ``state`` as the checkpoint of ``epoch`` atomically, then delete all but the
    ``keep`` newest checkpoints and their rows (0 = keep all); returns the path."""
    d = Path(directory)
    path = _write(d / f"{PREFIX}{int(epoch):05d}.pt", state)
    if keep:
        for e, old in list_checkpoints(d)[:-keep]:
            old.unlink(missing_ok=True)
            for rows in _rows_files(d, e):
                rows.unlink(missing_ok=True)
    return path


def save_rows(directory: str | os.PathLike, epoch: int, rank: int, world: int,
              state: dict) -> Path:
    """Write this rank's embedding rows (tensors and ints) for the checkpoint of ``epoch``."""
    return _write(Path(directory) / f"{PREFIX}{int(epoch):05d}.rows-{rank}-of-{world}.pt", state)


def _rows_files(d: Path, epoch: int) -> list[Path]:
    if not d.is_dir():
        return []
    return [p for p in d.iterdir() if (m := _ROWS.match(p.name)) and int(m.group(1)) == epoch]


def load_rows(directory: str | os.PathLike, epoch: int, map_location=None):
    """Every rank's embedding rows of the checkpoint of ``epoch``, one dict at a time (one
    file in memory); :class:`CheckpointError` unless the files are those of all ranks of one
    world size, intact and of tensors and plain types only."""
    files = {}
    for p in _rows_files(Path(directory), int(epoch)):
        m = _ROWS.match(p.name)
        files[int(m.group(2)), int(m.group(3))] = p
    worlds = {w for _, w in files}
    if len(worlds) != 1 or sorted(r for r, _ in files) != list(range(next(iter(worlds)))):
        raise CheckpointError(f"the embedding rows of checkpoint epoch {epoch} in {directory} "
                              f"are incomplete ({sorted(p.name for p in files.values())})",
                              "the embedding tables cannot be restored",
                              "resume from an older checkpoint, or start a fresh output.dir")
    for key in sorted(files):
        p = files[key]
        why = _intact(p)
        if why:
            raise CheckpointError(f"embedding rows {p} are damaged: {why}",
                                  "the embedding tables cannot be restored",
                                  "resume from an older checkpoint, or start a fresh output.dir")
        try:
            yield torch.load(p, map_location=map_location, weights_only=True)
        except Exception as e:
            raise CheckpointError(f"embedding rows {p} cannot be read ({type(e).__name__})",
                                  "they are not loaded, so nothing in them ran",
                                  "delete the checkpoint, or start a fresh output.dir") from None


def _intact(path: Path) -> str:
    """'' if ``path`` is a complete zip archive whose members match their CRCs, else why not."""
    try:
        with zipfile.ZipFile(path) as z:
            bad = z.testzip()
    except (OSError, zipfile.BadZipFile, EOFError, ValueError) as e:
        return f"not a complete checkpoint archive ({e})"
    return f"member {bad} is corrupt" if bad else ""


def load_checkpoint(path: str | os.PathLike, map_location=None) -> dict:
    """Read one checkpoint with ``weights_only=True`` and check its keys.

    Raises:
        CheckpointError: the file is damaged, holds anything but tensors and plain types, or
            lacks a key of a training checkpoint.
    """
    p = Path(path)
    why = _intact(p)
    if why:  # never unpickle an archive we cannot vouch for
        raise CheckpointError(f"checkpoint {p} is damaged: {why}", "it cannot be resumed from",
                              "delete it to resume from an older one, or start a fresh "
                              "output.dir")
    try:
        state = torch.load(p, map_location=map_location, weights_only=True)
    except Exception as e:  # the weights-only unpickler refuses globals, reduce calls, ...
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()] or [""]
        first = lines[0][:200]
        if "weights only" in str(e).lower() or type(e).__name__ == "UnpicklingError":
            # torch's own advice (retry without weights_only) is what must not be done:
            # quote only the line that names what was refused
            why = next((ln for ln in lines if "GLOBAL" in ln or "WeightsUnpickler" in ln),
                       "content the weights-only loader refuses")
            raise CheckpointError(
                f"checkpoint {p} holds something other than tensors and plain types "
                f"({why[:200]})",
                "it was not written by mnmg-sampler (or was tampered with) and is not loaded, "
                "so nothing in it ran",
                "delete it and resume from an older checkpoint, or start a fresh output.dir",
            ) from None
        raise CheckpointError(f"checkpoint {p} cannot be read ({type(e).__name__}: {first})",
                              "it cannot be resumed from",
                              "delete it, or start a fresh output.dir") from None
    missing = [k for k, kind in REQUIRED.items()
               if not isinstance(state, dict) or not isinstance(state.get(k), kind)]
    if missing:
        raise CheckpointError(f"checkpoint {p} has no valid {', '.join(missing)}",
                              "it is not a training checkpoint of mnmg-sampler",
                              "delete it, or start a fresh output.dir")
    return state


def load_latest(directory: str | os.PathLike, map_location=None) -> tuple[Path, dict] | None:
    """The newest readable checkpoint in ``directory`` (``None`` when there is none).

    A damaged newest file (cut short, corrupt) is skipped with a warning for the one before;
    a file with unsafe or foreign content raises :class:`CheckpointError` at once, and so does
    a directory whose every checkpoint is damaged.
    """
    found = list_checkpoints(directory)
    skipped = []
    for _, path in reversed(found):
        why = _intact(path)
        if why:
            log.warning("checkpoint %s is damaged (%s); trying the previous one", path, why)
            skipped.append(path.name)
            continue
        state = load_checkpoint(path, map_location)
        if skipped:
            log.warning("resuming from %s; skipped damaged %s", path, ", ".join(skipped))
        return path, state
    if skipped:
        raise CheckpointError(f"every checkpoint in {directory} is damaged "
                              f"({', '.join(skipped)})", "there is nothing to resume from",
                              "start a fresh output.dir, or drop --resume")
    return None


def check_model_state(saved: dict, model: torch.nn.Module, path: str | os.PathLike) -> None:
    """Raise :class:`CheckpointError` unless ``saved`` has exactly ``model``'s parameter names
    and shapes (e.g. a checkpoint of another ``model.hidden`` or ``model.layers``)."""
    want = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    have = {k: tuple(v.shape) if torch.is_tensor(v) else None for k, v in saved.items()}
    diff = [f"{k}: checkpoint {have.get(k)}, model {want.get(k)}"
            for k in sorted(set(want) | set(have)) if have.get(k) != want.get(k)]
    if diff:
        raise CheckpointError(
            f"checkpoint {path} was written for another model ({len(diff)} tensors differ, "
            f"e.g. {diff[0]})",
            "its weights cannot be loaded into this model",
            "resume with the model settings it was written with (model.hidden, model.layers, "
            "model.aggr, the dataset's features and classes), or start a fresh output.dir",
        )


def agree_on_checkpoint(found: tuple[Path, dict] | None, group=None) -> None:
    """Collective: raise :class:`CheckpointError` on every rank unless all ranks resume from
    the same epoch (or all start fresh), e.g. when nodes see different checkpoint files."""
    import torch.distributed as dist

    from ..distributed.collective import backend_device

    epoch = -1 if found is None else int(found[1]["epoch"])
    t = torch.tensor([epoch, -epoch], dtype=torch.int64, device=backend_device(group))
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    hi, lo = int(t[0]), -int(t[1])
    if hi != lo:
        raise CheckpointError(
            f"the ranks found different checkpoints (epochs {lo} to {hi}; -1 = none); this rank: "
            f"{found[0] if found else 'none'}",
            "they would resume from different states",
            "put output.dir on a file system every rank sees, or start a fresh output.dir")
