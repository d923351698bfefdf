"""torchrun environment, process groups, device and thread setup.

Everything here runs in the trainer's own process; nothing touches CUDA unless the device or
backend asks for it.

Stores on one node listen on loopback only: torch's ``TCPStore`` server listens on every
interface, so a job whose ``MASTER_ADDR`` is loopback gets a store bound to ``127.0.0.1`` here,
and ``python -m mnmg_sampler.runtime TORCHRUN_ARGS`` (what ``launch/run.sh`` runs) is torchrun
whose rendezvous store does the same when the endpoint is loopback.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import socket
import sys
from dataclasses import dataclass

import torch
import torch.distributed as dist

log = logging.getLogger(__name__)
LOOPBACK = ("127.0.0.1", "localhost")


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


JOIN_TIMEOUT_S = 300.0  # ranks of one node may start this far apart (imports, page cache)


def init_distributed(backend: str = "auto", device: str = "auto", timeout_s: float = 600.0,
                     join_timeout_s: float | None = None) -> tuple[DistEnv, torch.device]:
    """Initialise the default process group from torchrun's environment (idempotent).

    The store and every collective of the group share ``timeout_s``; a rendezvous that does not
    complete in time raises :class:`~mnmg_sampler.errors.PeerError`. Ranks launched by hand on
    one node (``MASTER_ADDR`` loopback, no torchrun agent) first wait up to ``join_timeout_s``
    (default: the larger of ``timeout_s`` and :data:`JOIN_TIMEOUT_S`) for each other, since
    they may start far apart. Without torchrun (no ``MASTER_ADDR``) a world of one starts over
    an in-process store: no port is opened.
    """
    from .distributed.collective import peer_errors
    from .distributed.teardown import at_exit

    env = DistEnv.from_env()
    backend, dev = resolve_backend(backend, device)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    if not dist.is_initialized():
        timeout = _dt.timedelta(seconds=timeout_s)
        where = (f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}"
                 if "MASTER_ADDR" in os.environ else "an in-process store")
        with peer_errors(f"the rendezvous of {env.world_size} ranks at {where} (rank "
                         f"{env.rank}, timeout {timeout_s:g} s)"):
            store = _restart_store(env, timeout)
            if store is None and "MASTER_ADDR" not in os.environ and env.world_size == 1:
                store = dist.HashStore()
            if store is None:
                join = max(timeout_s, JOIN_TIMEOUT_S) if join_timeout_s is None \
                    else join_timeout_s
                store = _loopback_store(env, _dt.timedelta(seconds=join), timeout)
            dist.init_process_group(backend, rank=env.rank, world_size=env.world_size,
                                    timeout=timeout, store=store)
        at_exit()  # a script that never destroys the group must still exit cleanly
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


def _loopback_store(env: DistEnv, join: _dt.timedelta, timeout: _dt.timedelta):
    """The store of a job whose ``MASTER_ADDR`` is loopback: rank 0 hosts it on ``127.0.0.1`` only,
    the others connect; every rank waits up to ``join`` for all of them, then the store's
    operations get ``timeout``. ``None`` otherwise (torch's env:// rendezvous)."""
    addr = os.environ.get("MASTER_ADDR")
    if addr not in LOOPBACK or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        return None
    port = int(os.environ["MASTER_PORT"])
    if env.rank == 0:
        store = _bound_store(port, env.world_size, join, wait_for_workers=False)
    else:
        store = dist.TCPStore(addr, port, env.world_size, False, timeout=join)
    if store.add("mnmg/joined", 1) == env.world_size:
        store.set("mnmg/all_joined", "1")
    store.wait(["mnmg/all_joined"])
    store.set_timeout(timeout)
    return store


def _bound_store(port: int, world_size: int | None, timeout: _dt.timedelta,
                 wait_for_workers: bool = True, multi_tenant: bool = False):
    """A ``TCPStore`` server on a socket bound to ``127.0.0.1:port`` (0: a free port)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    port = sock.getsockname()[1]
    return dist.TCPStore("127.0.0.1", port, world_size, True, timeout=timeout,
                         wait_for_workers=wait_for_workers, multi_tenant=multi_tenant,
                         master_listen_fd=sock.detach())


_KEEP: list = []  # the launcher's loopback store lives as long as the launcher


def launch_local(argv: list[str]) -> None:
    """torchrun (same arguments) whose stores listen on loopback when the endpoint is loopback.

    The rendezvous store is created here, bound to ``127.0.0.1``, before torchrun asks for a
    store on the same port (torch then shares this server: ``multi_tenant``). The workers get
    ``MASTER_ADDR=127.0.0.1`` and their own store, which :func:`init_distributed` binds to
    loopback as well. Any other endpoint: plain torchrun.
    """
    from torch.distributed.run import main as torchrun_main

    args = list(argv)
    at = next((i for i, a in enumerate(args)
               if a.split("=", 1)[0] in ("--rdzv-endpoint", "--rdzv_endpoint")), None)
    if at is not None:
        inline = "=" in args[at]
        endpoint = args[at].split("=", 1)[1] if inline else args[at + 1]
        host, _, port = endpoint.rpartition(":")
        if host in LOOPBACK:
            store = _bound_store(int(port or 0), None, _dt.timedelta(seconds=60),
                                 wait_for_workers=False, multi_tenant=True)
            _KEEP.append(store)
            value = f"127.0.0.1:{store.port}"
            if inline:
                args[at] = f"{args[at].split('=', 1)[0]}={value}"
            else:
                args[at + 1] = value
            if not any(a.split("=", 1)[0] in ("--local-addr", "--local_addr") for a in args):
                args = ["--local-addr", "127.0.0.1", *args]
            # each job's workers host their own store (bound to loopback by init_distributed)
            # instead of a second agent store that would listen on every interface
            os.environ["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
            if "GLOO_SOCKET_IFNAME" not in os.environ and _loopback_interface():
                # gloo's own listening sockets: on loopback too, not on the hostname's address
                os.environ["GLOO_SOCKET_IFNAME"] = _loopback_interface()
    torchrun_main(args)


def _loopback_interface() -> str | None:
    """Name of the loopback network interface (``lo`` on Linux), if there is one."""
    try:
        names = [n for _, n in socket.if_nameindex()]
    except OSError:
        return None
    return next((n for n in ("lo", "lo0") if n in names), None)


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


if __name__ == "__main__":
    launch_local(sys.argv[1:])
