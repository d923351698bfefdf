"""Checkpoints: real state round-trips with weights_only=True; crafted, damaged, foreign files."""

from __future__ import annotations

import logging
import os
import pickle

import pytest
import torch

from mnmg_sampler.config import config_to_dict, load_config
from mnmg_sampler.errors import CheckpointError
from mnmg_sampler.train.checkpoint import (
    check_model_state,
    list_checkpoints,
    load_checkpoint,
    load_latest,
    load_rows,
    save_checkpoint,
    save_rows,
)
from mnmg_sampler.train.model import GraphSAGE


def _state(hidden: int = 8, epoch: int = 0) -> tuple[dict, torch.nn.Module]:
    torch.manual_seed(0)
    model = GraphSAGE(4, hidden, 3, 2, use_pyg=False)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    x, ei = torch.randn(5, 4), torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]])
    model(x, ei).sum().backward()
    opt.step()  # optimizer state with tensors, ints and tuples
    loader = {"epoch": epoch + 1, "next_batch": 0, "seed": 3, "world_size": 2, "num_seeds": 10}
    return {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": epoch,
            "loader": loader, "world_size": 2,
            "config": config_to_dict(load_config(None, []))}, model


class Payload:
    """Unpickling this calls os.system: what a crafted checkpoint would do."""

    def __init__(self, marker) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_real_training_state_round_trips_with_weights_only(tmp_path):
    state, model = _state()
    path = save_checkpoint(tmp_path, state, 0)
    got = torch.load(path, weights_only=True)  # what load_checkpoint does
    assert got["config"] == state["config"] and got["loader"] == state["loader"]
    for k, v in state["model"].items():
        assert torch.equal(got["model"][k], v)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    opt.load_state_dict(load_checkpoint(path)["optimizer"])
    check_model_state(got["model"], model, path)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary left


@pytest.mark.parametrize("older", [False, True])
def test_crafted_checkpoint_is_rejected_and_runs_nothing(tmp_path, older):
    marker = tmp_path / "pwned"
    ck = tmp_path / "ck"
    if older:  # a valid older checkpoint must not hide the tampering
        save_checkpoint(ck, _state()[0], 0)
    ck.mkdir(exist_ok=True)
    evil = _state()[0]
    evil["model"] = Payload(marker)
    torch.save(evil, ck / "checkpoint-epoch00001.pt")  # a real zip archive, with a payload
    with pytest.raises(CheckpointError, match="other than tensors and plain types") as e:
        load_latest(ck)
    assert "nothing in it ran" in str(e.value)
    assert not marker.exists()


def test_plain_pickle_payload_is_rejected_and_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    (tmp_path / "checkpoint-epoch00003.pt").write_bytes(pickle.dumps(Payload(marker)))
    with pytest.raises(CheckpointError, match="damaged"):
        load_latest(tmp_path)
    with pytest.raises(CheckpointError, match="damaged"):
        load_checkpoint(tmp_path / "checkpoint-epoch00003.pt")
    assert not marker.exists()


def test_truncated_newest_falls_back_to_the_previous(tmp_path, caplog):
    save_checkpoint(tmp_path, _state(epoch=0)[0], 0)
    newest = save_checkpoint(tmp_path, _state(epoch=1)[0], 1)
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])
    with caplog.at_level(logging.WARNING, logger="mnmg_sampler.train.checkpoint"):
        path, state = load_latest(tmp_path)
    assert path.name == "checkpoint-epoch00000.pt" and state["epoch"] == 0
    assert "checkpoint-epoch00001.pt is damaged" in caplog.text
    path.write_bytes(b"")  # now every checkpoint is damaged: a typed error, not a fresh start
    with pytest.raises(CheckpointError, match="every checkpoint"):
        load_latest(tmp_path)


def test_no_checkpoint_is_none(tmp_path):
    assert load_latest(tmp_path / "missing") is None
    (tmp_path / "notes.pt").write_bytes(b"not ours")
    assert load_latest(tmp_path) is None


def test_missing_key_is_a_typed_error(tmp_path):
    state = _state()[0]
    del state["optimizer"]
    save_checkpoint(tmp_path, state, 4)
    with pytest.raises(CheckpointError, match="no valid optimizer"):
        load_latest(tmp_path)


def test_another_model_size_is_a_typed_error(tmp_path):
    state, _ = _state(hidden=8)
    _, bigger = _state(hidden=16)
    with pytest.raises(CheckpointError, match="written for another model") as e:
        check_model_state(state["model"], bigger, tmp_path / "c.pt")
    assert "model.hidden" in str(e.value)


def test_pruning_deletes_only_its_own_names(tmp_path):
    foreign = ["checkpoint-epoch-notes.pt", "checkpoint-epoch00001.pt.bak", "model.pt",
               "checkpoint-epoch7.pt", "README"]
    for name in foreign:
        (tmp_path / name).write_text("user data")
    state = _state()[0]
    for epoch in range(4):
        save_checkpoint(tmp_path, state, epoch, keep=2)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted(foreign + ["checkpoint-epoch00002.pt", "checkpoint-epoch00003.pt"])
    assert [e for e, _ in list_checkpoints(tmp_path)] == [2, 3]
    save_checkpoint(tmp_path, state, 100000, keep=1)  # six digits still sort by number
    assert [e for e, _ in list_checkpoints(tmp_path)] == [100000]


def test_rows_of_every_rank_load_and_are_pruned_with_their_checkpoint(tmp_path):
    """Each rank's embedding rows beside the checkpoint: read back in rank order, refused when
    a rank's file is missing or foreign, deleted with the checkpoint they belong to."""
    for epoch in (0, 1):
        for r in range(3):
            save_rows(tmp_path, epoch, r, 3, {"dim": 2, "ids.": torch.tensor([r, r + 3])})
        save_checkpoint(tmp_path, _state(epoch=epoch)[0], epoch, keep=1)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["checkpoint-epoch00001.pt"] + [
        f"checkpoint-epoch00001.rows-{r}-of-3.pt" for r in range(3)]
    got = list(load_rows(tmp_path, 1))
    assert [s["ids."].tolist() for s in got] == [[0, 3], [1, 4], [2, 5]]
    (tmp_path / "checkpoint-epoch00001.rows-1-of-3.pt").unlink()
    with pytest.raises(CheckpointError, match="incomplete"):
        list(load_rows(tmp_path, 1))
    with open(tmp_path / "checkpoint-epoch00001.rows-1-of-3.pt", "wb") as f:
        pickle.dump(Payload("x"), f)
    with pytest.raises(CheckpointError, match="damaged|cannot be read"):
        list(load_rows(tmp_path, 1))
