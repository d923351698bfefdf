"""Command-line options that ``info``, ``partition`` and ``sample`` share for reading a graph,
and the refusal of the homogeneous-only ones for a typed input; kept apart from the commands so
that none of them imports another.
"""

from __future__ import annotations

import argparse

__all__ = ["add_node_data_arguments", "add_renumber_argument", "add_time_column_argument",
           "add_weights_argument", "check_typed_renumber", "check_weights_file",
           "node_data_kwargs", "typed_graph_of"]


def add_weights_argument(p: argparse.ArgumentParser, what: str) -> None:
    """``--weights NAME|FILE``: the CLI's ``sampler.weights`` (shared with ``sample``)."""
    p.add_argument("--weights", metavar="NAME|FILE",
                   help="edge weights, as sampler.weights in a job file: the name of an array "
                   "of the dataset's .npz (e.g. adj_data) or a .npy file, one value per input "
                   f"edge in the input's order; {what} (default: none, uniform sampling)")


def check_weights_file(spec: str | None) -> None:
    """A ``--weights`` naming a ``.npy`` that does not exist: a typed error before any load."""
    from pathlib import Path

    from ..errors import GraphFormatError

    if spec and spec.lower().endswith(".npy") and not Path(spec).expanduser().is_file():
        raise GraphFormatError(f"--weights: file {spec!r} not found", "no edge weights can be "
                               "loaded", "fix the path, or name an array of the dataset's .npz "
                               "(e.g. adj_data)")


def add_renumber_argument(p: argparse.ArgumentParser) -> None:
    """``--renumber auto|true|false``: the CLI's ``dataset.renumber`` (shared with ``info``)."""
    p.add_argument("--renumber", choices=("auto", "true", "false"), default="auto",
                   help="number the nodes 0..N-1 by ascending input id, keeping the input's ids "
                   "for n_id and seeds; auto (default): when the largest id is far above the "
                   "node count (docs/formats.md)")


def add_node_data_arguments(p: argparse.ArgumentParser) -> None:
    """Separate node-data files and the node-id bound (shared with ``info``)."""
    p.add_argument("--features", metavar="FILE",
                   help="node features, one row per node (.npy, .npz, .pt, .csv)")
    p.add_argument("--labels", metavar="FILE", help="node labels, one per node")
    for split in ("train", "val", "test"):
        p.add_argument(f"--{split}-mask", metavar="FILE",
                       help=f"the {split} split: bool per node, or node ids")
    p.add_argument("--max-node-id", type=int, default=1 << 40, metavar="N",
                   help="refuse node ids above N (default 2**40)")


def node_data_kwargs(args: argparse.Namespace) -> dict:
    """``load_graph`` keyword arguments from :func:`add_node_data_arguments`."""
    masks = {s: getattr(args, f"{s}_mask") for s in ("train", "val", "test")}
    return {"x": args.features, "y": args.labels, "max_node_id": args.max_node_id,
            "masks": {k: v for k, v in masks.items() if v is not None}}


def check_typed_renumber(name: str, renumber, typed: bool | None = None) -> None:
    """``--renumber true`` on a typed graph: a :class:`GraphFormatError`. Typed graphs keep their
    per-type ids and are never renumbered, so the flag would be silently ignored."""
    from ..errors import GraphFormatError

    if str(renumber).lower() != "true":
        return
    if typed is None:
        from ..graph.typed_io import typed_graph_at

        typed = (":" not in name or name.startswith(("/", "."))) and \
            typed_graph_at(name) is not None
    if typed:
        raise GraphFormatError(
            f"{name} is a typed graph; --renumber true applies to homogeneous graphs only",
            "typed graphs keep their per-type ids 0..N_t-1 and are not renumbered, so the flag "
            "would be ignored", "drop --renumber (or pass --renumber auto)")


_HOMOGENEOUS_ONLY = ("undirected", "drop_self_loops", "drop_duplicates", "features", "labels",
                     "train_mask", "val_mask", "test_mask")


def add_time_column_argument(p: argparse.ArgumentParser) -> None:
    """``--time-column NAME``: read a table's edge time column (a one-type temporal graph)."""
    p.add_argument("--time-column", metavar="NAME",
                   help="a CSV/TSV/parquet edge table's int64 edge time column, by header "
                   "name: the graph is one-type temporal, with time_attr NAME "
                   "(docs/temporal.md)")


def _time_table(path: str, column: str):
    from ..errors import GraphFormatError
    from ..graph.tables import TABLE_SUFFIXES
    from ..graph.temporal import temporal_table_graph

    if not path.lower().endswith(TABLE_SUFFIXES):
        raise GraphFormatError(f"--time-column {column!r} with {path}",
                               "only CSV / TSV / parquet edge tables have time columns",
                               f"give a table ({', '.join(TABLE_SUFFIXES)}) or drop the option")
    return temporal_table_graph(path, column)


def typed_graph_of(args: argparse.Namespace):
    """The typed graph ``args.graph`` names (a saved HeteroData or an OGB hetero directory),
    else ``None``; options that only apply to homogeneous graphs are refused for it.

    A saved ``.pt`` keeps its ``time`` attributes, as :func:`mnmg_sampler.partition_graph`
    does (PyG's name): a ``Data`` with an edge ``time`` is the one-type timed graph."""
    from ..graph.api import typed_graph_of as read_typed
    from ..graph.typed_io import typed_graph_at

    time_column = getattr(args, "time_column", None)
    if time_column:
        g = _time_table(args.graph, time_column)
    elif ":" in args.graph and not args.graph.startswith(("/", ".")):
        return None  # a spec such as rmat:10
    elif args.graph.lower().endswith((".pt", ".pth")):
        g = read_typed(args.graph, "time")
    else:
        g = typed_graph_at(args.graph)
    if g is not None:
        check_typed_options(args)
    return g


def check_typed_options(args: argparse.Namespace) -> None:
    """Refuse the options of ``args`` that apply to homogeneous graphs only (``args.graph`` is
    a typed graph)."""
    from ..errors import GraphFormatError

    given = [a for a in _HOMOGENEOUS_ONLY if getattr(args, a, None) not in (None, False)]
    if given:
        raise GraphFormatError(
            f"{args.graph} is a typed graph; --{given[0].replace('_', '-')} applies to "
            "homogeneous graphs only", "it would be ignored",
            "drop the option (typed graphs carry their node data per type, docs/hetero.md)")
    check_typed_renumber(args.graph, getattr(args, "renumber", "auto"), typed=True)
