"""What a job will allocate, estimated from its config alone and checked before allocating.

``validate`` runs :func:`check_job_memory` on the machine it runs on (one rank per host, the
``--world-size`` it is given), and every rank runs it again at job start with the real world size
and the number of ranks sharing its host. Estimates are lower bounds: a value refused here cannot
work; one accepted may still be too large once the real dataset is read.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..config import JobConfig, num_hops, parse_dataset_name

__all__ = ["BYTES_PER_PARAM", "sage_dims", "sage_param_count", "check_model_memory",
           "check_job_memory"]

BYTES_PER_PARAM = 16
"""float32 value, gradient and the optimizer's two moments (Adam) of one parameter."""


def sage_dims(in_dim: int, hidden: int, out_dim: int, layers: int) -> list[int]:
    """Widths of a GraphSAGE stack: input, ``layers - 1`` hidden widths, output."""
    return [int(in_dim)] + [int(hidden)] * (int(layers) - 1) + [int(out_dim)]


def sage_param_count(dims: Sequence[int]) -> int:
    """Parameters of GraphSAGE layers with widths ``dims``: per layer ``lin_l`` (weight and
    bias) and ``lin_r`` (weight), as :class:`~mnmg_sampler.train.model.SAGELayer` and PyG's
    ``SAGEConv`` hold them."""
    return sum(2 * a * b + b for a, b in zip(dims[:-1], dims[1:], strict=True))


def check_model_memory(dims: Sequence[int], bytes_per_param: int = BYTES_PER_PARAM,
                       copies: int = 1, params: int | None = None) -> None:
    """:class:`~mnmg_sampler.errors.MemoryBudgetError` when ``copies`` models of widths
    ``dims`` (``params`` parameters, default one relation's; ``bytes_per_param`` each) cannot
    fit in this process."""
    from ..system.host_limits import check_allocation

    n = sage_param_count(dims) if params is None else int(params)
    many = f" on each of the {copies} ranks of this host" if copies > 1 else ""
    state = "" if bytes_per_param == 4 else ", with gradients and optimizer state"
    check_allocation(f"model.hidden: a GraphSAGE of widths {list(dims)} ({n:,} parameters"
                     f"{state}){many}", n * bytes_per_param * max(1, copies),
                     "lower model.hidden (or model.layers / the feature width)")


def check_job_memory(cfg: JobConfig, world_size: int = 1, ranks_per_host: int = 1) -> None:
    """Refuse a job whose generated graph or model cannot fit, before anything is allocated.

    An ``rmat:`` dataset is drawn 1/``world_size`` per rank (:func:`..graph.rmat.rmat_bytes`);
    the model's input width is ``dataset.feature_dim`` (at least 1: a file's own features are
    not known before it is read) and its output ``dataset.num_classes`` (at least 1).
    """
    spec = parse_dataset_name(cfg.dataset.name)
    if spec.kind == "rmat":
        from ..graph.rmat import check_rmat_memory

        check_rmat_memory(spec.scale, spec.edge_factor, world_size, ranks_per_host,
                          key="dataset.name")
    if cfg.training.mode == "train":
        m, d = cfg.model, cfg.dataset
        layers = m.layers or num_hops(cfg.sampler.fanouts)
        dims = sage_dims(max(1, d.feature_dim), m.hidden, max(1, d.num_classes), layers)
        check_model_memory(dims, copies=ranks_per_host)
