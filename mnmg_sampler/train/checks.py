"""The job's config checked against its graph: one node type and one relation, or several.

A typed graph's types and relations (:class:`TypedMeta`) come from the dataset (``validate``) or
from the partition manifest (every rank at job start, before the sampling service or any loader
starts). The config's typed keys (``sampler.input_type``, ``link.edge_type``, fanouts per
relation, ``model.embeddings``) are checked against them (:func:`check_typed_job`); the
homogeneous-only keys are refused for a typed graph, and the typed-only keys for a homogeneous
one (:func:`check_homogeneous_job`), naming the key.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config import JobConfig, num_hops
from ..config.parse import _err
from .model import embedded_types, relations_per_layer

__all__ = ["TypedMeta", "check_homogeneous_job", "check_job", "check_typed_job",
           "link_edge_type", "meta_of_graph", "meta_of_manifest"]

EdgeType = tuple[str, str, str]


@dataclass
class TypedMeta:
    """A typed graph's types and relations, as a config is checked against them."""

    num_nodes: dict[str, int]
    edge_types: list[EdgeType]
    x_dims: dict[str, int]
    """Feature width of each node type with features."""
    labelled: list[str]
    """Node types with labels."""


def meta_of_graph(g) -> TypedMeta:
    """The :class:`TypedMeta` of a :class:`~mnmg_sampler.graph.typed.TypedGraph`."""
    return TypedMeta(g.num_nodes_dict(), [tuple(et) for et in g.edge_types],
                     {t: int(np.prod(np.asarray(x).shape[1:], dtype=np.int64))
                      for t, x in g.x.items()}, sorted(g.y))


def meta_of_manifest(manifest: dict) -> TypedMeta:
    """The :class:`TypedMeta` of a typed partition directory's manifest (no part is read)."""
    tp = manifest["typed"]
    off = tp["node_type_offset"]
    return TypedMeta({t: int(off[i + 1] - off[i]) for i, t in enumerate(tp["node_types"])},
                     [tuple(et) for et in tp["edge_types"]],
                     {t: int(np.prod(v["shape"], dtype=np.int64)) for t, v in tp["x"].items()},
                     sorted(tp["y"]))


_HOMOGENEOUS_ONLY = (
    ("dataset.features", lambda c: c.dataset.features is not None),
    ("dataset.labels", lambda c: c.dataset.labels is not None),
    ("dataset.train_mask", lambda c: c.dataset.train_mask is not None),
    ("dataset.val_mask", lambda c: c.dataset.val_mask is not None),
    ("dataset.test_mask", lambda c: c.dataset.test_mask is not None),
    ("dataset.feature_dim", lambda c: c.dataset.feature_dim != 0),
    ("dataset.num_classes", lambda c: c.dataset.num_classes != 0),
    ("dataset.undirected", lambda c: c.dataset.undirected is True),
    ("dataset.renumber", lambda c: c.dataset.renumber is True),
    ("sampler.weights", lambda c: c.sampler.weights is not None),
)


def _hint(name: str, names, show=str) -> str:
    """`` (did you mean X?)`` with the closest of ``names`` (shown by ``show``), or ''."""
    import difflib

    close = difflib.get_close_matches(name, list(names), n=1, cutoff=0.6)
    return f" (did you mean {show(close[0])}?)" if close else ""


def _check_fanouts(key: str, fanouts, meta: TypedMeta) -> None:
    if not isinstance(fanouts, dict):
        return
    rels = {"__".join(et): et for et in meta.edge_types}
    for k in fanouts:
        if k not in rels:
            raise _err(f"{key}.{k}", f"not a relation of the graph{_hint(k, rels)}",
                       f"use the graph's relations: {', '.join(rels)}",
                       "Its fanouts would be ignored")
    missing = [k for k in rels if k not in fanouts]
    if missing:
        raise _err(key, f"no fanouts for relations {', '.join(missing)}",
                   "give every relation a list (0 per hop samples none), or one list for all",
                   "PyG's semantics need one list per relation")


