"""torchrun environment, process groups, device and thread setup.

Everything here runs in the trainer's own process; nothing touches CUDA unless the device or
backend asks for it.

Stores on one node listen on loopback only: torch's ``TCPStore`` server listens on every
interface, so a job whose ``MASTER_ADDR`` is loopback gets a store bound to ``127.0.0.1`` here,
and ``python -m mnmg_sampler.system.runtime TORCHRUN_ARGS`` (what ``launch/run.sh`` runs) is
torchrun whose rendezvous store does the same when the endpoint is loopback.
"""

from __future__ import annotations

import datetime as _dt
import glob
import logging
import os
import shutil
import socket
import sys
import tempfile
from dataclasses import dataclass

import torch
import torch.distributed as dist

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
    # torch.cuda.is_available() does not create a context (it uses NVML when it can)
    want_cuda = device == "cuda" or backend == "nccl" or (device == "auto" and
                                                          torch.cuda.is_available())
    if want_cuda:
        local = DistEnv.from_env().local_rank
        return ("nccl" if backend == "auto" else backend), torch.device("cuda", local)
    return ("gloo" if backend == "auto" else backend), torch.device("cpu")


JOIN_TIMEOUT_S = 300.0  # ranks of one node may start this far apart (imports, page cache)


def timeout_delta(seconds: float, what: str = "runtime.collective_timeout_s") -> _dt.timedelta:
    """``seconds`` as a timedelta, or a :class:`~mnmg_sampler.errors.ConfigError` naming ``what``
    unless it lies in ``(0, MAX_TIMEOUT_S]`` (``1e300`` would overflow ``timedelta`` and
    ``nan`` or ``inf`` never expire)."""
    import math

    from ..config.schema import MAX_TIMEOUT_S
    from ..errors import ConfigError

    try:
        ok = 0 < float(seconds) <= MAX_TIMEOUT_S and math.isfinite(float(seconds))
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        raise ConfigError(f"{what} is {seconds!r}", "no collective could be given a deadline",
                          f"give a number of seconds in (0, {MAX_TIMEOUT_S:.0f}] (30 days), "
                          "e.g. 600")
    return _dt.timedelta(seconds=float(seconds))


def group_backend(backend: str) -> str:
    """The backend string the default group is made with: NCCL comes with gloo for CPU tensors.

    The data path moves its buffers to the GPU, but control collectives (counts, agreements,
    flags, barriers, DDP's and the checkpoint's small tensors) use CPU tensors; on a group of
    NCCL alone each of those fails with "No backend type associated with device type cpu"
    (seen on the GPU machine). One group of two backends, chosen per tensor's device.
    """
    return "cpu:gloo,cuda:nccl" if backend == "nccl" else backend


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
    from ..distributed.collective import peer_errors
    from ..distributed.teardown import at_exit

    env = DistEnv.from_env()
    timeout = timeout_delta(timeout_s)
    if join_timeout_s is not None:
        timeout_delta(join_timeout_s, "join_timeout_s")
    backend, dev = resolve_backend(backend, device)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    if not dist.is_initialized():
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
            dist.init_process_group(group_backend(backend), rank=env.rank,
                                    world_size=env.world_size, timeout=timeout, store=store)
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


#: Exit codes of a rank that has already printed its one error line (``cli.main``).
REPORTED_EXIT_CODES = {2: "a typed error: bad config, input or files",
                       3: "PeerError: another rank died or stopped answering"}


