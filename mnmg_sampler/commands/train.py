"""``mnmg-sampler train --config FILE [KEY=VALUE ...] [--resume]``: the GraphSAGE job.

Run it under torchrun (``launch/run.sh``); without torchrun it runs as a world of one.
"""

from __future__ import annotations

import argparse


def add_parser(subparsers) -> None:
    from ..config import add_config_arguments

    p = subparsers.add_parser(
        "train", help="run a YAML-configured GraphSAGE job (under torchrun)",
        description="Partition (if needed), sample and train GraphSAGE with DDP, as configured. "
        "Launch with torchrun, e.g. `bash launch/run.sh`.")
    add_config_arguments(p, config_flag=True)
    p.add_argument("--resume", action="store_true",
                   help="continue from the latest checkpoint in output.dir "
                   "(automatic after a torchrun --max-restarts restart)")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar (rank 0 draws one only on a terminal)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from torch.distributed.elastic.multiprocessing.errors import record

    from ..config import check_paths, load_config
    from ..errors import MnmgError

    cfg = load_config(args.config, args.overrides)
    check_paths(cfg)
    user_error: list[MnmgError] = []

    @record  # unexpected failures: traceback into torchrun's summary
    def job() -> None:
        import torch.distributed as dist

        from ..distributed.collective import is_peer_failure, peer_error
        from ..train.job import run_job

        ok = False
        try:
            run_job(cfg, resume=args.resume, progress=not args.no_progress)
            ok = True
        except MnmgError as e:  # user errors: one line per rank via cli.main, no traceback
            user_error.append(e)
        except RuntimeError as e:  # a training collective failed: a peer died or hangs
            if not is_peer_failure(e):
                raise
            user_error.append(peer_error(e, "a collective of the training loop"))
        finally:
            if dist.is_initialized():
                if ok:  # nobody tears down sockets a peer still reads from
                    dist.barrier()
                dist.destroy_process_group()

    job()
    if user_error:
        raise user_error[0]
    return 0
