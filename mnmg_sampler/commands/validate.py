"""``mnmg-sampler validate CONFIG [KEY=VALUE ...]``: check a job config without starting ranks.

Prints the resolved config (defaults < file < overrides, nulls filled in) as YAML and ``ok``.
Values that cannot work are refused, including a generated graph (``rmat:``) or a model too
large for this machine's memory (:func:`mnmg_sampler.train.budget.check_job_memory`, with one
rank per host and ``--world-size`` ranks).
Any problem is one line naming the dotted key, exit code 2 (via ``cli.main``).
"""

from __future__ import annotations

import argparse


def add_parser(subparsers) -> None:
    from ..config import add_config_arguments

    p = subparsers.add_parser(
        "validate",
        help="check a YAML job config and print it resolved",
        description="Check a YAML job config (types, ranges, unknown keys, cross-field rules, "
        "dataset path) without starting any rank, then print the resolved config and 'ok'.",
    )
    add_config_arguments(p, config_flag=False)
    p.add_argument("--world-size", type=int, default=None, metavar="W",
                   help="also check the config against W ranks (e.g. partition.parts)")
    p.add_argument("-q", "--quiet", action="store_true", help="print only 'ok'")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import importlib.util

    from ..config import check_paths, config_to_yaml, load_config
    from ..errors import MissingDependencyError
    from ..train.budget import check_job_memory
    from ..train.checks import check_job
    from ..train.setup import typed_meta

    cfg = load_config(args.config, args.overrides, world_size=args.world_size)
    check_paths(cfg)
    check_job_memory(cfg, args.world_size or 1)  # a generated graph or model that cannot fit
    check_job(cfg, typed_meta(cfg))  # a typed graph: its types and relations (a file is read)
    if cfg.partition.method == "metis" and importlib.util.find_spec("pymetis") is None:
        raise MissingDependencyError(
            "partition.method: metis needs pymetis, which is not installed",
            "partitioning would fail on every rank",
            "pip install 'mnmg-sampler[metis]' or use partition.method=random")
    if not args.quiet:
        n = len(args.overrides)
        print(f"# resolved from {args.config}" + (f" + {n} override(s)" if n else ""))
        print(config_to_yaml(cfg), end="")
    print("ok")
    return 0
