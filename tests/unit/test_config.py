"""The YAML job schema: precedence, overrides, one clear error per mistake, `validate`, docs."""

from __future__ import annotations

import subprocess
import sys
import typing
from pathlib import Path

import pytest
import yaml

from mnmg_sampler.commands import cli
from mnmg_sampler.config import (
    BUILTIN_DATASETS,
    JobConfig,
    PartitionConfig,
    check_paths,
    config_from_dict,
    config_to_dict,
    config_to_yaml,
    iter_fields,
    load_config,
    parse_dataset_name,
)
from mnmg_sampler.config.docs import render_markdown
from mnmg_sampler.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
CONFIGS = sorted((REPO / "configs").glob("*.yaml"))


def write(tmp_path: Path, text: str, name: str = "job.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    out, err = capsys.readouterr()
    return exc.value.code or 0, out, err


# --------------------------------------------------------------------------- loading


def test_defaults_resolve_the_nulls_that_depend_on_other_fields():
    cfg = load_config(None)
    assert cfg == config_from_dict({})
    assert cfg.output.dir == "runs/job"
    assert Path(cfg.partition.dir) == Path("runs/job/partitions")
    assert cfg.sampler.eval_batch_size == cfg.sampler.batch_size
    assert cfg.model.layers == len(cfg.sampler.fanouts)
    assert cfg.partition.parts is None and cfg.dataset.undirected is None  # need run-time facts


def test_precedence_cli_over_file_over_defaults(tmp_path):
    p = write(tmp_path, "name: a\nsampler:\n  batch_size: 64\n  seed: 3\n")
    cfg = load_config(p, ["sampler.batch_size=32", "sampler.batch_size=16"])
    assert cfg.sampler.batch_size == 16  # the last override wins
    assert cfg.sampler.seed == 3  # from the file
    assert cfg.sampler.prefetch == JobConfig().sampler.prefetch  # default
    assert cfg.output.dir == "runs/a"


@pytest.mark.parametrize("text, expected", [
    ("sampler.fanouts=[15, 10, 5]", [15, 10, 5]),
    ("sampler.fanouts=15,10,5", [15, 10, 5]),
    ("sampler.fanouts=-1", [-1]),
    ("dataset.split=0.8,0.1,0.1", [0.8, 0.1, 0.1]),
])
def test_list_overrides_take_yaml_or_comma_lists(text, expected):
    key = text.split("=")[0]
    cfg = load_config(None, [text, "model.layers=null"])
    section, name = key.split(".")
    assert getattr(getattr(cfg, section), name) == expected


def test_scalar_overrides_are_typed_by_the_schema():
    cfg = load_config(None, ["optimizer.lr=1e-3", "name=2024", "sampler.replace=true",
                             "runtime.threads_per_rank=3", "output.dir=null",
                             "model.dropout=0"])
    assert cfg.optimizer.lr == 0.001 and isinstance(cfg.optimizer.lr, float)
    assert cfg.name == "2024"  # string keys keep the text as typed
    assert cfg.sampler.replace is True and cfg.runtime.threads_per_rank == 3
    assert cfg.output.dir == "runs/2024"
    assert cfg.model.dropout == 0.0 and isinstance(cfg.model.dropout, float)


def test_yaml_quirks_are_accepted(tmp_path):
    # YAML 1.1 reads `1e-3` as a string and an empty section as null.
    p = write(tmp_path, "optimizer:\n  lr: 1e-3\nmodel:\nsampler: {batch_size: 8.0}\n")
    cfg = load_config(p)
    assert cfg.optimizer.lr == 0.001 and cfg.sampler.batch_size == 8
    assert load_config(write(tmp_path, "", "empty.yaml")) == load_config(None)


def test_path_fields_expand_home_and_variables(monkeypatch):
    monkeypatch.setenv("MNMG_TEST_ROOT", "/scratch/x")
    cfg = load_config(None, ["output.dir=$MNMG_TEST_ROOT/run", "partition.dir=~/parts"])
    assert cfg.output.dir == "/scratch/x/run"
    assert cfg.partition.dir == str(Path.home() / "parts")


def test_resolved_yaml_reloads_to_the_same_config(tmp_path):
    cfg = load_config(None, ["sampler.fanouts=5,5,5", "dataset.name=rmat:12"])
    text = config_to_yaml(cfg)
    assert "fanouts: [5, 5, 5]" in text
    assert config_from_dict(yaml.safe_load(text)) == cfg
    assert yaml.safe_load(text) == config_to_dict(cfg)


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize("text, start, contains", [
    # unknown keys, with "did you mean"
    ("sampler:\n  batchsize: 3\n", "sampler.batchsize: unknown key",
     "did you mean sampler.batch_size?"),
    ("batch_size: 3\n", "batch_size: unknown key", "did you mean sampler.batch_size?"),
    ("sampeler:\n  seed: 1\n", "sampeler: unknown key", "did you mean sampler?"),
    ("runtime:\n  nccl_timeout: 5\n", "runtime.nccl_timeout: unknown key", "valid keys of runtime"),
    # wrong types
    ("sampler:\n  batch_size: abc\n", "sampler.batch_size: expected an integer, got 'abc'", ""),
    ("sampler:\n  batch_size: 2.5\n", "sampler.batch_size: expected an integer, got 2.5", ""),
    ("sampler:\n  replace: 1\n", "sampler.replace: expected true or false, got 1", ""),
    ("sampler:\n  batch_size: true\n", "sampler.batch_size: expected an integer", ""),
    ("name: 12\n", "name: expected a string, got 12", "quote it"),
    ("sampler:\n  fanouts: [10, x]\n", "sampler.fanouts: expected a list of integers", ""),
    ("dataset:\n  undirected: maybe\n", "dataset.undirected: expected true or false or null",
     ""),
    ("sampler:\n  fanouts: null\n", "sampler.fanouts: expected a list of integers, got null", ""),
    ("sampler: 5\n", "sampler: expected a mapping", ""),
    ("sampler:\n  batch_size:\n", "sampler.batch_size: expected an integer, got null", ""),
    ("runtime:\n  backend: null\n", "runtime.backend: expected one of auto, nccl, gloo, got "
     "null", ""),
    # choices, with "did you mean"
    ("runtime:\n  backend: NCCL\n", "runtime.backend: expected one of auto, nccl, gloo",
     "did you mean 'nccl'?"),
    ("partition:\n  method: metsi\n", "partition.method: expected one of", "'metis'"),
    # ranges
    ("sampler:\n  batch_size: -3\n", "sampler.batch_size: expected a positive integer, got -3",
     "e.g. sampler.batch_size=512"),
    ("sampler:\n  fanouts: [10, -2]\n", "sampler.fanouts: expected a non-empty list", "-1"),
    ("sampler:\n  fanouts: []\n", "sampler.fanouts: expected a non-empty list", ""),
    ("model:\n  dropout: 1.0\n", "model.dropout: expected a number in [0, 1), got 1.0", ""),
    ("optimizer:\n  lr: 0\n", "optimizer.lr: expected a positive number, got 0.0", ""),
    ("optimizer:\n  lr: .nan\n", "optimizer.lr: expected a positive number", ""),
    ("dataset:\n  split: [0.7, 0.3, 0.1]\n", "dataset.split: expected three fractions", ""),
    ("runtime:\n  collective_timeout_s: -1\n", "runtime.collective_timeout_s: expected a "
     "positive number", ""),
    ("dataset:\n  name: rmat:99\n", "dataset.name: bad R-MAT spec 'rmat:99'", "rmat:SCALE"),
    ("dataset:\n  name: rmat:a:b\n", "dataset.name: bad R-MAT spec", ""),
    # cross-field rules
    ("sampler:\n  fanouts: [10, 10]\nmodel:\n  layers: 3\n",
     "model.layers: 3 layers but sampler.fanouts has 2 hops", "model.layers=2"),
    ("runtime:\n  backend: nccl\n  device: cpu\n", "runtime.backend: nccl needs GPUs", "gloo"),
    ("features:\n  placement: pinned\nruntime:\n  device: cpu\n",
     "features.placement: 'pinned' needs CUDA", "host"),
    ("training:\n  target_value: 85\n", "training.target_value: expected an accuracy in (0, 1]",
     ""),
    ("task: link\nsampler:\n  split: owner\n", "sampler.split: owner with task link",
     "sampler.split=global"),
])
def test_each_mistake_is_one_message_starting_with_the_dotted_key(tmp_path, text, start,
                                                                   contains):
    with pytest.raises(ConfigError) as exc:
        load_config(write(tmp_path, text))
    msg = str(exc.value)
    assert msg.startswith(start), msg
    assert contains in msg
    assert "\n" not in msg


def test_partition_parts_must_match_the_world_size():
    cfg = load_config(None, ["partition.parts=4"], world_size=4)
    assert cfg.partition.parts == 4
    with pytest.raises(ConfigError, match=r"^partition\.parts: 4 partitions but the world size "
                       r"is 2"):
        load_config(None, ["partition.parts=4"], world_size=2)
    load_config(None, [], world_size=3)  # parts null = any world size


def test_owner_split_is_for_node_jobs_only():
    assert load_config(None, ["sampler.split=owner"]).sampler.split == "owner"
    assert load_config(None, ["task=link"]).sampler.split == "global"
    with pytest.raises(ConfigError, match=r"^sampler\.split: owner with task link"):
        load_config(str(REPO / "configs" / "cora_link.yaml"), ["sampler.split=owner"])


@pytest.mark.parametrize("override, start", [
    ("sampler.batch_size", "override 'sampler.batch_size' is not KEY=VALUE"),
    ("sampler.batch_sise=5", "sampler.batch_sise: unknown key (did you mean sampler.batch_size?)"),
    ("sampler.batch_size.x=5", "sampler.batch_size.x: sampler.batch_size is a value"),
    ("sampler.fanouts=[10,", "sampler.fanouts: cannot parse the override value"),
    ("sampler=5", "sampler: expected a mapping"),
])
def test_bad_overrides(override, start):
    with pytest.raises(ConfigError) as exc:
        load_config(None, [override])
    assert str(exc.value).startswith(start), str(exc.value)


def test_a_removed_key_says_it_was_removed_and_what_to_do(tmp_path):
    from mnmg_sampler.config.schema import REMOVED_KEYS

    assert REMOVED_KEYS
    for key, (_, fix) in REMOVED_KEYS.items():
        section, leaf = key.split(".")
        for path, overrides in ((write(tmp_path, f"{section}:\n  {leaf}: 0\n"), []),
                                (None, [f"{key}=0"])):  # an old config file, an old override
            with pytest.raises(ConfigError) as exc:
                load_config(path, overrides)
            msg = str(exc.value)
            assert msg.startswith(f"{key}: removed: "), msg
            assert "unknown key" not in msg and fix in msg, msg


def test_a_section_override_merges_into_the_file(tmp_path):
    p = write(tmp_path, "sampler:\n  seed: 7\n")
    cfg = load_config(p, ["sampler={batch_size: 3}"])
    assert (cfg.sampler.seed, cfg.sampler.batch_size) == (7, 3)


@pytest.mark.parametrize("text, start", [
    ("sampler:\n  seed: 1\n  seed: 2\n", "invalid YAML at line 3, column 3: duplicate key 'seed'"),
    ("sampler:\n  seed: [1\n", "invalid YAML at line"),
    ("- a\n- b\n", "the top level must be a mapping of sections, got list"),
])
def test_file_level_errors_name_the_file(tmp_path, text, start):
    p = write(tmp_path, text)
    with pytest.raises(ConfigError) as exc:
        load_config(p)
    assert str(exc.value).startswith(f"{p}: {start}"), str(exc.value)


def test_missing_config_file_names_the_path(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match="nope.yaml: config file not found"):
        load_config(missing)
    with pytest.raises(ConfigError, match="not a file"):
        load_config(tmp_path)


# --------------------------------------------------------------------------- datasets


def test_dataset_names():
    assert parse_dataset_name("Cora").kind == "builtin"
    spec = parse_dataset_name("rmat:12")
    assert (spec.kind, spec.scale, spec.edge_factor) == ("rmat", 12, 16)
    assert parse_dataset_name("rmat:20:8").edge_factor == 8
    assert parse_dataset_name("../data/g.txt.gz").kind == "path"


def test_builtin_names_and_methods_match_the_loaders():
    from mnmg_sampler.graph.datasets import BUILTINS
    from mnmg_sampler.graph.partition import METHODS

    assert set(BUILTIN_DATASETS) == set(BUILTINS)
    method_type = typing.get_type_hints(PartitionConfig)["method"]
    assert set(typing.get_args(method_type)) == set(METHODS)


def test_check_paths(tmp_path, monkeypatch):
    check_paths(load_config(None, ["dataset.name=cora"]))
    check_paths(load_config(None, ["dataset.name=rmat:10"]))
    good = tmp_path / "edges.txt.gz"
    good.write_bytes(b"")
    check_paths(load_config(None, [f"dataset.name={good}"]))
    bad = tmp_path / "edges.xyz"
    bad.write_bytes(b"")
    (tmp_path / "notogb").mkdir()
    cases = [
        (str(bad), "dataset.name: the file type of 'edges.xyz' is not recognised"),
        (str(tmp_path / "notogb"), "dataset.name: the directory 'notogb' is not recognised"),
        (str(tmp_path / "missing.npz"), "dataset.name: dataset file "),
        ("corra", "dataset.name: unknown dataset 'corra' (did you mean 'cora'?)"),
    ]
    for name, start in cases:
        with pytest.raises(ConfigError) as exc:
            check_paths(load_config(None, [f"dataset.name={name}"]))
        assert str(exc.value).startswith(start), str(exc.value)
    with pytest.raises(ConfigError, match="supported formats|OGB") as exc:
        check_paths(load_config(None, [f"dataset.name={bad}"]))
    assert "parquet" in str(exc.value) and "OGB" in str(exc.value)
    with pytest.raises(ConfigError, match=r"^dataset\.labels: file .*nolabels\.npy.* not found"):
        check_paths(load_config(None, [f"dataset.labels={tmp_path / 'nolabels.npy'}"]))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="relative to the working directory"):
        check_paths(load_config(None, ["dataset.name=sub/missing.txt"]))


