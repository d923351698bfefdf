"""`train` partitions again when partition.dir was made from something else (real ranks)."""

from __future__ import annotations

import json
from pathlib import Path

from .harness import run_ranks


def _steps(rank, world, tmp):
    import torch.distributed as dist

    from mnmg_sampler.config import load_config
    from mnmg_sampler.errors import PartitionError
    from mnmg_sampler.graph.partition_io import MANIFEST, read_manifest
    from mnmg_sampler.train.setup import ensure_partitions

    pdir = f"{tmp}/parts"
    base = [f"output.dir={tmp}/out", f"partition.dir={pdir}", "dataset.name=rmat:7",
            "dataset.feature_dim=4"]
    seen = []

    def run(*extra):
        cfg = load_config(None, [*base, *extra])
        d = ensure_partitions(cfg, rank, world)
        m = read_manifest(d)
        seen.append({"source": m["source"], "mtime": (d / MANIFEST).stat().st_mtime_ns,
                     "parts": m["num_parts"]})

    run()                                  # 0: built
    run()                                  # 1: reused
    run("partition.method=range")          # 2: method changed
    run("partition.method=range", "dataset.name=cora")  # 3: dataset changed
    run("partition.method=range", "dataset.name=cora", "dataset.drop_self_loops=true")  # 4
    dist.barrier()  # every rank has read step 4's manifest before rank 0 edits it
    if rank == 0:  # 5: a manifest written before sources were recorded
        mpath = Path(pdir) / MANIFEST
        m = json.loads(mpath.read_text())
        m.pop("source")
        mpath.write_text(json.dumps(m))
    dist.barrier()
    run("partition.method=range", "dataset.name=cora", "dataset.drop_self_loops=true")
    foreign = f"{tmp}/foreign"
    if rank == 0:
        import os

        os.makedirs(foreign)
        with open(f"{foreign}/data.csv", "w") as f:
            f.write("keep me")
    dist.barrier()
    try:
        ensure_partitions(load_config(None, [*base, f"partition.dir={foreign}"]), rank, world)
        err = None
    except PartitionError as e:
        err = str(e)
    return seen, err


def test_train_repartitions_stale_dirs_and_refuses_foreign_ones(tmp_path):
    res = run_ranks(_steps, 2, str(tmp_path), timeout=240)
    seen, err = res[0]
    src = [s["source"] for s in seen]
    assert src[0]["input"] == {"kind": "generator", "name": "rmat", "scale": 7,
                               "edge_factor": 16}
    assert src[0]["partition"] == {"method": "random", "seed": 0, "parts": 2}
    assert src[0]["load"]["feature_dim"] == 4 and src[0]["load"]["seed"] == 0
    assert seen[1]["mtime"] == seen[0]["mtime"]  # unchanged settings: reused, not rewritten
    assert src[2]["partition"]["method"] == "range" and seen[2]["mtime"] != seen[1]["mtime"]
    assert src[3]["input"] == {"kind": "builtin", "name": "cora"}
    assert src[4]["load"]["drop_self_loops"] is True and seen[4]["mtime"] != seen[3]["mtime"]
    assert src[5] == src[4] and seen[5]["mtime"] != seen[4]["mtime"]  # no source: rebuilt
    assert all(s["parts"] == 2 for s in seen)
    for _, e in res:  # every rank gets the refusal; the foreign file is kept
        assert e is not None and "holds no mnmg-sampler partition manifest" in e
    assert (tmp_path / "foreign" / "data.csv").read_text() == "keep me"
    assert res[1][0] == seen  # both ranks saw the same directory
