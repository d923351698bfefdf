"""Typed errors a user can cause.

Every message says three things: what is wrong, what follows from it, and how to fix it.
Catch :class:`MnmgError` to handle any of them; the CLI turns them into one line and exit code 2
(3 for :class:`PeerError`: another rank died or stopped answering, this rank's input was fine).
"""

from __future__ import annotations

__all__ = [
    "MnmgError",
    "ConfigError",
    "GraphFormatError",
    "SamplingInputError",
    "PartitionError",
    "WorldSizeError",
    "PartitionMismatchError",
    "CheckpointError",
    "MissingDependencyError",
    "ServiceError",
    "MemoryBudgetError",
    "PeerError",
]


def _sentence(text: str) -> str:
    text = text.rstrip(".")
    return text[:1].upper() + text[1:] + "."


class MnmgError(Exception):
    """Base of every error mnmg-sampler raises on purpose."""

    def __init__(self, what: str, consequence: str = "", fix: str = "") -> None:
        self.what, self.consequence, self.fix = what, consequence, fix
        parts = [what.rstrip(".") + "."]
        if consequence:
            parts.append(_sentence(consequence))
        if fix:
            parts.append("Fix: " + fix.rstrip(".") + ".")
        super().__init__(" ".join(parts))

    def __reduce__(self):  # keep the three parts across pickling (spawned ranks, futures)
        return (type(self), (self.what, self.consequence, self.fix))


class ConfigError(MnmgError, ValueError):
    """A YAML job config or override is invalid; the message names the dotted key."""


class GraphFormatError(MnmgError, ValueError):
    """An input graph file is malformed; the message names the file and line or key."""


class EdgeWeightError(GraphFormatError):
    """Edge weights are unusable: wrong length or dtype, negative, NaN or infinite."""


class SamplingInputError(MnmgError, ValueError):
    """Seeds or fanouts passed to a sampler are invalid (out of range, negative, bad fanout)."""


class PartitionError(MnmgError, RuntimeError):
    """A partition directory is missing, corrupt or does not match the job."""


class WorldSizeError(PartitionError):
    """The number of partitions differs from the torch.distributed world size."""


class PartitionMismatchError(PartitionError):
    """The ranks of one job loaded different partitionings, or not their own part."""


class CheckpointError(MnmgError, RuntimeError):
    """A checkpoint is unreadable, unsafe (holds code or objects) or made for another model."""


class MissingDependencyError(MnmgError, ImportError):
    """An optional dependency (GPU extra, pymetis, torch_geometric) is needed but not installed."""


class ServiceError(MnmgError, RuntimeError):
    """The sampling service failed or was shut down; raised in every waiting caller."""


class MemoryBudgetError(MnmgError, MemoryError):
    """An operation's estimated memory is above the configured budget (raised before allocating)."""


class PeerError(ServiceError):
    """Another rank died or stopped answering: a collective failed, timed out or never started.

    The message names the step that did not complete (e.g. a sampling round's agreement
    all-reduce, the rendezvous) and the transport's own words for the failure.
    """