def check_typed_job(cfg: JobConfig, meta: TypedMeta) -> str:
    """Check the config against a typed graph; returns the input node type. Raises
    :class:`~mnmg_sampler.errors.ConfigError` naming the key."""
    for key, given in _HOMOGENEOUS_ONLY:
        if given(cfg):
            raise _err(key, f"{cfg.dataset.name} is a typed graph, and {key} applies to "
                       "homogeneous graphs only", f"remove {key} (typed graphs carry their node "
                       "data per type: docs/hetero.md)", "It would be ignored")
    trees = cfg.task == "link" and (cfg.sampler.time_attr is not None or cfg.sampler.disjoint)
    if cfg.training.eval_memory_mb is not None and not trees:
        raise _err("training.eval_memory_mb", f"{cfg.dataset.name} is a typed graph, and the "
                   "key applies to homogeneous graphs and to typed link jobs with disjoint "
                   "trees only", "remove it", "It would be ignored")
    if cfg.task == "link":
        et = link_edge_type(cfg, meta)
        _check_typed_link(cfg)
        t, ends, what = et[0], (et[0], et[2]), f"both node types of [{', '.join(et)}]"
    else:
        t = _check_typed_node(cfg, meta)
        ends, what = (t,), f"node type {t!r}"
    _check_fanouts("sampler.fanouts", cfg.sampler.fanouts, meta)
    _check_fanouts("sampler.eval_fanouts", cfg.sampler.eval_fanouts, meta)
    if cfg.training.mode == "train":  # the model: a chain of relations to the targets
        layers = cfg.model.layers or num_hops(cfg.sampler.fanouts)
        rels = relations_per_layer(meta.edge_types, ends, layers)
        if not set(ends) <= {r[2] for r in rels[-1]}:
            raise _err("link.edge_type" if cfg.task == "link" else "sampler.input_type",
                       f"no chain of {layers} relations ends at {what}",
                       "give both endpoint types incoming relations (the reverse relation, "
                       "PyG's rev_ naming)" if cfg.task == "link" else "classify a node type "
                       "relations point to, and give every type on the way incoming relations "
                       "(reverse ones, PyG's rev_ naming)")
        # the types whose rows the model learns: a ConfigError for featureless ones with none
        embedded_types({x for et in rels[0] for x in (et[0], et[2])}, meta.x_dims,
                       cfg.model.embeddings)
    return t


def _check_typed_node(cfg: JobConfig, meta: TypedMeta) -> str:
    """The node job's keys on a typed graph; returns its input node type."""
    for key, given in (("sampler.time_attr", cfg.sampler.time_attr is not None),
                       ("sampler.disjoint", cfg.sampler.disjoint),
                       ("link.split_by", cfg.link.split_by != "random")):
        if given:
            raise _err(key, "set with task node", "drop it: the typed node job samples "
                       "without time or disjoint trees (the link job takes them)",
                       "It would be ignored")
    if cfg.training.mode == "train" and cfg.training.eval_mode != "sampled":
        raise _err("training.eval_mode", f"{cfg.training.eval_mode} evaluation is homogeneous "
                   "only", "set training.eval_mode=sampled (minibatches sampled with "
                   "sampler.eval_fanouts)")
    t = cfg.sampler.input_type
    need_labels = cfg.training.mode == "train"
    if t is None:
        choices = meta.labelled if need_labels else list(meta.num_nodes)
        if len(choices) != 1:
            raise _err("sampler.input_type", "not set, and the graph has "
                       + (f"{len(choices)} labelled node types" if need_labels
                          else f"{len(choices)} node types"),
                       f"set sampler.input_type to one of {', '.join(choices) or '(none)'}")
        t = choices[0]
    elif t not in meta.num_nodes:
        raise _err("sampler.input_type", f"node type {t!r} is not in the graph"
                   f"{_hint(t, meta.num_nodes, repr)}",
                   f"use one of {', '.join(meta.num_nodes)}")
    if need_labels and t not in meta.labelled:
        raise _err("sampler.input_type", f"node type {t!r} has no labels",
                   f"classify a labelled type ({', '.join(meta.labelled) or 'none'}), or use "
                   "training.mode=sample")
    return t