# --------------------------------------------------------------------------- schema docs


def test_every_field_has_a_one_line_doc_and_a_valid_default():
    fields = list(iter_fields())
    assert len(fields) > 40
    for fi in fields:
        assert fi.doc and "\n" not in fi.doc and fi.doc.endswith("."), fi.key
    keys = [fi.key for fi in fields]
    assert len(keys) == len(set(keys))
    assert {"sampler.batch_size", "runtime.expandable_segments", "output.metrics_file"} <= set(keys)


def test_committed_configuration_reference_is_current():
    committed = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert committed == render_markdown(), (
        "docs/configuration.md is stale: run "
        ".venv/bin/python -m mnmg_sampler.config.docs > docs/configuration.md")
    for fi in iter_fields():
        assert f"`{fi.key}`" in committed


# --------------------------------------------------------------------------- validate command


def _stand_in_dataset(cfg_path: Path, tmp_path: Path) -> list[str]:
    """An override pointing a missing path dataset at an empty file of the same type."""
    spec = parse_dataset_name(load_config(cfg_path).dataset.name)
    if spec.kind != "path" or Path(spec.path).is_file():
        return []
    stand_in = tmp_path / Path(spec.path).name
    stand_in.write_bytes(b"")
    return [f"dataset.name={stand_in}"]


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_validate_every_shipped_config(path, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(REPO)  # configs use paths relative to the repository root
    cfg = load_config(path)
    world = cfg.partition.parts or 2
    argv = ["validate", str(path), *_stand_in_dataset(path, tmp_path), "--world-size", str(world)]
    code, out, err = run_cli(argv, capsys)
    assert (code, err) == (0, ""), err
    assert out.splitlines()[-1] == "ok"
    resolved = yaml.safe_load(out.rsplit("ok", 1)[0])
    assert resolved["name"] == cfg.name
    assert config_from_dict(resolved).sampler == cfg.sampler


def test_quickstart_is_a_two_rank_cpu_job(monkeypatch):
    monkeypatch.chdir(REPO)
    cfg = load_config(REPO / "configs" / "quickstart.yaml", world_size=2)
    assert (cfg.dataset.name, cfg.runtime.backend, cfg.runtime.device) == ("cora", "gloo", "cpu")
    assert cfg.output.dir == "runs/quickstart" and cfg.training.mode == "train"


def test_validate_prints_the_overrides_applied(capsys):
    code, out, _ = run_cli(["validate", str(REPO / "configs" / "quickstart.yaml"),
                            "sampler.batch_size=7", "-q"], capsys)
    assert (code, out) == (0, "ok\n")
    code, out, _ = run_cli(["validate", str(REPO / "configs" / "quickstart.yaml"),
                            "sampler.batch_size=7"], capsys)
    assert yaml.safe_load(out.rsplit("ok", 1)[0])["sampler"]["batch_size"] == 7


@pytest.mark.parametrize("argv, start", [
    (["sampler.batch_size=-3"], "sampler.batch_size: expected a positive integer, got -3"),
    (["sampler.batchsize=3"], "sampler.batchsize: unknown key (did you mean sampler.batch_size?)"),
    (["runtime.device=gpu"], "runtime.device: expected one of auto, cpu, cuda, got 'gpu'"),
    (["partition.parts=3", "--world-size", "2"], "partition.parts: 3 partitions"),
    (["dataset.name=/nonexistent/g.npz"], "dataset.name: dataset file '/nonexistent/g.npz'"),
])
def test_validate_errors_are_one_line_and_exit_2(argv, start, capsys):
    code, out, err = run_cli(["validate", str(REPO / "configs" / "quickstart.yaml"), *argv],
                             capsys)
    assert code == 2 and out == ""
    assert err.startswith(f"mnmg-sampler validate: error: {start}"), err
    assert err.count("\n") == 1


def test_validate_missing_file(tmp_path, capsys):
    code, _, err = run_cli(["validate", str(tmp_path / "nope.yaml")], capsys)
    assert code == 2
    assert err.startswith(f"mnmg-sampler validate: error: {tmp_path / 'nope.yaml'}: config file "
                          "not found")


def test_validate_in_a_fresh_process_has_no_traceback(tmp_path):
    bad = write(tmp_path, "sampler:\n  batch_size: -3\n")
    proc = subprocess.run([sys.executable, "-m", "mnmg_sampler", "validate", str(bad)],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "mnmg-sampler validate: error: sampler.batch_size: expected a positive integer, got -3. "
        "Fix: e.g. sampler.batch_size=512."]


def test_validate_help_lists_every_key_with_its_doc(capsys):
    code, out, _ = run_cli(["validate", "--help"], capsys)
    assert code == 0
    for fi in iter_fields():
        assert f"  {fi.key} = " in out
    assert "Seed nodes per training minibatch on each rank." in out


def test_loading_a_config_does_not_import_torch():
    code = ("import sys; from mnmg_sampler.config import load_config; load_config(None); "
            "print('torch' in sys.modules, 'numba' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=REPO, check=True).stdout
    assert out.split() == ["False", "False"]
