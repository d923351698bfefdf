"""torchrun environment, process groups, device and thread setup.

Everything here runs in the trainer's own process; nothing touches CUDA unless the device or
backend asks for it.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DistEnv:
    """Where this process sits in the job (from torchrun's environment variables)."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int

    @classmethod
    def from_env(cls) -> DistEnv:
        g = os.environ.get
        return cls(int(g("RANK", "0")), int(g("WORLD_SIZE", "1")), int(g("LOCAL_RANK", "0")),
                   int(g("LOCAL_WORLD_SIZE", g("WORLD_SIZE", "1"))))


def resolve_backend(backend: str = "auto", device: str = "auto") -> tuple[str, torch.device]:
    """Pick (backend, device): NCCL + the local GPU when CUDA is wanted and present, else gloo.

    ``auto`` never initialises CUDA when CUDA is absent; with ``device='cpu'`` it never asks.
    """
    if device == "cpu" or (device == "auto" and backend == "gloo"):
        return "gloo" if backend in ("auto", "gloo") else backend, torch.device("cpu")
    want_cuda = device == "cuda" or backend == "nccl" or (device == "auto" and _cuda_present())
    if want_cuda:
        local = DistEnv.from_env().local_rank
        return ("nccl" if backend == "auto" else backend), torch.device("cuda", local)
    return ("gloo" if backend == "auto" else backend), torch.device("cpu")


def _cuda_present() -> bool:
    # torch.cuda.is_available() does not create a context (it uses NVML when it can).
    return torch.cuda.is_available()


def init_distributed(backend: str = "auto", device: str = "auto",
                     timeout_s: float = 600.0) -> tuple[DistEnv, torch.device]:
    """Initialise the default process group from torchrun's environment (idempotent).

    The store and every collective of the group share ``timeout_s``; a rendezvous that does not
    complete in time raises :class:`~mnmg_sampler.errors.PeerError`. Without torchrun (no
    ``MASTER_ADDR``) a world of one starts over an in-process store: no port is opened.
    """
    from .distributed.collective import peer_errors

    env = DistEnv.from_env()
    backend, dev = resolve_backend(backend, device)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    if not dist.is_initialized():
        timeout = _dt.timedelta(seconds=timeout_s)
        store = _restart_store(env, timeout)
        if store is None and "MASTER_ADDR" not in os.environ and env.world_size == 1:
            store = dist.HashStore()
        where = (f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}"
                 if store is None else "the local store")
        with peer_errors(f"the rendezvous of {env.world_size} ranks at {where} (rank "
                         f"{env.rank}, timeout {timeout_s:g} s)"):
            dist.init_process_group(backend, rank=env.rank, world_size=env.world_size,
                                    timeout=timeout, store=store)
    return env, dev


def _restart_store(env: DistEnv, timeout: _dt.timedelta):
    """After a torchrun restart, a store namespaced by attempt (else ``None``: env://).

    torchrun's agent keeps one TCPStore across restarts; without a per-attempt prefix a
    restarted rank can read the previous attempt's gloo addresses and fail to connect.
    """
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if attempt == 0 or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    base = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                         env.world_size, False, timeout=timeout)
    return dist.PrefixStore(f"/mnmg/attempt_{attempt}", base)


def free_port() -> int:
    """A TCP port free on loopback right now (bind to port 0)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def set_threads(threads: int | None) -> None:
    """Set torch and numba thread counts (``None`` or 0: cores / local ranks, at least 1)."""
    if not threads:
        n = os.cpu_count() or 1
        threads = max(1, n // max(1, DistEnv.from_env().local_world_size))
    torch.set_num_threads(threads)
    import numba

    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
