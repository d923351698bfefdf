"""``mnmg-sampler sample`` and ``mnmg-sampler bench single`` end to end (tiny graphs, no timing)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numba
import numpy as np
import pytest

from mnmg_sampler.commands import cli
from mnmg_sampler.commands.sample import batch_seeds, read_seeds_file
from mnmg_sampler.graph.datasets import load_graph, nonisolated_nodes
from mnmg_sampler.loaders.seeds import NodeBits
from mnmg_sampler.ops.rng import request_key
from mnmg_sampler.sampling.sampler import sample


def _cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mnmg_sampler", *args], capture_output=True,
                          text=True, timeout=timeout)


def _value(out: str, label: str) -> int:
    m = re.search(rf"^{label} +([\d,]+)$", out, re.M)
    assert m, f"no '{label}' line in:\n{out}"
    return int(m.group(1).replace(",", ""))


@pytest.fixture(autouse=True)
def _restore_threads():
    before = numba.get_num_threads()
    yield
    numba.set_num_threads(before)


@pytest.fixture
def tiny_npz(tmp_path):
    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, 120, 900), rng.integers(0, 120, 900)
    src[:5], dst[:5] = 0, 1  # some duplicates; nodes 120..129 isolated via num_nodes
    path = tmp_path / "tiny.npz"
    np.savez(path, src=src, dst=dst, num_nodes=np.int64(130))
    return path


def test_sample_subprocess_matches_in_process(tiny_npz, tmp_path):
    out_dir = tmp_path / "out"
    p = _cli("sample", str(tiny_npz), "--fanouts", "4,3", "--batch-size", "32", "--seed", "5",
             "--threads", "1", "--out", str(out_dir), "--json")
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)  # --json: one JSON document, nothing else on stdout
    graph = load_graph(str(tiny_npz))
    seeds = NodeBits.nonisolated(graph)  # the nodes with a neighbor, as a bitmap
    n_batches = -(-len(seeds) // 32)
    assert res["batches"] == n_batches and res["seeds"] == len(seeds)
    edges = nodes = 0
    for i in range(n_batches):
        s = batch_seeds(seeds, i, 32, 5)
        b = sample(graph, s, [4, 3], seed=5, key=request_key(5, 0, i))
        edges += b.e_id.numel()
        nodes += b.num_nodes
        saved = np.load(out_dir / f"batch_{i:06d}.npz")
        np.testing.assert_array_equal(saved["n_id"], b.n_id.numpy())
        np.testing.assert_array_equal(saved["n_id"][:s.size], s)
        np.testing.assert_array_equal(saved["edge_index"], b.edge_index.numpy())
        np.testing.assert_array_equal(saved["e_id"], b.e_id.numpy())
        assert int(saved["key"]) == request_key(5, 0, i)
        assert int(saved["batch_size"]) == s.size
    assert res["sampled_edges"] == edges > 0
    assert res["sampled_nodes"] == nodes
    assert res["edges_per_s"] > 0 and res["nodes_per_s"] > 0 and res["out"] == str(out_dir)
    # every node with a neighbor is a seed exactly once in the epoch; isolated ones never
    saved = [np.load(out_dir / f"batch_{i:06d}.npz") for i in range(n_batches)]
    all_seeds = np.concatenate([b["n_id"][:int(b["batch_size"])] for b in saved])
    np.testing.assert_array_equal(np.sort(all_seeds), nonisolated_nodes(graph))
    # in the order of the loaders' keyed shuffle of the seed positions (one batch of them all)
    from mnmg_sampler.loaders.neighbor import global_batches

    (order,) = global_batches(len(seeds), len(seeds), 1, shuffle=True, drop_last=False, seed=5,
                              epoch=0)
    np.testing.assert_array_equal(all_seeds, nonisolated_nodes(graph)[order])


def test_sample_num_batches_include_isolated_and_seeds_file(tiny_npz, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["sample", str(tiny_npz), "--batch-size", "16", "--num-batches", "3",
                  "--include-isolated", "--threads", "1"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert _value(out, "batches") == 3
    assert re.search(r"^seeds +130,", out, re.M)
    assert re.search(r"^edges/s +[\d,]+$", out, re.M)
    seeds_file = tmp_path / "seeds.txt"
    seeds_file.write_text("# seed ids\n3\n7\n11\n")
    np.testing.assert_array_equal(read_seeds_file(str(seeds_file)), [3, 7, 11])
    with pytest.raises(SystemExit) as e:
        cli.main(["sample", str(tiny_npz), "--seeds-file", str(seeds_file), "--threads", "1"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert re.search(r"^seeds +3,", out, re.M) and _value(out, "batches") == 1


@pytest.mark.parametrize(
    "args, message",
    [
        (["--fanouts", "5,-2"], "invalid fanouts"),
        (["--fanouts", "5,x"], "invalid fanouts"),
        (["--partitions", "no-such-parts"], "no-such-parts"),
        (["--seeds-file", "missing.txt"], "does not exist"),
        (["--threads", "100000"], "threads"),
    ],
)
def test_sample_user_errors_exit_2(tiny_npz, capsys, args, message):
    with pytest.raises(SystemExit) as e:
        cli.main(["sample", str(tiny_npz), *args])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "mnmg-sampler sample: error:" in err and message in err
    assert "Traceback" not in err


def test_sample_bad_graph_and_no_graph(tmp_path, capsys):
    for argv in (["sample", str(tmp_path / "nope.npz")], ["sample"]):
        with pytest.raises(SystemExit) as e:
            cli.main(argv)
        assert e.value.code == 2
        assert "error:" in capsys.readouterr().err


def test_seeds_file_out_of_range(tiny_npz, tmp_path, capsys):
    f = tmp_path / "s.npy"
    np.save(f, np.array([1, 500]))
    with pytest.raises(SystemExit) as e:
        cli.main(["sample", str(tiny_npz), "--seeds-file", str(f)])
    assert e.value.code == 2
    assert "out of range" in capsys.readouterr().err


def test_bench_single_json_fields(tmp_path):
    out = tmp_path / "bench.json"
    p = _cli("bench", "single", "--graph", "rmat:10", "--undirected", "--fanouts", "5,3",
             "--batch-size", "64", "--batches", "3", "--repeats", "2", "--kernel-nodes", "500",
             "--peers-venv", str(tmp_path / "no-venv"), "--json", str(out))
    assert p.returncode == 0, p.stderr
    assert "DGL peer: not available (run ../shared/peers/setup.sh)" in p.stdout
    assert "kernel / gather" in p.stdout
    res = json.loads(out.read_text())
    assert res["mode"] == "single" and res["graph"] == "rmat:10" and res["undirected"] is True
    assert res["num_nodes"] == 1024 and res["fanouts"] == [5, 3] and res["batch_size"] == 64
    assert res["machine"]["threads"] == 1
    assert res["machine"]["torch_threads"] == 1  # torch's intra-op pool pinned as well
    k = res["kernel"]
    for name in ("kernel", "kernel_positions", "kernel_no_eids", "gather"):
        assert len(k[name]["seconds"]) == 2 and k[name]["per_s"] > 0
        assert k[name]["work"] == k["kernel"]["work"] > 0
    assert k["kernel_weighted"]["per_s"] > 0 and k["weighted_cost"] > 0
    assert k["nodes"] == 500 and k["fanout"] == 5 and k["ratio"] > 0
    m = res["multihop"]
    assert m["batches"] == 3 and m["edges"] > 0 and m["per_s"] > 0 and len(m["seconds"]) == 2
    assert res["dgl"]["available"] is False and res["multihop_vs_dgl"] is None


def test_bench_parser_lists_modes():
    p = cli.build_parser()
    args = p.parse_args(["bench", "single", "--graph", "cora"])
    assert args.command == "bench" and args.bench_mode == "single" and args.threads == 1
    assert callable(args.func) and callable(args.bench_run)
    with pytest.raises(SystemExit):
        p.parse_args(["bench"])  # a mode is required
