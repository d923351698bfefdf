"""What the ``mnmg-sampler`` commands print: aligned tables, ``--json``, rank prefixes, plain help.

No heavy imports here: every layer (commands, training job, bench) may use it.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from collections.abc import Iterable, Mapping
from typing import Any, TextIO

# ``MNMG_RANK_PREFIX=0``: the launcher already prefixes every line with the rank (the launch
# scripts run torchrun with --tee and --role rank, whose lines read ``[rank0]:...``).
PREFIX_ENV = "MNMG_RANK_PREFIX"


def rank_prefix() -> str:
    """``"[rankN] "`` for our log and error lines in a multi-rank job, unless the launcher adds
    its own (``MNMG_RANK_PREFIX=0``); ``""`` in a single process."""
    r = os.environ.get("RANK")
    if r is None or os.environ.get("WORLD_SIZE", "1") == "1":
        return ""
    if os.environ.get(PREFIX_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return ""
    return f"[rank{r}] "


# --------------------------------------------------------------------------- plain help text

_ROLE = re.compile(r":[a-z]+(?::[a-z]+)?:`~?([^`]+)`")
_LITERAL = re.compile(r"``([^`]+)``")
_SINGLE = re.compile(r"(?<![`\w])`([^`\n]+)`(?![`\w])")


def plain(text: str | None) -> str | None:
    """Docstring text without reST / Markdown markup, for ``--help``.

    ``:class:`MiniBatch``` and ``:func:`~a.seed_order``` become the name, double and single
    back-quoted literals lose their quotes.
    """
    if not text:
        return text
    text = _ROLE.sub(lambda m: m.group(1).rsplit(".", 1)[-1] if m.group(0).count("~") else
                     m.group(1), text)
    text = _LITERAL.sub(r"\1", text)
    return _SINGLE.sub(r"\1", text)


# --------------------------------------------------------------------------- tables and JSON


def fmt_count(v: float) -> str:
    """A rate or count for a person: 950, 12.3k, 4.56M, 1.2G."""
    v = float(v)
    if not math.isfinite(v):
        return str(v)
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= scale:
            return f"{v / scale:.3g}{unit}"
    return f"{v:.3g}" if v != int(v) else f"{int(v)}"


def print_table(rows: Iterable[tuple[str, Any]], file: TextIO | None = None) -> None:
    """Two aligned columns: ``label  value`` per row."""
    rows = [(str(k), str(v)) for k, v in rows]
    if not rows:
        return
    width = max(len(k) for k, _ in rows)
    out = file or sys.stdout
    for k, v in rows:
        print(f"{k:<{width}}  {v}".rstrip(), file=out)


def jsonable(v: Any) -> Any:
    """``json.dumps``'s ``default``: numpy and torch values as lists or scalars, else text."""
    if hasattr(v, "tolist"):  # numpy / torch scalars and arrays
        return v.tolist()
    if isinstance(v, (set, tuple)):
        return list(v)
    return str(v)


def add_json_flag(parser: Any) -> None:
    """``--json``: print the results as one JSON document instead of the table."""
    parser.add_argument("--json", action="store_true",
                        help="print the results as JSON (machine-readable) instead of a table")


# bench's ``--json [OUT]`` (see commands/bench.py): no OUT = JSON on stdout, table on stderr.
JSON_OUT_HELP = ("print the results as JSON on stdout (the table goes to stderr); --json OUT "
                 "writes the JSON to OUT and prints the table")


def report(rows: Iterable[tuple[str, Any]], data: Mapping[str, Any], as_json: bool) -> None:
    """The table ``rows`` for a person, or ``data`` as one JSON document with ``--json`` (numpy
    scalars and arrays converted)."""
    if as_json:
        print(json.dumps(data, indent=2, default=jsonable))
    else:
        print_table(rows)


def stderr_is_tty() -> bool:
    """Whether a progress bar on stderr would reach a terminal (not a pipe, file or torchrun's
    --tee, which would repeat every redraw as a new line)."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False
