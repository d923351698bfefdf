"""The documentation stays true to the code.

* every relative link in ``docs/*.md`` and ``README.md`` points to an existing file (and, for
  ``file.md#anchor``, to an existing heading), and ``docs/README.md`` lists every page;
* every ``mnmg-sampler <subcommand>`` (and ``mnmg-sampler bench <mode>``) written in code in the
  docs exists in the CLI (:func:`mnmg_sampler.commands.cli.build_parser`), and so does every
  ``--flag``
  written after it;
* every repository path written in the docs (``configs/cora.yaml``, ``mnmg_sampler/ops/cpu.py``,
  ``tests/unit/``) exists, and every dotted ``mnmg_sampler.module.name`` names a module and a
  name in it;
* no absolute path of a developer's machine (``/work/``, ``/home/``, ``/tmp/``, ...) is written in
  the docs, configs, examples or launch scripts;
* every config key written as ``section.key`` in the docs exists in the schema
  (:func:`mnmg_sampler.config.iter_fields`), and the key table of ``docs/configuration.md`` lists
  exactly the schema's keys;
* the worked example of ``docs/rng.md`` is recomputed from ``mnmg_sampler.ops.rng`` and the CPU
  kernel. After an intended change of the RNG, rewrite that block with::

      .venv/bin/python -m tests.unit.test_docs --write
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
RNG_DOC = DOCS / "rng.md"
BEGIN = "<!-- BEGIN GENERATED: rng example (tests/unit/test_docs.py) -->"
END = "<!-- END GENERATED: rng example -->"


def doc_files() -> list[Path]:
    return sorted(DOCS.glob("*.md")) + [REPO / "README.md"]


# --------------------------------------------------------------------------- markdown parsing

_FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.M | re.S)
_INLINE = re.compile(r"(`+)(.+?)\1", re.S)


def fenced_blocks(text: str) -> list[str]:
    return [m.group(0) for m in _FENCE.finditer(text)]


def strip_code(text: str) -> str:
    """Markdown text without fenced blocks and inline code spans (where links are not links)."""
    return _INLINE.sub(" ", _FENCE.sub("\n", text))


def code_texts(text: str) -> list[str]:
    """Every piece of code in a markdown file: fenced blocks, indented blocks, inline spans."""
    out = fenced_blocks(text)
    rest = _FENCE.sub("\n", text)
    out += [m.group(2) for m in _INLINE.finditer(rest)]
    out += [line for line in rest.splitlines() if line.startswith("    ") and line.strip()]
    return out


_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFDEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(\S+)", re.M)


def relative_links(text: str) -> list[str]:
    plain = strip_code(text)
    links = _LINK.findall(plain) + _REFDEF.findall(plain)
    return [t for t in links if not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", t)]


def github_anchors(text: str) -> set[str]:
    """Anchors GitHub gives the headings of ``text`` (duplicates get -1, -2, ...)."""
    seen: dict[str, int] = {}
    out = set()
    for line in _FENCE.sub("\n", text).splitlines():
        m = re.match(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).lower().replace("`", "")).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


# --------------------------------------------------------------------------- links


def test_every_relative_link_points_to_an_existing_file():
    broken = []
    for md in doc_files():
        text = md.read_text(encoding="utf-8")
        for target in relative_links(text):
            path, _, anchor = target.partition("#")
            dest = (md.parent / path).resolve() if path else md
            where = f"{md.relative_to(REPO)} -> {target}"
            if not dest.exists():
                broken.append(f"{where}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in github_anchors(
                    dest.read_text(encoding="utf-8")):
                broken.append(f"{where}: no heading with anchor #{anchor}")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_docs_index_lists_every_page():
    index = DOCS / "README.md"
    linked = {t.partition("#")[0] for t in relative_links(index.read_text(encoding="utf-8"))}
    missing = sorted(md.name for md in DOCS.glob("*.md") if md != index and md.name not in linked)
    assert not missing, f"docs/README.md does not link to: {missing}"


def test_link_parser_finds_links_and_skips_code():
    text = ("See [a](api.md#x), ![img](pic.png) and [web](https://x.org).\n"
            "`[not](code.md)`\n```\n[nor](this.md)\n```\n[ref]: other.md\n")
    assert relative_links(text) == ["api.md#x", "pic.png", "other.md"]
    assert github_anchors("# Service modes: `thread` and `inline`\n## A\n## A\n") == {
        "service-modes-thread-and-inline", "a", "a-1"}


# --------------------------------------------------------------------------- CLI


def _cli_choices() -> tuple[set[str], set[str]]:
    from mnmg_sampler.commands.cli import build_parser

    def subs(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                return dict(action.choices)
        return {}

    commands = subs(build_parser())
    modes = set(subs(commands["bench"])) if "bench" in commands else set()
    return set(commands), modes


_COMMAND = re.compile(
    r"(?:\bmnmg-sampler|-m\s+mnmg_sampler)\s+([a-z][a-z_-]*)(?:\s+([a-z][\w-]*))?")


def cli_mentions(text: str) -> list[tuple[str, str | None]]:
    """(subcommand, following word) of every ``mnmg-sampler WORD`` written in code."""
    return [(m.group(1), m.group(2)) for code in code_texts(text) for m in _COMMAND.finditer(code)]


def test_every_cli_subcommand_in_the_docs_exists():
    commands, modes = _cli_choices()
    bad = []
    for md in doc_files():
        for cmd, nxt in cli_mentions(md.read_text(encoding="utf-8")):
            if cmd not in commands:
                bad.append(f"{md.name}: mnmg-sampler {cmd} (commands: {sorted(commands)})")
            elif cmd == "bench" and nxt is not None and nxt not in modes:
                bad.append(f"{md.name}: mnmg-sampler bench {nxt} (modes: {sorted(modes)})")
    assert not bad, "\n".join(bad)


def test_cli_mentions_only_look_at_code():
    text = ("mnmg-sampler runs one process per GPU.\n\n    mnmg-sampler info cora\n\n"
            "`torchrun -m mnmg_sampler sample --partitions p`\n"
            "```\nmnmg-sampler bench single\n```\n")
    assert cli_mentions(text) == [("bench", "single"), ("sample", None), ("info", "cora")]


def _cli_parsers() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser],
                             dict[str, argparse.ArgumentParser]]:
    from mnmg_sampler.commands.cli import build_parser

    def subs(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                return dict(action.choices)
        return {}

    top = build_parser()
    commands = subs(top)
    return top, commands, subs(commands["bench"]) if "bench" in commands else {}


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings}


_COMMAND_LINE = re.compile(
    r"(?:\bmnmg-sampler|-m\s+mnmg_sampler)((?:\s+-[-\w]+)*)\s+([a-z][a-z_-]*)(:?)([^\n]*)")
_SHELL_END = re.compile(r"\s(?:#|\||;|&&|>|2>)|\\\|")
_FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")


def cli_command_lines(text: str) -> list[tuple[str, str, list[str]]]:
    """(subcommand, mode or "", flags) of every ``mnmg-sampler SUB ...`` command line in code;
    backslash continuations joined, the line cut at a shell comment, pipe or redirection. An
    error message (``mnmg-sampler SUB: error: ...``) gives no flags."""
    out = []
    for code in code_texts(text):
        code = re.sub(r"\\\n\s*", " ", code)
        for m in _COMMAND_LINE.finditer(code):
            cmd, colon, rest = m.group(2), m.group(3), m.group(4)
            if colon:
                out.append((cmd, "", []))
                continue
            rest = _SHELL_END.split(rest, maxsplit=1)[0]
            mode = ""
            if cmd == "bench":
                mm = re.match(r"\s+([a-z][\w-]*)", rest)
                mode = mm.group(1) if mm else ""
            out.append((cmd, mode, _FLAG.findall(m.group(1)) + _FLAG.findall(rest)))
    return out


def test_every_cli_flag_in_the_docs_exists():
    top, commands, modes = _cli_parsers()
    common = _options(top)
    bad, seen = [], 0
    for md in doc_files():
        for cmd, mode, flags in cli_command_lines(md.read_text(encoding="utf-8")):
            parser = commands.get(cmd)
            if parser is None:
                continue  # reported by test_every_cli_subcommand_in_the_docs_exists
            if cmd == "bench" and mode in modes:
                parser = modes[mode]
            allowed = _options(parser) | common
            for flag in flags:
                seen += 1
                if flag.split("=")[0] not in allowed:
                    bad.append(f"{md.name}: mnmg-sampler {cmd} {mode} {flag}".replace("  ", " "))
    assert seen > 30, "the flag finder found almost nothing: is it broken?"
    assert not bad, "options the CLI does not have:\n" + "\n".join(bad)


def test_cli_command_lines_finds_flags():
    text = ("```\nmnmg-sampler bench single --graph cora \\\n    --json out.json  # --not-this\n"
            "mnmg-sampler -v info cora --json | head -1 --nor-this\n```\n"
            "`mnmg-sampler sample: error: pass --partitions DIR`, "
            "`torchrun -m mnmg_sampler sample --partitions p`\n")
    assert cli_command_lines(text) == [
        ("bench", "single", ["--graph", "--json"]), ("info", "", ["-v", "--json"]),
        ("sample", "", []), ("sample", "", ["--partitions"])]


# --------------------------------------------------------------------------- paths

REPO_DIRS = ("mnmg_sampler", "tests", "docs", "configs", "launch", "benchmarks", "examples", ".ci")
_REPO_PATH = re.compile(rf"(?<![\w./~$-])((?:{'|'.join(map(re.escape, REPO_DIRS))})"
                        r"/[\w.*/-]*|README\.md|pyproject\.toml)")
_MODULE = re.compile(r"(?<![\w./])mnmg_sampler(?:\.[A-Za-z_]\w*)+")
MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:work|home|tmp|root|Users|scratch)/[\w.-]")
# Files that hold those paths on purpose (tests of path handling, not documentation).
MACHINE_PATH_SCAN = ("docs/*.md", "README.md", "benchmarks/*.md", "examples/*", "configs/*",
                     "launch/*", "mnmg_sampler/data/README.md")


def repo_paths(text: str) -> list[str]:
    """Repository paths written in code spans, code blocks and links of a markdown text."""
    found = [m.group(1) for code in code_texts(text) for m in _REPO_PATH.finditer(code)]
    return [p.rstrip(".") for p in found]


def _exists(rel: str) -> bool:
    if "*" in rel:
        return any(REPO.glob(rel))
    return (REPO / rel).exists()


def test_every_repository_path_in_the_docs_exists():
    bad, seen = [], 0
    for md in doc_files():
        for rel in repo_paths(md.read_text(encoding="utf-8")):
            seen += 1
            if not _exists(rel):
                bad.append(f"{md.relative_to(REPO)}: {rel}")
    assert seen > 50, "the path finder found almost nothing: is it broken?"
    assert not bad, "paths that do not exist in the repository:\n" + "\n".join(bad)


def _module_source(parts: list[str]) -> tuple[Path, int] | None:
    """(source file, number of parts it covers) of the longest module prefix of ``parts``."""
    best = None
    for n in range(1, len(parts) + 1):
        base = REPO.joinpath(*parts[:n])
        for src in (base.with_suffix(".py"), base / "__init__.py"):
            if src.is_file():
                best = (src, n)
    return best


def test_every_dotted_module_name_in_the_docs_exists():
    bad, seen = [], 0
    for md in doc_files():
        for code in code_texts(md.read_text(encoding="utf-8")):
            for m in _MODULE.finditer(code):
                parts = m.group(0).split(".")
                seen += 1
                found = _module_source(parts)
                if found is None:
                    bad.append(f"{md.name}: {m.group(0)} (no such module)")
                    continue
                src, n = found
                if n < len(parts) and not re.search(
                        rf"\b{re.escape(parts[n])}\b", src.read_text(encoding="utf-8")):
                    bad.append(f"{md.name}: {m.group(0)} ({parts[n]} is not in "
                               f"{src.relative_to(REPO)})")
    assert seen > 10, "the module finder found almost nothing: is it broken?"
    assert not bad, "dotted names that do not exist:\n" + "\n".join(bad)


def test_path_finders_match_only_candidates():
    text = ("See `configs/cora.yaml`, `launch/run.sh.`, `mnmg_sampler.ops.cpu.sample_neighbors`,"
            " `runs/quickstart`, `../x/configs/a`, `$ROOT/configs/b.yaml` and configs/prose.md\n"
            "```\npython -m mnmg_sampler.config.docs > docs/configuration.md\n```\n")
    assert repo_paths(text) == ["docs/configuration.md", "configs/cora.yaml", "launch/run.sh"]
    assert _module_source(["mnmg_sampler", "ops", "cpu", "sample_neighbors"])[1] == 3
    assert MACHINE_PATH.search("S=/work/shared/x.gz") and MACHINE_PATH.search("--json /tmp/a")
    assert not MACHINE_PATH.search("/usr/local/cuda and ~/tmp/x and runs/tmp/y")


def test_no_absolute_machine_paths():
    bad = []
    for pattern in MACHINE_PATH_SCAN:
        for f in sorted(REPO.glob(pattern)):
            if not f.is_file():
                continue
            for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
                if MACHINE_PATH.search(line):
                    bad.append(f"{f.relative_to(REPO)}:{n}: {line.strip()}")
    assert not bad, "absolute paths of a machine (use relative or placeholder paths):\n" + \
        "\n".join(bad)


# --------------------------------------------------------------------------- config keys

# Python attributes written like config keys (``section.attr``), documented on purpose.
NOT_CONFIG_KEYS = {
    "model.backend",  # api.md: GraphSAGE's attribute saying "pyg" or "builtin"
}
FILE_SUFFIXES = {"py", "md", "yaml", "yml", "json", "jsonl", "npy", "npz", "txt", "sh", "pt"}


def _sections() -> list[str]:
    from mnmg_sampler.config import section_docs

    return sorted(section_docs())


def config_key_mentions(text: str, sections: list[str]) -> list[str]:
    """Dotted config keys written in code: a whole inline span ``section.key`` (optionally with
    ``=value`` or ``: value``), or a ``section.key=value`` override anywhere in code."""
    sec = "|".join(map(re.escape, sections))
    whole = re.compile(rf"^\s*((?:{sec})\.[a-z_][a-z0-9_]*)\s*(?:[=:].*)?$", re.S)
    override = re.compile(rf"(?<![\w./-])((?:{sec})\.[a-z_][a-z0-9_]*)=")
    found = []
    for code in code_texts(text):
        m = whole.match(code)
        if m and "\n" not in code.strip():
            found.append(m.group(1))
        found += override.findall(code)
    return [k for k in found if k.rsplit(".", 1)[1] not in FILE_SUFFIXES
            and k not in NOT_CONFIG_KEYS]


def test_every_config_key_in_the_docs_exists():
    from mnmg_sampler.config import iter_fields
    from mnmg_sampler.config.schema import REMOVED_KEYS

    keys = {f.key for f in iter_fields()} | set(REMOVED_KEYS)  # removed ones: history, errors
    sections = _sections()
    bad, seen = [], 0
    for md in doc_files():
        text = md.read_text(encoding="utf-8")
        for k in config_key_mentions(text, sections):
            seen += 1
            # A deliberate typo is allowed where the doc also shows its error message.
            if k not in keys and f"{k}: unknown key" not in text:
                bad.append(f"{md.name}: {k}")
    assert seen > 20, "the key finder found almost nothing: is it broken?"
    assert not bad, "unknown config keys in docs:\n" + "\n".join(bad)


def test_configuration_md_table_lists_exactly_the_schema():
    from mnmg_sampler.config import iter_fields

    text = (DOCS / "configuration.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `([a-z_]+(?:\.[a-z_0-9]+)?)` \|", text, re.M)
    assert len(rows) == len(set(rows))
    assert set(rows) == {f.key for f in iter_fields()}


def test_config_key_finder_only_matches_candidates():
    sections = _sections()
    text = ("Set `sampler.batch_size` or `runtime.collective_timeout_s: 60`; see `sampler.py`,\n"
            "`model.backend`, `model.module(x)`, `self.sampler.seed` and sampler.fanouts prose.\n"
            "    bash launch/run.sh training.epochs=5 dataset.name=cora\n")
    assert sorted(config_key_mentions(text, sections)) == [
        "dataset.name", "runtime.collective_timeout_s", "sampler.batch_size", "training.epochs"]
    assert "model" in sections and "sampler" in sections


# --------------------------------------------------------------------------- rng.md example

EXAMPLE = dict(seed=0, epoch=0, batch=0, hop=0, node=7, degree=10, fanout=4)


def render_rng_example() -> str:
    """The worked example of docs/rng.md, computed with the plain-numpy RNG (the reference)."""
    from mnmg_sampler.ops import rng

    e = EXAMPLE
    u = np.uint64
    key = rng.request_key(e["seed"], e["epoch"], e["batch"])
    deg, k = e["degree"], e["fanout"]
    with np.errstate(over="ignore"):
        base = rng.stream_base(u(e["seed"]), u(key), u(e["hop"]), u(e["node"]))
        rows, taken = [], []
        for i in range(k):
            j = deg - k + i
            r = rng.draw(base, u(i))
            t = int(rng.bounded(r, u(j + 1)))
            dup = t in taken
            taken.append(j if dup else t)
            rows.append(f"{i:<6}  {j:<11}  0x{int(r):016x}  {t:<22}  "
                        f"{'yes: take j' if dup else 'no':<11}  {taken[-1]}")
        repl = [int(rng.bounded(rng.draw(base, u(i)), u(deg))) for i in range(k)]
    lines = [
        f"seed {e['seed']}, epoch {e['epoch']}, global batch {e['batch']}:",
        f"  key  = request_key({e['seed']}, {e['epoch']}, {e['batch']}) = {key}",
        f"hop {e['hop']} (the first hop), node {e['node']} (original id), degree {deg}, "
        f"fanout {k}:",
        f"  base = stream_base({e['seed']}, key, {e['hop']}, {e['node']}) = 0x{int(base):016x}",
        "",
        "without replacement (Floyd):",
        "slot i  j = deg-k+i  draw(base, i)       t = bounded(draw, j+1)  t taken?     position",
        *rows,
        f"  -> positions {taken} (the set {{{', '.join(map(str, sorted(taken)))}}})",
        "",
        "with replacement: position i = bounded(draw(base, i), deg)",
        f"  -> positions {repl}",
    ]
    return "\n".join(lines)


def kernel_positions(replace: bool) -> list[int]:
    """The positions the compiled CPU kernel draws for the example node (neighbors 100 + p)."""
    from mnmg_sampler.ops import cpu
    from mnmg_sampler.ops.rng import request_key

    e = EXAMPLE
    n = e["node"]
    indptr = np.zeros(n + 2, np.int64)
    indptr[n + 1:] = e["degree"]  # only node n has neighbors: 100, 101, ..., 100 + degree - 1
    indices = np.arange(100, 100 + e["degree"], dtype=np.int64)
    key = request_key(e["seed"], e["epoch"], e["batch"])
    _, nbr, _ = cpu.sample_neighbors(indptr, indices, None, np.array([n]), np.array([n]),
                                     np.array([key]), e["seed"], e["hop"], e["fanout"], replace)
    return [int(v) - 100 for v in nbr]


def _doc_block(text: str) -> str:
    start, stop = text.index(BEGIN) + len(BEGIN), text.index(END)
    block = text[start:stop].strip()
    return block.removeprefix("```text").removesuffix("```").strip("\n")


def test_rng_doc_example_equals_the_code():
    assert _doc_block(RNG_DOC.read_text(encoding="utf-8")) == render_rng_example(), (
        "docs/rng.md's worked example is stale: python -m tests.unit.test_docs --write")


def test_rng_doc_example_is_what_the_kernel_draws():
    text = render_rng_example()
    floyd = re.search(r"-> positions (\[[^\]]*\]) \(the set", text).group(1)
    repl = text.rsplit("-> positions ", 1)[1].strip()
    assert str(kernel_positions(False)) == floyd
    assert str(kernel_positions(True)) == repl
    # The example shows a collision (the point of Floyd's rule) and a repeat with replacement.
    assert "yes: take j" in text
    assert len(set(kernel_positions(True))) < EXAMPLE["fanout"]


def _write() -> None:
    text = RNG_DOC.read_text(encoding="utf-8")
    start, stop = text.index(BEGIN) + len(BEGIN), text.index(END)
    block = "\n```text\n" + render_rng_example() + "\n```\n"
    RNG_DOC.write_text(text[:start] + block + text[stop:], encoding="utf-8")


if __name__ == "__main__":  # regenerate the rng.md block: python -m tests.unit.test_docs --write
    if "--write" in sys.argv:
        _write()
    else:
        print(render_rng_example())
