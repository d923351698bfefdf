"""Values and overrides: type coercion, unknown-key hints and ``dotted.key=value`` parsing
(errors as the package docstring says)."""

from __future__ import annotations

import dataclasses
import difflib
import os
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from ..errors import ConfigError
from .fields import _all_keys, _hints, _is_section, _unwrap_optional, format_value, per_relation
from .schema import REMOVED_KEYS, JobConfig

# --------------------------------------------------------------------------- errors


def _err(key: str, what: str, fix: str = "", consequence: str = "") -> ConfigError:
    return ConfigError(f"{key}: {what}", consequence, fix)


def _show(v: Any) -> str:
    return repr(v) if isinstance(v, str) else format_value(v)


def _unknown_key(key: str, siblings: Sequence[str], parent: str) -> ConfigError:
    if key in REMOVED_KEYS:  # an old config: say what became of the key
        why, fix = REMOVED_KEYS[key]
        return ConfigError(f"{key}: removed: {why}", "the config is not applied", fix)
    leaf = key.rsplit(".", 1)[-1]
    close = difflib.get_close_matches(leaf, siblings, n=1, cutoff=0.6)
    if close:
        hint = f"did you mean {parent}{close[0]}?"
    else:  # maybe the right name in the wrong section, e.g. a top-level `batch_size`
        keys = _all_keys()
        by_leaf = {k.rsplit(".", 1)[-1]: k for k in keys}
        close = difflib.get_close_matches(leaf, list(by_leaf), n=1, cutoff=0.75)
        hint = f"did you mean {by_leaf[close[0]]}?" if close else ""
    where = f"valid keys of {parent[:-1]}" if parent else "valid top-level keys"
    return ConfigError(
        f"{key}: unknown key" + (f" ({hint})" if hint else ""),
        "It would be silently ignored",
        f"rename or remove it; {where}: {', '.join(siblings)}",
    )


# --------------------------------------------------------------------------- values