class _HeldRecords(logging.Filter):
    """Holds back the log records whose message contains ``text`` (re-emitted unless the
    failure they announce is reported in one line instead)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text, self.held = text, []

    def filter(self, record: logging.LogRecord) -> bool:
        if self.text in str(record.msg):
            self.held.append(record)
            return False
        return True


class _StopRecords(_HeldRecords):
    """Holds back torchrun's two end-of-run lines (the ranks it sends a closing signal to, and
    the first failure) and remembers which pids it signalled, so the launcher can tell a rank
    stopped by torchrun from one killed from outside."""

    def __init__(self) -> None:
        super().__init__("failed (exitcode")
        self.signalled: set[int] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        msg = str(record.msg)
        if msg.startswith("Sending process") and "closing signal" in msg:
            self.signalled.update(int(a) for a in (record.args or ())[:1])
            self.held.append(record)
            return False
        return super().filter(record)


def reported_failure(failures: dict, signalled: set[int]) -> tuple[int, int] | None:
    """``(global rank, exit code)`` if a failed run ended only because ranks reported a typed
    error (exit 2 or 3, their line already printed) and torchrun stopped the others (pids in
    ``signalled``); ``None`` for anything else (a signal from outside, a traceback, ...)."""
    reported = sorted((r, f.exitcode) for r, f in failures.items()
                      if f.exitcode in REPORTED_EXIT_CODES)
    if not reported:
        return None
    if any(f.exitcode not in REPORTED_EXIT_CODES and f.pid not in signalled
           for f in failures.values()):
        return None
    return reported[0]


def launch_local(argv: list[str]) -> None:
    """torchrun (same arguments) whose stores listen on loopback when the endpoint is loopback
    and the job runs on one node.

    The rendezvous store is created here, bound to ``127.0.0.1``, before torchrun asks for a
    store on the same port (torch then shares this server: ``multi_tenant``). The workers get
    ``MASTER_ADDR=127.0.0.1`` and their own store, which :func:`init_distributed` binds to
    loopback as well. Any other endpoint: plain torchrun.

    A run that fails because a rank reported a typed error (exit 2, or 3 for ``PeerError``:
    its one error line is already on the console) ends with one more line naming the rank and
    the exit code, and exits with that code; torchrun's failure summary and traceback are kept
    for everything else (a rank killed by a signal, an unexpected exception). On several nodes,
    a node whose rendezvous store goes away (the host node's torchrun ended, typically after its
    own rank's error) stops its ranks and says so in one line, exit code 3.
    """
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous.api import (
        RendezvousClosedError,
        RendezvousConnectionError,
    )
    from torch.distributed.run import main as torchrun_main

    _restore_worker_cpp_log_level()
    args = _loopback_args(list(argv))
    log_dir = _arg_value(args, "--log-dir")
    own_log_dir = None
    if log_dir is None:  # torchrun's default is a temporary directory it never removes
        own_log_dir = log_dir = tempfile.mkdtemp(prefix="mnmg-torchrun-")
        args = ["--log-dir", log_dir, *args]
    stops = _StopRecords()
    api_log = logging.getLogger("torch.distributed.elastic.multiprocessing.api")
    api_log.addFilter(stops)
    rdzv_log = logging.getLogger("torch.distributed.elastic.rendezvous.dynamic_rendezvous")
    lost = _HeldRecords("has failed to shutdown the rendezvous")
    rdzv_log.addFilter(lost)
    try:
        torchrun_main(args)
    except (RendezvousConnectionError, RendezvousClosedError):
        lost.held.clear()  # this line says it instead
        endpoint = _arg_value(args, "--rdzv-endpoint") or "?"
        print(f"mnmg-sampler: the rendezvous store at {endpoint} closed or cannot be reached "
              "(exit code 3: the node hosting it ended the job, e.g. on a rank's error, or is "
              "unreachable; that node's output says why); this node's ranks were stopped",
              file=sys.stderr)
        sys.exit(3)
    except ChildFailedError as e:
        api_log.removeFilter(stops)
        got = reported_failure(e.failures, stops.signalled)
        if got is None:
            for record in stops.held:  # a real crash: torchrun's lines, then its summary
                api_log.handle(record)
            raise
        rank, code = got
        lost.held.clear()  # the store of a job that ended on a rank's error: nothing to add
        shown = _shown_local_ranks(args)
        failure = e.failures[rank]
        where = "its error line is above"
        if shown is not None and failure.local_rank not in shown:
            line = _last_error_line(log_dir, failure.local_rank)
            if line is None:
                where = (f"its error line is in rank {rank}'s output, which the console filter "
                         "hides (LOG_RANK / --local-ranks-filter)")
            else:  # the console filter hid it: show it once, from the rank's log file
                print(f"[rank{rank}]:{line}", file=sys.stderr)
                where = (f"its error line, above, is from rank {rank}'s log: the console "
                         "filter (LOG_RANK / --local-ranks-filter) hid it")
        stopped = "; torchrun stopped the other ranks" if stops.signalled else ""
        print(f"mnmg-sampler: rank {rank} exited with code {code} ({REPORTED_EXIT_CODES[code]}; "
              f"{where}){stopped}", file=sys.stderr)
        sys.exit(code)
    finally:
        api_log.removeFilter(stops)
        rdzv_log.removeFilter(lost)
        if own_log_dir is not None:
            shutil.rmtree(own_log_dir, ignore_errors=True)
        for record in lost.held:  # a real crash: torchrun's own words
            rdzv_log.handle(record)


def _last_error_line(log_dir: str, local_rank: int) -> str | None:
    """The last non-empty line of local rank ``local_rank``'s ``stderr.log`` under torchrun's
    ``log_dir`` (``<run id>/attempt_<n>/<local rank>/``, the newest attempt), written when torchrun
    redirects or tees the rank's output; None without one.

    A typed error ends a rank with exactly one line, so a rank whose output the console filter
    hides still gets its reason shown, whichever rank exited first."""
    logs = glob.glob(os.path.join(glob.escape(log_dir), "*", "attempt_*", str(local_rank),
                                  "stderr.log"))
    if not logs:
        return None
    path = max(logs, key=os.path.getmtime)
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - 4096))
            tail = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    lines = [ln.strip() for ln in tail.splitlines() if ln.strip()]
    return lines[-1] if lines else None


def _arg_value(args: list[str], name: str) -> str | None:
    """The value of torchrun flag ``name`` (``--rdzv-endpoint X`` or ``--rdzv-endpoint=X``;
    also spelled with underscores)."""
    names = (name, name.replace("-", "_").replace("__", "--"))
    for i, a in enumerate(args):
        flag, eq, value = a.partition("=")
        if flag in names:
            return value if eq else (args[i + 1] if i + 1 < len(args) else None)
    return None


def _restore_worker_cpp_log_level() -> None:
    """The launch scripts quiet torch's C++ warnings in the launcher (a lost store prints ~40
    lines of frames there) with ``TORCH_CPP_LOG_LEVEL=ERROR`` and keep the user's level in
    ``MNMG_WORKER_CPP_LOG_LEVEL``: give it back to the ranks started from here."""
    if "MNMG_WORKER_CPP_LOG_LEVEL" not in os.environ:
        return
    level = os.environ.pop("MNMG_WORKER_CPP_LOG_LEVEL")
    if level:
        os.environ["TORCH_CPP_LOG_LEVEL"] = level
    else:
        os.environ.pop("TORCH_CPP_LOG_LEVEL", None)


def _shown_local_ranks(args: list[str]) -> set[int] | None:
    """The local ranks torchrun's ``--local-ranks-filter`` shows on the console (None: all)."""
    value = _arg_value(args, "--local-ranks-filter")
    try:
        return None if value is None else {int(v) for v in value.split(",") if v.strip()}
    except ValueError:
        return None


