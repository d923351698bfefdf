"""Config keys of typed jobs: fanouts per relation (file and dotted overrides), the generated
typed dataset's spec, and the checks against a typed graph's types and relations that
``validate`` and every rank run before the service starts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from mnmg_sampler.commands import cli
from mnmg_sampler.config import load_config, parse_dataset_name
from mnmg_sampler.errors import ConfigError
from mnmg_sampler.train.checks import check_homogeneous_job, check_typed_job, meta_of_graph
from mnmg_sampler.train.setup import dataset_is_typed, num_neighbors, typed_meta

REPO = Path(__file__).resolve().parents[2]
HETERO = REPO / "configs" / "hetero.yaml"
RELS = ["author__writes__paper", "paper__rev_writes__author", "paper__has_topic__field",
        "field__rev_has_topic__paper", "paper__cites__paper"]


def _cfg(*overrides: str):
    return load_config(HETERO, list(overrides))


def _check(*overrides: str) -> str:
    cfg = _cfg(*overrides)
    return check_typed_job(cfg, typed_meta(cfg))


def test_shipped_config_names_every_relation_of_its_graph():
    cfg = _cfg()
    meta = typed_meta(cfg)
    assert sorted(cfg.sampler.fanouts) == sorted(RELS)
    assert sorted("__".join(et) for et in meta.edge_types) == sorted(RELS)
    assert check_typed_job(cfg, meta) == "paper"
    assert cfg.model.layers == 2
    nn = num_neighbors(cfg.sampler.fanouts)
    assert nn[("author", "writes", "paper")] == cfg.sampler.fanouts["author__writes__paper"]


def test_dotted_override_of_one_relation():
    cfg = _cfg("sampler.fanouts.author__writes__paper=7,1")
    assert cfg.sampler.fanouts["author__writes__paper"] == [7, 1]
    assert cfg.sampler.fanouts["paper__cites__paper"] == [5, 5]  # the others from the file
    cfg = _cfg("sampler.fanouts=[3, 2]")  # one list: every relation
    assert cfg.sampler.fanouts == [3, 2] and check_typed_job(cfg, typed_meta(cfg)) == "paper"


@pytest.mark.parametrize("override, key, text", [
    ("sampler.fanouts.author__writes__paper=1,2,3", "sampler.fanouts:", "[2, 3] hops"),
    ("sampler.fanouts.author__wrote__paper=1,2", "sampler.fanouts.author__wrote__paper",
     "did you mean author__writes__paper?"),
    ("sampler.fanouts.writes=1,2", "sampler.fanouts.writes", "not a relation name"),
    ("sampler.fanouts.author__writes__paper=[-2, 1]", "sampler.fanouts.author__writes__paper",
     "integers >= 0"),
    ("sampler.eval_fanouts={paper__cites__paper: [1, 1]}", "sampler.eval_fanouts:",
     "no fanouts for relations"),
    ("sampler.input_type=papers", "sampler.input_type", "did you mean 'paper'?"),
    ("sampler.input_type=author", "sampler.input_type", "has no labels"),
    ("model.layers=3", "model.layers", "3 layers but sampler.fanouts has 2 hops"),
    ("training.eval_mode=layerwise", "training.eval_mode", "homogeneous only"),
    ("dataset.feature_dim=8", "dataset.feature_dim", "applies to homogeneous graphs only"),
    ("task=link", "link.edge_type", "not set, and the graph has 3 relations besides reverse"),
    ("dataset.name=typed-sbm:3", "dataset.name", "bad typed-sbm spec"),
    ("dataset.name=typed-sbm:100:1", "dataset.name", "2 <= CLASSES <= 64"),
])
def test_bad_typed_keys_name_the_key(override, key, text):
    with pytest.raises(ConfigError) as e:
        _check(override)
    assert e.value.what.startswith(key), e.value.what
    assert text in str(e.value), str(e.value)


def test_a_mapping_names_every_relation():
    # a mapping override merges into the file's mapping; over a list it replaces it
    with pytest.raises(ConfigError, match="^sampler.fanouts: no fanouts for relations "
                       "paper__rev_writes__author, "):
        _check("sampler.fanouts=[1, 1]", "sampler.fanouts={author__writes__paper: [1, 1]}")


def test_list_fanouts_cannot_take_one_relation():
    with pytest.raises(ConfigError, match="sampler.fanouts is a list"):
        load_config(REPO / "configs" / "quickstart.yaml",
                    ["sampler.fanouts.author__writes__paper=1,1"])


def test_featureless_types_without_embeddings_are_refused():
    with pytest.raises(ConfigError, match="model.embeddings: none, but node types author, field"):
        _check("model.embeddings=none")
    assert _check("model.embeddings=all") == "paper"


def test_typed_keys_on_a_homogeneous_graph():
    cfg = load_config(REPO / "configs" / "quickstart.yaml", ["sampler.input_type=paper"])
    assert typed_meta(cfg) is None
    with pytest.raises(ConfigError, match="^sampler.input_type: cora is a homogeneous graph"):
        check_homogeneous_job(cfg)
    cfg = load_config(None, ["sampler.fanouts={a__b__c: [2, 2]}"])
    with pytest.raises(ConfigError, match="^sampler.fanouts: .* per relation apply to typed"):
        check_homogeneous_job(cfg)
    check_homogeneous_job(load_config(REPO / "configs" / "quickstart.yaml"))


def test_typed_dataset_names():
    spec = parse_dataset_name("typed-sbm:500")
    assert (spec.kind, spec.papers, spec.classes, spec.name) == ("typed-sbm", 500, 4,
                                                                 "typed-sbm:500:4")
    assert not dataset_is_typed(load_config(None))  # cora


def test_saved_hetero_data_is_a_typed_dataset(tmp_path):
    from mnmg_sampler.graph.typed_generate import typed_sbm_graph

    g = typed_sbm_graph(60, 2, seed=0)
    spec = {"num_nodes": g.num_nodes_dict(),
            "edge_index": {"__".join(et): torch.as_tensor(np.stack(_edges(g, et)))
                           for et in g.edge_types},
            "x": {"paper": torch.as_tensor(g.x["paper"])},
            "y": {"paper": torch.as_tensor(g.y["paper"])}}
    path = tmp_path / "g.pt"
    torch.save(spec, path)
    cfg = _cfg(f"dataset.name={path}")
    assert dataset_is_typed(cfg)
    assert meta_of_graph(g).num_nodes == typed_meta(cfg).num_nodes
    assert check_typed_job(cfg, typed_meta(cfg)) == "paper"


def _edges(g, et):
    """(src, dst) per-type ids of relation ``et`` of ``g``, read back from its segments."""
    r = g.relation_index(et)
    t = g.type_index(et[2])
    per = int(g.rel_offset[t + 1] - g.rel_offset[t])
    n = g.num_nodes_of(et[2])
    segs = g.seg_base[t] + np.arange(n) * per + (r - g.rel_offset[t])
    deg = g.indptr[segs + 1] - g.indptr[segs]
    src = np.concatenate([g.indices[g.indptr[s]:g.indptr[s + 1]] for s in segs])
    return src - g.node_type_offset[g.type_index(et[0])], np.repeat(np.arange(n), deg)


def test_validate_cli(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["validate", "-q", str(HETERO), "sampler.input_type=field"])
    assert e.value.code == 2
    assert "sampler.input_type: node type 'field' has no labels" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        cli.main(["validate", "-q", str(HETERO), "sampler.fanouts.paper__cites__paper=4,4"])
    assert (e.value.code or 0) == 0
    assert capsys.readouterr().out.strip() == "ok"


def test_split_from_the_input_types_masks(tmp_path):
    # the graph's masks of the input type, gathered from every part in per-type ids; without a
    # train mask, a random split of the type's nodes
    from mnmg_sampler.graph.partition import partition
    from mnmg_sampler.graph.typed import typed_graph
    from mnmg_sampler.train.setup import typed_node_split

    rng = np.random.default_rng(0)
    writes = np.stack([rng.integers(0, 7, 40), rng.integers(0, 30, 40)])
    train = np.zeros(30, bool)
    train[[1, 4, 9, 22]] = True
    spec = {"num_nodes": {"paper": 30, "author": 7},
            "edge_index": {("author", "writes", "paper"): writes,
                           ("paper", "rev_writes", "author"): writes[::-1]},
            "y": {"paper": np.arange(30) % 3},
            "masks": {"paper": {"train": train, "test": np.array([0, 29])}}}
    partition(typed_graph(spec), 2, "random", tmp_path / "p", seed=3)
    cfg = _cfg()
    got = typed_node_split(tmp_path / "p", "paper", cfg)
    assert got["train"].tolist() == [1, 4, 9, 22]
    assert got["test"].tolist() == [0, 29] and got["val"].tolist() == []
    rand = typed_node_split(tmp_path / "p", "author", cfg)  # no masks of author
    ids = np.concatenate([rand[k].ids(np.arange(len(rand[k]))) for k in ("train", "val", "test")])
    assert sorted(ids.tolist()) == list(range(7))


def test_ogb_hetero_directory_is_a_typed_dataset(tmp_path, capsys):
    from tests.unit.test_typed_graph import _ogb_dir

    root = _ogb_dir(tmp_path / "mag")
    cfg = _cfg(f"dataset.name={root}", "sampler.fanouts=[2, 2]")
    meta = typed_meta(cfg)
    assert meta.num_nodes == {"author": 5, "paper": 8}
    assert meta.x_dims["author"] == 3 and meta.labelled == ["paper"]
    assert check_typed_job(cfg, meta) == "paper"
    with pytest.raises(SystemExit) as e:  # check_paths takes the directory, then the checks
        cli.main(["validate", "-q", str(HETERO), f"dataset.name={root}",
                  "sampler.fanouts=[2, 2]", "sampler.input_type=venue"])
    assert e.value.code == 2
    assert "sampler.input_type: node type 'venue' is not in the graph" in capsys.readouterr().err