def _coerce(key: str, tp: Any, v: Any, check: tuple | None, example: Any) -> Any:
    """Check one value against its annotated type and range; return it normalised."""
    if per_relation(tp):
        return _coerce_per_relation(key, tp, v, check, example)
    inner, optional = _unwrap_optional(tp)
    checks = () if check is None else (check,) if callable(check[0]) else check
    if example is not None:
        fix = f"e.g. {key}={format_value(example)}"
    elif checks:  # a null default has no example: say what is accepted instead
        fix = f"set {key} to {', '.join(c[1] for c in checks)}" + (
            ", or null for the default" if optional else "")
    else:
        fix = f"set {key} to {_PHRASE.get(inner, ('a value',))[0]}" + (
            ", or null for the default" if optional else "")
    if v is None:
        if optional:
            return None
        if typing.get_origin(inner) is Literal:
            want = "one of " + ", ".join(format_value(c) for c in typing.get_args(inner))
        elif typing.get_origin(inner) is list:
            want = f"a list of {_PHRASE[typing.get_args(inner)[0]][1]}"
        else:
            want = _PHRASE[inner][0]
        raise _err(key, f"expected {want}, got null", fix)
    origin = typing.get_origin(inner)
    if origin is Literal:
        choices = typing.get_args(inner)
        for c in choices:  # by type too: 1 is not true
            if type(v) is type(c) and v == c:
                return v
        close = difflib.get_close_matches(str(v).lower(), [str(c) for c in choices], n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise _err(key, f"expected one of {', '.join(format_value(c) for c in choices)}, got "
                        f"{_show(v)}{hint}", fix)
    if origin is list:
        item_tp = typing.get_args(inner)[0]
        if isinstance(v, str) and "," in v:  # `sampler.fanouts=10,10`
            import yaml

            v = [yaml.safe_load(s) for s in v.split(",")]
        if not isinstance(v, (list, tuple)):
            v = [v]
        try:
            out = [_scalar(item_tp, x) for x in v]
        except (TypeError, ValueError):
            raise _err(key, f"expected a list of {_PHRASE[item_tp][1]}, got {_show(v)}",
                       fix) from None
    else:
        try:
            out = _scalar(inner, v)
        except (TypeError, ValueError):
            raise _err(key, f"expected {_PHRASE[inner][0]}{' or null' if optional else ''}, "
                       f"got {_show(v)}" + (" (quote it)" if inner is str else ""), fix) from None
    for pred, phrase in checks:
        if not pred(out):
            raise _err(key, f"expected {phrase}, got {_show(out)}", fix)
    return out


def _coerce_per_relation(key: str, tp: Any, v: Any, check: tuple | None, example: Any) -> Any:
    """A fanouts value: a list (every relation) or a mapping ``{"src__rel__dst": list}`` whose
    lists are checked as the list form is, and have equally many hops."""
    _, optional = _unwrap_optional(tp)
    as_list = list[int] | None if optional else list[int]
    if not isinstance(v, Mapping):
        return _coerce(key, as_list, v, check, example)
    if not v:
        raise _err(key, "expected a list, or a mapping of relations to lists, got {}",
                   f"e.g. {key}=[10, 10], or {key}.author__writes__paper=10,10 per relation")
    out = {}
    for rel, lst in v.items():
        rel = str(rel)
        parts = rel.split("__")
        if len(parts) != 3 or not all(parts):
            raise _err(f"{key}.{rel}", "not a relation name",
                       "name relations src__rel__dst, e.g. author__writes__paper")
        out[rel] = _coerce(f"{key}.{rel}", list[int], lst, check, example)
    hops = {len(x) for x in out.values()}
    if len(hops) > 1:
        raise _err(key, f"relations have lists of {sorted(hops)} hops",
                   "give every relation as many fanouts (0 for none at a hop)",
                   "Each GraphSAGE layer consumes one hop of every relation")
    return out


_PHRASE = {int: ("an integer", "integers"), float: ("a number", "numbers"),
           bool: ("true or false", "booleans"), str: ("a string", "strings")}


def _scalar(tp: type, v: Any) -> Any:
    if tp is bool:
        if isinstance(v, bool):
            return v
        raise TypeError
    if tp is int:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TypeError
        if isinstance(v, float) and not v.is_integer():
            raise ValueError
        return int(v)
    if tp is float:
        if isinstance(v, bool):
            raise TypeError
        if not isinstance(v, (int, float, str)):  # YAML 1.1 reads `1e-3` as a string
            raise TypeError
        try:
            return float(v)
        except OverflowError:  # an integer beyond any float (10**400)
            raise ValueError from None
    if tp is str:
        if not isinstance(v, str):
            raise TypeError
        return v
    raise TypeError(f"unsupported schema type {tp!r}")  # pragma: no cover


def _build(cls: type, data: Any, prefix: str) -> Any:
    """Build section ``cls`` from a mapping, rejecting unknown keys and bad values."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        name = prefix[:-1] or "config"
        raise _err(name, f"expected a mapping of settings, got {_show(data)}",
                   f"write it as `{prefix[:-1]}:` followed by indented `key: value` lines"
                   if prefix else "the file must be a YAML mapping of sections")
    hints = _hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    for k in data:
        if not isinstance(k, str) or k not in names:
            raise _unknown_key(prefix + str(k), names, prefix)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        tp, key, v = hints[f.name], prefix + f.name, data[f.name]
        if _is_section(tp):
            kwargs[f.name] = _build(tp, v, key + ".")
        else:
            default = (f.default_factory() if f.default_factory is not dataclasses.MISSING
                       else f.default)
            out = _coerce(key, tp, v, f.metadata.get("check"), default)
            if f.metadata.get("path") and isinstance(out, str):
                out = os.path.expandvars(os.path.expanduser(out))
            kwargs[f.name] = out
    return cls(**kwargs)


# --------------------------------------------------------------------------- overrides


def _field_at(key: str) -> tuple[Any, bool]:
    """(annotated type, is_section) of a dotted key; ConfigError with a hint when unknown."""
    cls, parts = JobConfig, key.split(".")
    for i, part in enumerate(parts):
        hints = _hints(cls)
        names = [f.name for f in dataclasses.fields(cls)]
        if part not in names:
            raise _unknown_key(key, names, ".".join(parts[:i]) + ("." if i else ""))
        tp = hints[part]
        if i == len(parts) - 2 and per_relation(tp):  # sampler.fanouts.src__rel__dst
            return list[int], False
        if i < len(parts) - 1:
            if not _is_section(tp):
                raise _err(key, f"{'.'.join(parts[:i + 1])} is a value, not a section",
                           f"use {'.'.join(parts[:i + 1])}=VALUE")
            cls = tp
    return tp, _is_section(tp)


def _parse_override(text: str) -> tuple[str, Any]:
    import yaml

    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or " " in key:
        raise ConfigError(f"override {text!r} is not KEY=VALUE", "It cannot be applied",
                          "write e.g. sampler.batch_size=512 (no spaces around '=')")
    tp, _ = _field_at(key)
    inner, optional = _unwrap_optional(tp)
    if inner is str:  # keep text as typed (`name=2024`), except null for optional fields
        stripped = raw.strip()
        if optional and stripped in ("", "null", "~", "Null", "NULL"):
            return key, None
        return key, stripped
    try:
        return key, yaml.safe_load(raw)
    except yaml.YAMLError:
        raise _err(key, f"cannot parse the override value {raw!r}",
                   "quote lists in the shell, e.g. 'sampler.fanouts=[10,10]'") from None


def _set_dotted(data: dict, key: str, value: Any) -> None:
    parts = key.split(".")
    node = data
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if isinstance(child, list) and i == len(parts) - 2:  # one relation of list fanouts
            raise _err(key, f"{'.'.join(parts[:-1])} is a list {format_value(child)}, "
                       "which applies to every relation",
                       f"give {'.'.join(parts[:-1])} as a mapping of every relation (in the "
                       "file or as one override), then override single relations")
        if not isinstance(child, dict):  # missing, null or (invalid) scalar: replace
            child = {}
            node[part] = child
        node = child
    last = parts[-1]
    if isinstance(value, Mapping) and isinstance(node.get(last), dict):
        merged = dict(node[last])
        for k, v in value.items():
            merged[k] = v
        node[last] = merged
    else:
        node[last] = value


def apply_overrides(data: Mapping, overrides: Sequence[str]) -> dict:
    """A deep copy of ``data`` with each ``dotted.key=value`` applied in order (last wins)."""
    import copy

    out = copy.deepcopy(dict(data))
    for text in overrides:
        key, value = _parse_override(text)
        _set_dotted(out, key, value)
    return out
