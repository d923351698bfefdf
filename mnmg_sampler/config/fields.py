"""Introspection of the schema: every leaf key with its type, default and doc."""

from __future__ import annotations

import dataclasses
import functools
import operator
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from .schema import JobConfig


@dataclass(frozen=True)
class FieldInfo:
    """One leaf of the schema: dotted key, type as text, default, one-line doc."""

    key: str
    type: str
    default: Any
    doc: str


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _is_section(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        optional = len(args) < len(typing.get_args(tp))
        if len(args) == 1:
            return args[0], optional
        if optional:
            return functools.reduce(operator.or_, args), True
    return tp, False


def per_relation(tp: Any) -> bool:
    """True for a ``list[int] | dict[str, list[int]]`` field (fanouts: one list, or one per
    relation of a typed graph)."""
    inner, _ = _unwrap_optional(tp)
    return (typing.get_origin(inner) in (typing.Union, types.UnionType)
            and any(typing.get_origin(a) is dict for a in typing.get_args(inner)))


def _type_text(tp: Any) -> str:
    inner, optional = _unwrap_optional(tp)
    if per_relation(tp):
        text = "list[int] or mapping"
    elif typing.get_origin(inner) is Literal:
        text = " \\| ".join(format_value(c) for c in typing.get_args(inner))
    elif typing.get_origin(inner) is list:
        text = f"list[{typing.get_args(inner)[0].__name__}]"
    else:
        text = inner.__name__
    return f"{text} or null" if optional else text


def iter_fields(cls: type = JobConfig, prefix: str = "") -> Iterator[FieldInfo]:
    """Every leaf field of the schema in declaration order, with its dotted key and doc."""
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        key = prefix + f.name
        tp = hints[f.name]
        if _is_section(tp):
            yield from iter_fields(tp, key + ".")
            continue
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        yield FieldInfo(key, _type_text(tp), default, f.metadata.get("doc", ""))


def section_docs() -> dict[str, str]:
    """Top-level section name -> its one-line doc."""
    hints = _hints(JobConfig)
    return {f.name: f.metadata["doc"] for f in dataclasses.fields(JobConfig)
            if _is_section(hints[f.name])}


def _all_keys() -> list[str]:
    return [fi.key for fi in iter_fields()]


def format_value(v: Any) -> str:
    """A value as it would be written in YAML (``null``, ``true``, ``[10, 10]``)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return "[" + ", ".join(format_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {format_value(x)}" for k, x in v.items()) + "}"
    return str(v)


def num_hops(fanouts: list | dict) -> int:
    """Hops of ``sampler.fanouts``: the list's length, or that of every relation's list."""
    if isinstance(fanouts, dict):
        return len(next(iter(fanouts.values()))) if fanouts else 0
    return len(fanouts)


def fields_epilog() -> str:
    """Every dotted key with its doc, for the ``--help`` text of config-taking commands."""
    lines = ["config keys (override with KEY=VALUE; docs/configuration.md has the details):"]
    for fi in iter_fields():
        lines.append(f"  {fi.key} = {format_value(fi.default)}")
        lines.append(f"      {fi.doc}")
    return "\n".join(lines)
