"""A YAML job on one's own data (a CSV edge list with features, labels and masks in separate
files), on 2 real ranks: the stored masks, not ``dataset.split``, choose the seeds."""

from __future__ import annotations

import numpy as np

from .harness import run_ranks

N = 40


def _write(tmp):
    rng = np.random.default_rng(2)
    src, dst = rng.integers(0, N, 200), rng.integers(0, N, 200)
    (tmp / "edges.csv").write_text("source,target\n" + "".join(
        f"{s},{d}\n" for s, d in zip(src, dst, strict=True)))
    np.save(tmp / "x.npy", rng.standard_normal((N, 6)).astype(np.float32))
    np.savetxt(tmp / "y.csv", rng.integers(0, 3, N), fmt="%d")
    np.save(tmp / "train.npy", np.arange(12))             # node ids
    mask = np.zeros(N, bool)
    mask[12:20] = True
    np.save(tmp / "val.npy", mask)                         # a bool mask
    np.save(tmp / "test.npy", np.arange(20, N))


def _jobs(rank, world, tmp):
    return {mode: _job(tmp, mode) for mode in ("sample", "train")}


def _job(tmp, mode):
    from mnmg_sampler import load_config
    from mnmg_sampler.train.job import run_job

    d = tmp
    cfg = load_config(None, [
        f"dataset.name={d / 'edges.csv'}", f"dataset.features={d / 'x.npy'}",
        f"dataset.labels={d / 'y.csv'}", f"dataset.train_mask={d / 'train.npy'}",
        f"dataset.val_mask={d / 'val.npy'}", f"dataset.test_mask={d / 'test.npy'}",
        f"training.mode={mode}", "training.epochs=1", "sampler.batch_size=2",
        "sampler.fanouts=[3,0]", "model.hidden=8", f"output.dir={d / ('out-' + mode)}",
        f"partition.dir={d / 'parts'}"])
    return run_job(cfg, progress=False)


def test_yaml_job_on_own_csv_uses_the_stored_masks(tmp_path):
    _write(tmp_path)
    res = run_ranks(_jobs, 2, tmp_path, timeout=400)
    # 12 train ids, batch 2, 2 ranks: 3 batches per rank (the random 60% split: 24 ids, 6)
    assert res[0]["sample"]["batches"] == res[1]["sample"]["batches"] == 6
    final = res[0]["train"]
    assert 0.0 <= final["test_acc"] <= 1.0 and final["test_acc"] == res[1]["train"]["test_acc"]
