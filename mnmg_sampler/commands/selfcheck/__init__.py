"""``mnmg-sampler selfcheck``: does every GPU part work on this machine, and how fast?

Checks, one line each, with a verdict (pass / fail / skipped, always with why) and a time:

* environment: versions (torch, CUDA, driver, numba, cupy), GPUs and their memory,
  GPU-to-GPU links, the torch.distributed backends;
* kernels: every sampling kernel against its twin on a generated graph, bit for bit, with
  sampled edges/s beside a random-gather loop; the CUDA kernels on the GPU, or in Numba's
  simulator with ``NUMBA_ENABLE_CUDASIM=1`` (small sizes; skipped without either);
* memory (with a GPU): Numba and CuPy allocations land in PyTorch's caching allocator,
  ``expandable_segments`` as configured;
* exchange (under torchrun, every rank): the service's wire messages through the all-to-all of
  the default backend (NCCL with CUDA, else gloo), checked and timed; a 2-hop distributed
  sampling round equal to the single process.

Run it alone, or on every local GPU with ``torchrun --nproc-per-node N -m mnmg_sampler
selfcheck``; rank 0 prints the table, ``--json OUT`` writes the report. Exit code 0 when nothing
failed on any rank, 1 when a check failed (all ranks agree), 3 when a peer stopped answering
within ``--timeout``.
"""

from __future__ import annotations

import argparse

from ...system.console import JSON_OUT_HELP

HELP = "check every GPU part (kernels, memory pool, NCCL exchange) on this machine; a report"


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("selfcheck", help=HELP, description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", metavar="OUT", nargs="?", const="-", help=JSON_OUT_HELP)
    p.add_argument("--scale", type=int, default=None, metavar="S",
                   help="kernel lines sample an R-MAT graph of 2**S nodes (default: 16; 6 in "
                        "Numba's simulator)")
    p.add_argument("--repeats", type=int, default=3, metavar="N",
                   help="timed repeats per rate, median reported (default: 3)")
    p.add_argument("--exchange-mib", type=float, default=4.0, metavar="MIB",
                   help="under torchrun: payload sent to each peer to measure bandwidth "
                        "(default: 4)")
    p.add_argument("--timeout", type=float, default=120.0, metavar="S",
                   help="under torchrun: seconds a rank waits for the others in a collective "
                        "before it reports them as stuck (default: 120)")
    p.add_argument("--expandable-segments", action=argparse.BooleanOptionalAction, default=True,
                   help="with a GPU: the allocator setting to apply and check, as "
                        "runtime.expandable_segments (default: on)")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from ...errors import ConfigError

    if args.scale is not None and not 4 <= args.scale <= 24:
        raise ConfigError(f"--scale {args.scale} is outside [4, 24]",
                          "the kernel lines would sample a graph too small or too large",
                          "pass --scale between 4 and 24 (2**S nodes)")
    if args.repeats < 1 or args.exchange_mib <= 0 or args.timeout <= 0:
        raise ConfigError("--repeats, --exchange-mib and --timeout must be positive",
                          "nothing could be timed", "pass positive values")
    from .runner import run_selfcheck

    return run_selfcheck(args)