def link_edge_type(cfg: JobConfig, meta: TypedMeta) -> EdgeType:
    """The relation a typed link job predicts: ``link.edge_type`` checked against the graph,
    or, when null, its only relation that is not a ``rev_`` reverse of another."""
    given = cfg.link.edge_type
    names = ", ".join(f"[{', '.join(et)}]" for et in meta.edge_types)
    if given is None:
        fwd = [et for et in meta.edge_types if not (
            et[1].startswith("rev_") and (et[2], et[1][4:], et[0]) in meta.edge_types)]
        if len(fwd) != 1:
            raise _err("link.edge_type", f"not set, and the graph has {len(fwd)} relations "
                       "besides reverse ones", f"set link.edge_type to one of {names}")
        return fwd[0]
    et = tuple(str(v) for v in given)
    if et not in meta.edge_types:
        hint = _hint("__".join(et), ["__".join(e) for e in meta.edge_types],
                     lambda k: f"[{', '.join(k.split('__'))}]")
        raise _err("link.edge_type", f"[{', '.join(et)}] is not a relation of the graph{hint}",
                   f"use one of {names}")
    return et


def _check_typed_link(cfg: JobConfig) -> None:
    """The link job's keys on a typed graph (its relation: :func:`link_edge_type`)."""
    if cfg.sampler.time_attr is not None and cfg.link.split_by != "time":
        raise _err("sampler.time_attr", f"{cfg.sampler.time_attr!r} with link.split_by: "
                   f"{cfg.link.split_by}", "set link.split_by=time (the edges of a random "
                   "split have no time bound), or sampler.time_attr=null")
    if cfg.sampler.input_type is not None:
        raise _err("sampler.input_type", "set with task link",
                   "drop it: the seeds are the edges of link.edge_type, whose endpoint types "
                   "are both encoded")


def check_homogeneous_job(cfg: JobConfig) -> None:
    """The typed-only keys on a homogeneous graph: a ConfigError naming the key."""
    s = cfg.sampler
    if cfg.link.edge_type is not None:
        raise _err("link.edge_type", f"{cfg.dataset.name} is a homogeneous graph; a relation "
                   "to predict applies to typed graphs only", "drop it")
    for key, given in (("sampler.time_attr", s.time_attr is not None),
                       ("sampler.disjoint", s.disjoint),
                       ("link.split_by", cfg.link.split_by != "random")):
        if given:
            raise _err(key, f"{cfg.dataset.name} is a homogeneous graph without a time "
                       f"attribute (column) {s.time_attr or 'time'!r}; time and disjoint "
                       "sampling apply to graphs with time and typed graphs (docs/temporal.md)",
                       "drop it, or give the graph its time (a Data's or HeteroData's "
                       "attribute, an edge table's column) and name it in sampler.time_attr")
    for key, given in (("sampler.input_type", s.input_type is not None),
                       ("sampler.fanouts", isinstance(s.fanouts, dict)),
                       ("sampler.eval_fanouts", isinstance(s.eval_fanouts, dict))):
        if given:
            raise _err(key, f"{cfg.dataset.name} is a homogeneous graph; "
                       + ("a node type applies" if key.endswith("input_type") else
                          "fanouts per relation apply") + " to typed graphs only",
                       "drop it" if key.endswith("input_type") else
                       f"give {key} as one list, e.g. [10, 10]",
                       "A homogeneous graph has one node type and one relation")


def check_job(cfg: JobConfig, meta: TypedMeta | None) -> str | None:
    """The config checked against its graph (``meta``: a typed graph's, ``None`` for a
    homogeneous one): a ConfigError naming the key; returns a typed job's input node type."""
    if meta is None:
        return check_homogeneous_job(cfg)
    return check_typed_job(cfg, meta)