def _loopback_args(args: list[str]) -> list[str]:
    """torchrun's arguments with a loopback rendezvous endpoint served by a store bound to
    loopback (see :func:`launch_local`); other endpoints unchanged, and so are several nodes
    (``--nnodes`` other than 1, as ``launch/multinode.sh`` passes): their agents share one
    endpoint, which only the host node's torchrun serves."""
    if (_arg_value(args, "--nnodes") or "1") not in ("1", "1:1"):
        return args
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
    return args


def _loopback_interface() -> str | None:
    """Name of the loopback network interface (``lo`` on Linux), if there is one."""
    try:
        names = [n for _, n in socket.if_nameindex()]
    except OSError:
        return None
    return next((n for n in ("lo", "lo0") if n in names), None)


def free_port() -> int:
    """A TCP port free on loopback right now (bind to port 0)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def set_threads(threads: int | None) -> int:
    """Set torch and numba thread counts (``None`` or 0: cores / local ranks, at least 1);
    returns numba's count.

    Cores are those this process may run on (a node pinned to one core by ``taskset`` has
    one): with the machine's count, torch's and numba's threads outnumbered a pinned node's
    cores and took turns on them."""
    if not threads:
        n = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
             else os.cpu_count()) or 1
        threads = max(1, n // max(1, DistEnv.from_env().local_world_size))
    torch.set_num_threads(threads)
    import numba

    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    return numba.get_num_threads()


if __name__ == "__main__":
    launch_local(sys.argv[1:])
