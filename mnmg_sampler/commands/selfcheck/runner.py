"""Running the selfcheck lines on every rank, agreeing on them, and the report rank 0 prints.

Order matters on a GPU: the memory pool is set up (allocator settings, Numba and CuPy routed into
PyTorch's pool) before anything starts CUDA, then the process group (whose NCCL start-up selects
the device), then the lines. A collective that times out (a peer died or hangs) ends the run on
every rank with exit code 3 instead of waiting for ever; rank 0 prints what it saw first.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import logging
import sys
from pathlib import Path

import torch

from ...system.console import jsonable, rank_prefix
from . import environment, exchange, kernels, pool
from .result import FAIL, PASS, SKIPPED, Check, merge, run_check, skipped, table

STDOUT = "-"
FORMAT_NAME = "mnmg-sampler-selfcheck/1"
EXIT_FAILED = 1  # a line failed on some rank (2: a user error, 3: a peer stopped answering)
ISSUE_HINT = ("send us the report: open an issue with the JSON attached "
              "(mnmg-sampler selfcheck --json selfcheck.json)")


def run_selfcheck(args: argparse.Namespace) -> int:
    lib = logging.getLogger("mnmg_sampler")
    level = lib.level
    if not getattr(args, "verbose", False):  # the table is the output; library INFO is noise
        lib.setLevel(logging.WARNING)
    try:
        return _run(args)
    finally:
        lib.setLevel(level)


def _run(args: argparse.Namespace) -> int:
    from ...system.gpu import simulator_enabled
    from ...system.runtime import DistEnv, set_threads

    env = DistEnv.from_env()
    sim = simulator_enabled()
    # with the simulator on, numba.cuda is the simulator: the CUDA lines run on the CPU
    cuda = torch.cuda.is_available() and not sim
    routing = pool.setup(args.expandable_segments) if cuda else None
    dev = None
    if env.world_size > 1:
        from ...system.runtime import init_distributed

        set_threads(None)  # the cores shared by the local ranks, as a training rank does
        _, d = init_distributed("auto", "cuda" if cuda else "cpu", args.timeout)
        dev = d if cuda else None
    elif cuda:
        dev = torch.device("cuda", torch.cuda.current_device())
    lines, peer_err = _lines(args, env, dev, sim, routing)
    per_rank = [[c.as_dict() for c in lines]]
    if env.world_size > 1 and peer_err is None:
        per_rank, peer_err = _gather(per_rank[0])
    if env.rank == 0:
        _report(args, env, per_rank, dev, sim, incomplete=peer_err is not None)
    if peer_err is not None:
        raise peer_err
    if env.world_size > 1:
        import torch.distributed as dist

        dist.destroy_process_group()
    failed = any(c["verdict"] == FAIL for lines_ in per_rank for c in lines_)
    return EXIT_FAILED if failed else 0


def _lines(args, env, dev, sim: bool, routing: dict | None) -> tuple[list[Check], Exception | None]:
    """This rank's lines, in report order; and the peer error that cut the run short, if any."""
    from ...distributed.collective import is_peer_failure, peer_error

    out = [run_check(name, fn) for name, fn in environment.CHECKS]
    scale = args.scale if args.scale is not None else (6 if sim else 16)
    kdev = dev if dev is not None else (torch.device("cpu") if sim else None)
    work: list = []

    def workload() -> kernels.Workload:
        if not work:
            work.append(kernels.Workload(scale, kdev, sim, args.repeats, env.rank))
        return work[0]

    for name, fn in kernels.CHECKS:
        out.append(run_check(name, lambda fn=fn: fn(workload())))
    out.append(run_check("memory.pool", lambda: pool.pool(dev, sim, routing, env.rank)))
    out.append(run_check("memory.expandable_segments",
                         lambda: pool.expandable(dev, sim, routing, env.rank)))
    names = ("exchange.all_to_all", "exchange.sampling")
    if env.world_size == 1:
        return out + [skipped(n, exchange.RUN_UNDER) for n in names], None
    steps = {
        "exchange.all_to_all": lambda: exchange.all_to_all(env.rank, env.world_size,
                                                           args.exchange_mib, args.repeats),
        "exchange.sampling": lambda: exchange.sampling(env.rank, env.world_size, kdev, sim),
    }
    import torch.distributed as dist

    for name in names:
        try:
            dist.barrier()  # ranks reach here at different times: wait outside the timing
            out.append(run_check(name, steps[name], reraise=is_peer_failure))
        except Exception as e:  # a peer died or hangs: no further collective can complete
            err = peer_error(e, f"the selfcheck line {name}")
            out.append(Check(name, FAIL, err.what))
            out += [skipped(n, "not run: a peer stopped answering") for n in
                    names[names.index(name) + 1:]]
            return out, err
    return out, None


def _gather(mine: list[dict]) -> tuple[list[list[dict]], Exception | None]:
    """Every rank's lines, by rank (one all-gather of JSON bytes), or the peer error."""
    from ...distributed.collective import all_gather_bytes, peer_error

    try:
        raw = all_gather_bytes(json.dumps(mine, default=jsonable).encode())
    except RuntimeError as e:
        return [mine], peer_error(e, "gathering the selfcheck lines of every rank")
    return [json.loads(b.decode()) for b in raw], None


def _summary(dev, sim: bool, world: int) -> str:
    if dev is not None:
        gpu = f"CUDA {torch.version.cuda}, {torch.cuda.device_count()} GPU(s)"
    elif sim:
        gpu = "no CUDA device; CUDA kernels in Numba's simulator"
    else:
        gpu = "no CUDA device: CPU lines only"
    ranks = f"{world} ranks" if world > 1 else "1 process"
    return f"{ranks}; {gpu}"


def _report(args, env, per_rank: list[list[dict]], dev, sim: bool, incomplete: bool) -> None:
    """Rank 0: the table (stdout, or stderr with ``--json`` and no OUT) and the JSON report."""
    from ... import __version__

    merged = merge(per_rank)
    counts = {v: sum(c["verdict"] == v for c in merged) for v in (PASS, SKIPPED, FAIL)}
    verdict = FAIL if counts[FAIL] or incomplete else PASS
    report = {
        "format": FORMAT_NAME, "mnmg_sampler": __version__,
        "command": "mnmg-sampler " + " ".join(sys.argv[1:]) if sys.argv[1:2] == ["selfcheck"]
        else None,
        "time_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "world_size": env.world_size, "summary": _summary(dev, sim, env.world_size),
        "verdict": verdict, "counts": counts, "incomplete": incomplete, "checks": merged,
    }
    out = sys.stderr if args.json == STDOUT else sys.stdout
    p = rank_prefix()
    print(f"{p}mnmg-sampler {__version__} selfcheck: {report['summary']}", file=out)
    for line in table(merged):
        print(f"{p}{line}", file=out)
    tail = " (incomplete: a peer stopped answering)" if incomplete else ""
    print(f"{p}verdict: {verdict}{tail}: {counts[PASS]} pass, {counts[SKIPPED]} skipped, "
          f"{counts[FAIL]} fail", file=out)
    text = json.dumps(report, indent=2, default=jsonable) + "\n"
    if args.json == STDOUT:
        sys.stdout.write(text)
    elif args.json:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"{p}wrote {path}: {ISSUE_HINT.split(' (')[0]}", file=out)
    else:
        print(f"{p}{ISSUE_HINT}", file=out)
    out.flush()

