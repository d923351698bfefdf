"""One module per ``mnmg-sampler`` subcommand: ``add_parser(subparsers)`` and ``run(args)``.

Modules import heavy dependencies inside ``run`` so ``mnmg-sampler --help`` stays fast.
"""
