"""What the DGL peer scripts (``dgl_*_peer.py``) share: ``import dgl``, their common options and
their timed loop. A peer venv's Python runs them as plain scripts: this module imports nothing
of mnmg_sampler, so they load it as a sibling file."""

import argparse
import sys
import time
import types


def import_dgl():
    """The ``dgl`` module. DGL 2.1 loads GraphBolt's native library (built only for older torch)
    on ``import dgl``; the classic samplers do not use it, so a placeholder module stands in for
    it."""

    class _Placeholder(types.ModuleType):
        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            return type(name, (), {})

    sys.modules.setdefault("dgl.graphbolt", _Placeholder("dgl.graphbolt"))
    import dgl

    return dgl


def peer_parser(description: str, graph_help: str) -> argparse.ArgumentParser:
    """The options every peer has (``--fanouts`` in PyG's hop order: hop 1 first)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--graph", required=True, help=graph_help)
    p.add_argument("--fanouts", default="15,10,5", help="PyG order: hop 1 first")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--replace", action="store_true")
    return p


def start_dgl(threads: int):
    """``(dgl, torch)`` with ``threads`` torch threads and torch's seed 0."""
    import torch

    dgl = import_dgl()
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    return dgl, torch


def timed_batches(sample, seeds, batch_size: int, warmup: int, limit: int | None = None):
    """``sample(batch) -> (edges, nodes)`` over consecutive ``batch_size`` batches of ``seeds``
    (at most ``limit``) after ``warmup`` of them: ``(batches, seconds, edges, nodes)``."""
    batches = [seeds[i:i + batch_size] for i in range(0, seeds.numel(), batch_size)][:limit]
    for b in batches[:warmup]:
        sample(b)
    edges = nodes = 0
    t0 = time.perf_counter()
    for b in batches:
        e, n = sample(b)
        edges, nodes = edges + e, nodes + n
    return len(batches), time.perf_counter() - t0, edges, nodes
