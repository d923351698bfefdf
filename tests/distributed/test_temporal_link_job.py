"""The temporal link job end to end: configs/temporal_link.yaml's keys (link.split_by: time,
sampler.time_attr) on a small generated user-item graph with rating times, 2 ranks under
torchrun; and its typed error on a graph without time, on every rank."""

from __future__ import annotations

from .torchrun import torchrun, train_job

SMALL = ["dataset.name=typed-useritem-t:600:200", "training.epochs=2", "model.hidden=32",
         "sampler.batch_size=128", "training.eval_every=1"]


def test_temporal_link_job_trains_on_two_ranks(tmp_path):
    _, records = train_job("configs/temporal_link.yaml", SMALL, tmp_path, timeout=400)
    final = [x for x in records if x["event"] == "final"]
    assert len(final) == 1 and final[0]["world_size"] == 2
    epochs = [x for x in records if x["event"] == "epoch"]
    assert [e["epoch"] for e in epochs] == [0, 1]
    assert all(e["sampled_edges"] > 0 for e in epochs)
    # chance is AUC 0.5: the model reads the time-bounded neighbours
    assert final[0]["test_auc"] > 0.6 and final[0]["val_auc"] > 0.6, final


def test_time_split_without_edge_time_fails_on_every_rank(tmp_path):
    args = ["train", "--config", "configs/temporal_link.yaml", "--no-progress",
            "dataset.name=typed-useritem:600:200", f"output.dir={tmp_path / 'run'}",
            f"partition.dir={tmp_path / 'parts'}"]
    r = torchrun(args, nproc=2, timeout=200)
    assert r.returncode != 0
    text = r.stdout + r.stderr
    assert "link.split_by is time but typed-useritem:600:200 has no edge time" in text, \
        text[-4000:]
