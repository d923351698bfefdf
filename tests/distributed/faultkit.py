"""Processes for the kill trials: a rank that SIGKILLs itself at its K-th collective call.

    python -m tests.distributed.faultkit api PARTS_DIR MODE [shared|inflight]  # Python API: loader
    python -m tests.distributed.faultkit cli train ARGS...     # the mnmg-sampler CLI
    python -m tests.distributed.faultkit noshutdown PARTS_DIR  # exit without shutdown()
    python -m tests.distributed.faultkit nodestroy  # exit without destroy_process_group()
    python -m tests.distributed.faultkit ddp        # DDP steps, destroy_process_group(), exit

Each rank runs with torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), so rank
0 hosts the TCP store. ``MNMG_TEST_KILL_AT=K`` arms this process: its K-th call of a
torch.distributed collective or point-to-point post (any thread: the service's rounds, the
training loop; and the host channel's agreements of the shared topology) SIGKILLs it just
before the call, i.e. at a point of a round chosen by K. With ``MNMG_TEST_KILL_AFTER_READY=1``
only the calls after the API worker printed ``READY`` count, so the kill lands in a round
(with rounds in flight: while both are running), never in start-up.
``MNMG_TEST_TIMEOUT_S`` is the collective timeout of the API worker. A survivor prints
``TYPED <class>: <message>`` (API) or the CLI's one error line, and exits with 3 for a
:class:`PeerError`.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

COLLECTIVES = ("all_reduce", "all_to_all_single", "all_gather", "barrier", "broadcast")
READY = threading.Event()  # the API worker's loader is built: rounds start


def arm() -> None:
    """Count collective calls of this process; SIGKILL it at call ``MNMG_TEST_KILL_AT``."""
    at = int(os.environ.get("MNMG_TEST_KILL_AT", "-1"))
    if at < 0:
        return
    import torch.distributed as dist

    lock, count = threading.Lock(), [0]
    after_ready = os.environ.get("MNMG_TEST_KILL_AFTER_READY") == "1"

    def wrap(name, real):
        def call(*a, **k):
            if after_ready and not READY.is_set():
                return real(*a, **k)
            with lock:
                count[0] += 1
                n = count[0]
            if n == at:
                print(f"KILL at call {n}: {name} in thread {threading.current_thread().name}",
                      flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            return real(*a, **k)
        return call

    for name in COLLECTIVES:
        setattr(dist, name, wrap(name, getattr(dist, name)))
    from mnmg_sampler.distributed.host_channel import HostChannel

    HostChannel.agree_max = wrap("host agree_max", HostChannel.agree_max)


def api(parts: str, mode: str, shared: bool = False, in_flight: int = 1,
        hosts: bool = False) -> int:
    """The Python API as a training script uses it: service, loader, a per-batch all-reduce
    (``in_flight``: rounds in flight of the service, on the wire path; ``hosts``: every rank
    its own emulated host, each holding every part at the default budget)."""
    import numpy as np
    import torch
    import torch.distributed as dist

    from mnmg_sampler.distributed.collective import peer_errors
    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.errors import MnmgError, PeerError
    from mnmg_sampler.graph.partition_io import load_partition
    from mnmg_sampler.loaders.neighbor import DistNeighborLoader
    from mnmg_sampler.system.runtime import init_distributed

    try:
        env, _ = init_distributed("gloo", "cpu", float(os.environ["MNMG_TEST_TIMEOUT_S"]))
        if hosts:
            os.environ["MNMG_HOST_ID"] = f"kill-host-{env.rank}"
        part = load_partition(parts, env.rank, env.world_size)
        svc = SamplingService(part, seed=1, mode=mode, rounds_in_flight=in_flight,
                              shared_topology="auto" if hosts else
                              shared if in_flight == 1 else False)
        loader = DistNeighborLoader(svc, np.arange(int(part.num_nodes)), [5, 5], 32,
                                    shuffle=True, prefetch=2 * in_flight)
        print("READY", flush=True)
        READY.set()
        for epoch in range(10_000):  # until a peer dies
            loader.set_epoch(epoch)
            for b in loader:
                t = torch.tensor([float(b.batch_size)])
                with peer_errors("the training loop's all-reduce"):  # the caller's collective
                    dist.all_reduce(t)
        svc.shutdown()
    except MnmgError as e:
        print(f"TYPED {type(e).__name__}: {e}", flush=True)
        if isinstance(e, PeerError):  # what docs/reliability.md advises: leave at once
            sys.stdout.flush()
            os._exit(3)
        return 2
    return 0


def no_shutdown(parts: str) -> int:
    """A script that never calls ``shutdown()`` nor ``destroy_process_group()``: exit must be
    clean (the service thread is stopped at exit, no SIGABRT)."""
    import numpy as np

    from mnmg_sampler.distributed.service import SamplingService
    from mnmg_sampler.graph.partition_io import load_partition
    from mnmg_sampler.loaders.neighbor import DistNeighborLoader
    from mnmg_sampler.system.runtime import init_distributed

    env, _ = init_distributed("gloo", "cpu", float(os.environ["MNMG_TEST_TIMEOUT_S"]))
    svc = SamplingService(load_partition(parts, env.rank, env.world_size), seed=1)
    n = sum(1 for _ in DistNeighborLoader(svc, np.arange(300), [5, 5], 32))
    print(f"BATCHES {n}", flush=True)
    return 0


def no_destroy() -> int:
    """A script that initialises the group, runs one collective and never destroys it: exit
    must be clean on every rank (the store host included)."""
    import torch
    import torch.distributed as dist

    from mnmg_sampler.system.runtime import init_distributed

    init_distributed("gloo", "cpu", float(os.environ["MNMG_TEST_TIMEOUT_S"]))
    t = torch.ones(4)
    dist.all_reduce(t)
    print(f"SUM {int(t[0])}", flush=True)
    return 0


def ddp_steps() -> int:
    """DDP training steps, then ``destroy_process_group()``: DDP keeps the group (and its gloo
    workers) alive past the destroy, so exit must still be clean on every rank."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from mnmg_sampler.system.runtime import init_distributed

    init_distributed("gloo", "cpu", float(os.environ["MNMG_TEST_TIMEOUT_S"]))
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(8, 4))
    for _ in range(3):
        model(torch.ones(16, 8)).sum().backward()
    dist.destroy_process_group()
    print(f"GRAD {float(model.module.weight.grad.sum()):.1f}", flush=True)
    return 0


def main(argv: list[str]) -> int:
    arm()
    if argv[0] == "api":
        return api(argv[1], argv[2], argv[3:] == ["shared"], 2 if argv[3:] == ["inflight"] else 1,
                   argv[3:] == ["hosts"])
    if argv[0] == "noshutdown":
        return no_shutdown(argv[1])
    if argv[0] == "nodestroy":
        return no_destroy()
    if argv[0] == "ddp":
        return ddp_steps()
    if argv[0] == "cli":
        from mnmg_sampler.commands.cli import main as cli_main

        cli_main(argv[1:])
        return 0
    raise SystemExit(f"unknown entry point {argv[0]!r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
