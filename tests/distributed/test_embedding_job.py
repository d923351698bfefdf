"""A featureless edge list trains a link job from configs/edgelist_link.yaml on 2 ranks (issue 31):
every node's embedding row lives with its owner (each rank holds its share, reported in
metrics.jsonl with the bytes of the embedding exchange), and a job killed after a checkpoint and
resumed (every rank's rows read back) ends with the metrics of the uninterrupted job; with
``model.embeddings: all`` featured types get rows too; a labelled edge list trains the node
job."""

from __future__ import annotations

import os

import numpy as np

from .cli_ranks import cli_ranks
from .torchrun import metrics, torchrun

QUICK = ["training.epochs=2", "training.eval_every=1", "output.checkpoint_every=1",
         "sampler.batch_size=64", "sampler.eval_batch_size=128", "link.eval_negatives=10"]


def _edges(tmp) -> str:
    """400 nodes in 8 communities, 90% of 3000 edges inside one: only learned rows can tell."""
    rng = np.random.default_rng(0)
    src = rng.integers(0, 400, 3000)
    inside = rng.random(3000) < 0.9
    dst = np.where(inside, (src // 50) * 50 + rng.integers(0, 50, 3000),
                   rng.integers(0, 400, 3000))
    path = tmp / "edges.txt"
    np.savetxt(path, np.stack([src, dst], 1), fmt="%d")
    return str(path)


def _args(tmp, name, extra=()) -> list[str]:
    return ["train", "--config", "configs/edgelist_link.yaml", "--no-progress", *QUICK,
            f"dataset.name={_edges(tmp)}", f"output.dir={tmp / name}",
            f"partition.dir={tmp / 'parts'}", *extra]


def _final(out) -> dict:
    (f,) = [r for r in metrics(out) if r["event"] == "final"]
    return f


def test_featureless_edge_list_link_job_trains_and_resumes_exactly(tmp_path):
    runs = cli_ranks(_args(tmp_path, "full"), timeout=400)
    for r in runs:
        assert r.returncode == 0, r.stderr[-3000:]
    want = _final(tmp_path / "full")
    assert want["world_size"] == 2 and want["test_auc"] > 0.6, want  # chance: 0.5
    ep = [r for r in metrics(tmp_path / "full") if r["event"] == "epoch"]
    assert [r["epoch"] for r in ep] == [0, 1]
    for r in ep:
        local, total = r["embedding_rows_local"], r["embedding_rows_total"]
        assert len(local) == 2 and sum(local) == total == 400 and max(local) < total
        assert r["embedding_bytes_per_step"] > 0
    files = sorted(os.listdir(tmp_path / "full" / "checkpoints"))
    assert "checkpoint-epoch00001.rows-1-of-2.pt" in files

    crashed = torchrun(_args(tmp_path, "cut"), 2, 400, extra_env={"MNMG_FAULT_AFTER_EPOCH": "0"})
    assert crashed.returncode != 0
    assert sorted(os.listdir(tmp_path / "cut" / "checkpoints")) == [
        "checkpoint-epoch00000.pt", "checkpoint-epoch00000.rows-0-of-2.pt",
        "checkpoint-epoch00000.rows-1-of-2.pt"]
    runs = cli_ranks(_args(tmp_path, "cut", ["--resume"]), timeout=400)
    for r in runs:
        assert r.returncode == 0, r.stderr[-3000:]
    assert "resumed from" in runs[0].stdout + runs[0].stderr
    got = _final(tmp_path / "cut")
    for k in ("test_auc", "test_mrr", "test_hits", "test_loss", "val_auc", "val_mrr"):
        assert got[k] == want[k], (k, got[k], want[k])
    ep_cut = [r for r in metrics(tmp_path / "cut") if r["event"] == "epoch"]
    assert [r["train_loss"] for r in ep_cut] == [r["train_loss"] for r in ep]


def test_featureless_labelled_edge_list_node_job(tmp_path):
    """Node classification on an edge list with labels and no features: the node job reads
    each node's learned row (layer-wise evaluation over the rows each rank holds)."""
    labels = tmp_path / "y.npy"
    np.save(labels, np.arange(400) // 50)  # the planted communities
    args = ["train", "--config", "configs/quickstart.yaml", "--no-progress",
            f"dataset.name={_edges(tmp_path)}", f"dataset.labels={labels}",
            "training.epochs=6", "model.hidden=32", "sampler.batch_size=32",
            f"output.dir={tmp_path / 'o'}", f"partition.dir={tmp_path / 'p'}"]
    for r in cli_ranks(args, timeout=300):
        assert r.returncode == 0, r.stderr[-3000:]
    ep = [r for r in metrics(tmp_path / "o") if r["event"] == "epoch"]
    assert all(sum(r["embedding_rows_local"]) == r["embedding_rows_total"] == 400 for r in ep)
    assert _final(tmp_path / "o")["test_acc"] > 0.4, _final(tmp_path / "o")  # chance: 1/8


def test_all_gives_featured_types_rows_too(tmp_path):
    """model.embeddings: all on the typed link job: users (featureless) and items (featured,
    lin(x) + emb) both have rows, partitioned over the ranks; it trains above chance."""
    args = ["train", "--config", "configs/hetero_link.yaml", "--no-progress",
            "dataset.name=typed-useritem:600:200", "training.epochs=2", "model.hidden=32",
            "sampler.batch_size=128", "model.embeddings=all", f"output.dir={tmp_path / 'o'}",
            f"partition.dir={tmp_path / 'p'}"]
    for r in cli_ranks(args, timeout=300):
        assert r.returncode == 0, r.stderr[-3000:]
    ep = [r for r in metrics(tmp_path / "o") if r["event"] == "epoch"]
    assert all(r["embedding_rows_total"] == 800 and sum(r["embedding_rows_local"]) == 800
               and max(r["embedding_rows_local"]) < 800 for r in ep)
    assert _final(tmp_path / "o")["test_auc"] > 0.6
