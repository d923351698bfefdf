"""Smoke tests of ``mnmg-sampler bench dist|merge|overlap|mem`` on tiny graphs.

Each runs the user's command with a hard timeout and checks the ``--json`` output: fields
present and values sane. No timing assertions. The parent process of ``dist``, ``merge`` and
``overlap`` (it loads the graph, partitions it and launches the ranks) runs on a pooled rank of
one, and the ranks it launches (``bench MODE --worker WORK``, the same command torchrun would
start) run on pooled ranks too (:func:`_pooled_launch`): a torchrun agent and two fresh
interpreters per launch would cost more than these graphs' work, a dozen times. ``mem``
measures its processes' memory: it runs as its own process and launches real torchrun ranks,
which covers the launch itself.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mnmg_sampler.bench.cores import host_cores, usable_cores

from .cli_ranks import RankRun, _cli
from .harness import run_ranks
from .torchrun import REPO, env

COMMON = ["--graph", "rmat:8", "--fanouts", "4,3", "--repeats", "1", "--timeout", "60"]


def _worker(rank, world, mode, work) -> RankRun:
    """``bench MODE --worker WORK`` on this pooled rank, in the harness's gloo group (the
    worker's ``init_distributed`` keeps an initialised group); the cores it pins are put back
    for every thread of the process, threads it started included."""
    import os

    before = os.sched_getaffinity(0)
    try:
        return _cli(rank, world, ["bench", mode, "--worker", work], {})
    finally:
        for tid in os.listdir("/proc/self/task"):
            try:
                os.sched_setaffinity(int(tid), before)
            except OSError:  # the thread has ended
                pass


def _pooled_launch(mode, world, work, task, timeout, threads) -> list[dict]:
    """``bench._launch.launch`` with the ranks on pooled ranks instead of under torchrun: the
    same task file in, the same result files out."""
    from mnmg_sampler.bench._launch import TASK, LaunchError

    work.mkdir(parents=True, exist_ok=True)
    for old in work.glob("rank*.json"):
        old.unlink()
    (work / TASK).write_text(json.dumps(task))  # each task carries its threads
    runs = run_ranks(_worker, world, mode, str(work), timeout=timeout)
    if any(r.returncode != 0 for r in runs):
        raise LaunchError("\n".join(r.stderr[-3000:] for r in runs))
    return [json.loads((work / f"rank{r}.json").read_text()) for r in range(world)]


def _parent(rank, world, argv) -> RankRun:
    """``mnmg-sampler ARGV`` with its launches on pooled ranks (:func:`_pooled_launch`)."""
    from mnmg_sampler.bench import _launch, dist

    real = _launch.launch
    _launch.launch = dist.launch = _pooled_launch
    try:
        return _cli(rank, world, argv, {})
    finally:
        _launch.launch = dist.launch = real


def run_bench(args: list[str], out, timeout: float) -> tuple[dict, RankRun]:
    """``mnmg-sampler bench ARGS --json OUT``: the JSON written and the parent's run."""
    (proc,) = run_ranks(_parent, 1, ["bench", *args, "--json", str(out)], timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:] or proc.stdout[-3000:]
    assert out.is_file(), proc.stdout
    return json.loads(out.read_text()), proc


def bench(mode: str, tmp_path, *extra: str, timeout: float = 90, common=COMMON) -> dict:
    return run_bench([mode, *common, *extra], tmp_path / f"{mode}.json", timeout)[0]


def _small_graph_window(n_max: int) -> int:
    """Batches of 8 seeds of one seed window over 2 ranks on rmat:5, whose non-isolated nodes
    (fewer than ``n_max``) do not fill the windows the benches ask for: the windows wrap, and
    must still hold each seed once (the loader refuses repeated seeds)."""
    from mnmg_sampler.graph.datasets import load_graph, nonisolated_nodes

    n = nonisolated_nodes(load_graph("rmat:5")).size
    assert n < n_max
    return 2 * -(-n // (8 * 2))


SMALL = ["--graph", "rmat:5", "--fanouts", "4,3", "--repeats", "1", "--timeout", "60"]


@pytest.fixture(scope="module")
def dist_both(tmp_path_factory) -> dict:
    """``bench dist`` on 1 and 2 ranks with ``--seed-lookup both``: its main run translates
    seeds once (the default), its alternate repeats look them up per round (sharded id maps:
    replicated ones look nothing up). Two tests read it."""
    return bench("dist", tmp_path_factory.mktemp("dist"), "--batch-size", "16", "--batches",
                 "3", "--seed-lookup", "both", "--id-maps", "sharded")


def test_bench_dist_one_and_two_ranks_beside_single(dist_both):
    res = dist_both
    assert res["mode"] == "dist" and res["single"]["edges"] > 0
    assert set(res["dist"]) == {"1", "2"}
    one, two = res["dist"]["1"], res["dist"]["2"]
    assert one["world_size"] == 1 and two["world_size"] == 2
    assert len(two["edges_per_s_per_rank"]) == 2 and all(
        v > 0 for v in two["edges_per_s_per_rank"])
    assert all(e > 0 for e in two["edges_per_rank"])
    assert one["remote_bytes_per_edge"] == 0  # a world of one sends nothing to others
    assert two["remote_bytes_per_edge"] > 0 and two["bytes_per_edge"] > 0
    assert two["bytes_per_edge"] >= two["remote_bytes_per_edge"]
    # weak scaling: each rank samples --batches batches of the same seed order as one process
    assert [r["batches"] for r in two["ranks"]] == [3, 3]
    assert two["total_vs_single"] > 0 and two["per_rank_vs_single"] > 0
    # per hop: the hops' id bytes to others add up to the total, and so do the kinds
    assert len(two["hops"]) == 2 and [h["remote_fraction"] for h in one["hops"]] == [0, 0]
    assert all(0 < h["remote_fraction"] < 1 for h in two["hops"])
    assert sum(h["id_bytes_per_edge_remote"] for h in two["hops"]) == pytest.approx(
        two["id_bytes_per_edge_remote"])
    assert sum(two["id_bytes_per_edge_remote_parts"].values()) == pytest.approx(
        two["id_bytes_per_edge_remote"])
    assert all(v > 0 for v in two["id_bytes_per_edge_remote_parts"].values())


def test_bench_dist_both_seed_lookups_in_one_run(dist_both):
    # translated once (the main run): one lookup before the timed rounds (random partitioning:
    # remote seeds); looked up per round (the alternate repeats): 3 more collectives (sizes,
    # ids, answers) in every timed round. A separate `--seed-lookup per-round` run is the slow
    # test below.
    a = dist_both["dist"]["2"]
    assert dist_both["seed_lookup"] == "both" and a["seed_setup_remote_bytes"] > 0
    alt = a["per_round_seed_lookup"]
    for ra, calls in zip(a["ranks"], alt["exchange_calls_per_rank"], strict=True):
        assert ra["batches"] == 3
        assert calls == ra["exchange_calls"] + 3 * 3
    assert alt["once_cpu_ratio"] > 0 and alt["once_per_rank_edges_per_s_ratio"] > 0
    # the hop tally is the main run's alone: its hops still add up to the total
    assert sum(h["id_bytes_per_edge_remote"] for h in a["hops"]) == pytest.approx(
        a["id_bytes_per_edge_remote"])


def test_bench_dist_owner_split_makes_hop_one_local(tmp_path):
    res = bench("dist", tmp_path, "--batch-size", "16", "--batches", "3", "--world-sizes", "2",
                "--partition-method", "metis", "--split", "owner")
    two = res["dist"]["2"]
    first, second = two["hops"]
    assert first["remote_fraction"] == 0 and first["id_bytes_per_edge_remote"] == 0
    assert second["remote_fraction"] > 0 and second["id_bytes_per_edge_remote"] > 0
    assert sum(two["owned_seeds_per_rank"]) == res["nonisolated_nodes"]


@pytest.mark.slow  # one more bench launch; the per-round lookup runs in CI as dist_both's
# alternate repeats (test_bench_dist_both_seed_lookups_in_one_run)
def test_bench_dist_translates_seeds_once_or_looks_them_up_per_round(tmp_path, dist_both):
    both = dist_both
    per = bench("dist", tmp_path, "--batch-size", "16", "--batches", "3", "--world-sizes", "2",
                "--seed-lookup", "per-round", "--id-maps", "sharded")
    assert (both["seed_lookup"], per["seed_lookup"]) == ("both", "per-round")
    a, b = both["dist"]["2"], per["dist"]["2"]
    # translated once: one lookup before the timed rounds (random partitioning: remote seeds);
    # per-round: none then, and 3 more collectives (sizes, ids, answers) in every timed round
    assert a["seed_setup_remote_bytes"] > 0 and b["seed_setup_remote_bytes"] == 0
    assert a["edges_per_rank"] == b["edges_per_rank"]  # the same batches
    alt = a["per_round_seed_lookup"]  # the same run's alternate repeats, looked up per round
    for ra, rb, calls in zip(a["ranks"], b["ranks"], alt["exchange_calls_per_rank"],
                             strict=True):
        assert ra["batches"] == rb["batches"] == 3
        assert rb["exchange_calls"] == calls == ra["exchange_calls"] + 3 * 3
    assert "per_round_seed_lookup" not in b
    assert alt["once_cpu_ratio"] > 0 and alt["once_per_rank_edges_per_s_ratio"] > 0
    # the hop tally is the main run's alone: its hops still add up to the total
    assert sum(h["id_bytes_per_edge_remote"] for h in a["hops"]) == pytest.approx(
        a["id_bytes_per_edge_remote"])


def test_bench_merge_merges_loaders_and_one_per_round_does_not(tmp_path):
    # rmat:5: fewer seeds than one loader's window (2 batches x 8 seeds x 2 ranks), so the
    # windows wrap and must still hold each seed once
    per_loader = _small_graph_window(2 * 2 * 8)
    assert per_loader == 4  # 2 batches per rank, as asked
    res = bench("merge", tmp_path, "--batch-size", "8", "--batches", "2", "--loaders", "4",
                common=SMALL)
    m, o = res["merged"], res["one_per_round"]
    # 2 ranks x 4 loaders x 2 batches, in both configurations
    assert m["requests"] == o["requests"] == 4 * per_loader == 16
    assert m["requests_per_rank"] == o["requests_per_rank"] == [8, 8]
    assert m["requests_per_s"] > 0 and o["requests_per_s"] > 0 and res["ratio"] > 0
    assert m["requests_per_round"] >= 1
    # unmerged: a round takes at most one request per rank (a rank whose loaders are done or
    # between batches joins with none), so each rank's 8 requests need 8 rounds at least, and
    # every request pays at least its own kernel call per hop
    assert all(x <= 1.0 for x in o["local_requests_per_round"])
    assert 1 <= o["requests_per_round"] <= 2
    assert o["rounds"] >= 8
    assert o["kernel_calls_per_request"] >= 2.0  # 2 hops
    # the verdict is the measured ratio against the stated target
    assert res["met"] is (res["ratio"] >= res["target"]) and res["target"] > 1
    # both configurations: one kernel call per hop per round on every rank, however merged
    for s in (m, o):
        assert [st["kernel_calls"] for st in s["stats_per_rank"]] == [
            2 * st["rounds"] for st in s["stats_per_rank"]]


def test_bench_overlap_reports_three_epochs_and_ratio(tmp_path):
    # rmat:5: its seeds fill 2 of the 3 batches per rank asked for (the window wraps, each
    # seed once)
    per_loader = _small_graph_window(2 * 3 * 8)
    res = bench("overlap", tmp_path, "--batch-size", "8", "--batches", "3", "--prefetch", "2",
                "--step-ms", "2", common=SMALL)
    per_rank = per_loader // 2
    assert per_rank == 2
    assert res["step"] == "time.sleep" and res["step_s"] == pytest.approx(0.002)
    for p in ("sampling", "training", "both"):
        assert res[p]["median_s"] > 0
    assert res["training"]["median_s"] >= per_rank * 0.002  # a sleep of 2 ms per batch
    assert res["ratio"] > 0 and res["target"] == 1.15
    assert res["batches_per_rank"] == [per_rank, per_rank]
    assert sum(res["batches_per_rank"]) == per_loader
    for st in res["stats_per_rank"]:
        assert st["requests"] == 2 * per_rank  # sampling alone + both, per repeat


def test_bench_mem_rss_and_partition_comparison(tmp_path):
    out = tmp_path / "mem.json"
    cmd = [sys.executable, "-m", "mnmg_sampler", "bench", "mem", "--what", "rss,partition",
           "--graph", "rmat:8", "--world-sizes", "1,2", "--batches", "2", "--batch-size", "16",
           "--fanouts", "4,3", "--feature-dim", "8", "--partition-graph", "rmat:9",
           "--partition-ranks", "2", "--timeout", "120", "--json", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=400, env=env(), cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:] or proc.stdout[-3000:]
    res = json.loads(out.read_text())
    rss = res["rss"]
    assert set(rss["worlds"]) == {"1", "2"} and len(rss["worlds"]["2"]) == 2
    for r in rss["worlds"]["2"]:
        assert r["peak"] >= r["steady"] > r["base"] > 0 and r["part"] > 0
        assert r["features"] >= rss["num_nodes"] // 2 * 8 * 4 // 2  # ~half the rows, float32
        assert r["first_batch_s"] > 0 and r["batches"] == 2
    assert rss["restart"]["world"] == 1 and len(rss["restart"]["second"]) == 1
    p = res["partition"]
    assert p["identical"] is True and p["files"] >= 11 and len(p["ranks"]) == 2
    assert all(r["peak"] > 0 for r in p["ranks"]) and p["single"]["peak"] > 0
    assert "time to first batch" in proc.stdout and "parts identical: yes" in proc.stdout


def test_bench_dist_emulated_hosts_and_loader_report_cross_host_bytes(tmp_path):
    """``--hosts 2``: 2 hosts x 1 rank; with ``--host-memory 0`` ids and feature rows cross
    hosts, with the other host's topology and a tenth of its rows no id does and the host
    cache serves rows, with the default budget nothing does; ``--hosts 1 --loader``: one host
    through loaders and a service, nothing crosses hosts and no feature row is on the wire."""
    keys = ("per_rank_vs_single", "total_vs_single", "cpu_vs_single", "exchanges_per_round",
            "collectives_per_round", "cross_host_id_bytes_per_edge",
            "cross_host_feature_bytes_per_edge", "row_cache_hit_rate", "placement")
    common = ("--batch-size", "16", "--batches", "3", "--world-sizes", "2", "--features", "8")
    two = bench("dist", tmp_path, *common, "--hosts", "2", "--host-memory", "0")["dist"]["2"]
    part = bench("dist", tmp_path, *common, "--hosts", "2", "--host-memory",
                 "topology+0.1")["dist"]["2"]
    fits = bench("dist", tmp_path, *common, "--hosts", "2", "--loader")["dist"]["2"]
    one = bench("dist", tmp_path, *common, "--hosts", "1", "--loader")["dist"]["2"]
    for s in (two, part, fits, one):
        assert all(k in s for k in keys) and s["exchanges_per_round"] >= 1
    # every rank is its own host: what goes to others crosses hosts
    assert two["cross_host_id_bytes_per_edge"] > 0
    assert 0 < two["cross_host_feature_bytes_per_edge"] <= two["feature_bytes_per_edge_remote"]
    assert two["feature_cache_hits"] == 0 and two["row_cache_hit_rate"] == 0
    assert [(h["topology"], h["rows"]) for h in two["placement"]] == [("own", "none")] * 2
    # the other host's topology and a tenth of its rows: hops on the host, rows from the cache
    assert part["cross_host_id_bytes_per_edge"] == 0
    assert 0 < part["cross_host_feature_bytes_per_edge"] < two["cross_host_feature_bytes_per_edge"]
    assert part["row_cache_hit_rate"] > 0 and all(n > 0 for n in part["feature_cache_rows"])
    assert [(h["topology"], h["rows"]) for h in part["placement"]] == [("all", "cache")] * 2
    # the default budget holds the graph: hosts independent
    assert fits["cross_host_id_bytes_per_edge"] == fits["cross_host_feature_bytes_per_edge"] == 0
    assert [(h["topology"], h["rows"]) for h in fits["placement"]] == [("all", "all")] * 2
    assert one["cross_host_id_bytes_per_edge"] == one["cross_host_feature_bytes_per_edge"] == 0
    assert one["feature_bytes_per_edge_remote"] == 0 and one["feature_rows_mapped"] > 0
    assert [r["batches"] for r in one["ranks"]] == [3, 3]
    # emulated hosts do not share cores (--host-cores split, the default): each host's ranks
    # and the single process on their own share; one host, or shared cores: every core
    usable = usable_cores()
    split = host_cores(2, 2, usable)
    assert [r["cores"] for r in two["ranks"]] == (split or [usable, usable])
    if split is not None:  # a machine of 2+ cores: two disjoint halves
        assert not set(split[0]) & set(split[1])
        assert set(split[0]) | set(split[1]) == set(usable)
    assert [r["cores"] for r in one["ranks"]] == [usable, usable]
    # at most one request per round through a service with two rounds in flight: the loader's
    # batches, the wire round's collectives (agreement + 2 per hop, 2 hops)
    k = bench("dist", tmp_path, *common[:-2], "--hosts", "2", "--loader", "--merge", "1",
              "--rounds-in-flight", "2", "--prefetch", "4", "--host-cores", "shared",
              "--host-memory", "0")
    assert (k["rounds_in_flight"], k["prefetch"], k["merge"]) == (2, 4, 1)
    assert k["host_cores"] == "shared" and k["single_cores"] is None
    k = k["dist"]["2"]
    assert [r["cores"] for r in k["ranks"]] == [usable, usable] and k["rounds_in_flight"] == 2
    # --merge 1 with rounds in flight left to auto: two on the wire path
    a = bench("dist", tmp_path, *common[:-2], "--hosts", "2", "--loader", "--merge", "1",
              "--host-memory", "0")
    assert a["rounds_in_flight"] is None and a["dist"]["2"]["rounds_in_flight"] == 2
    assert two["rounds_in_flight"] == 1 and one["rounds_in_flight"] == 1
    assert [r["batches"] for r in k["ranks"]] == [3, 3]
    # (a rank may join a peer's round with none of its own: at most one, not exactly one)
    assert 0 < k["requests_per_round"] <= 1 and k["collectives_per_round"] == 5
    # an exchange is the agreement or an all-to-all each way: at most hops + 2 (here hops + 1)
    assert k["exchanges_per_round"] == 3 <= 2 + 2


def test_bench_dist_typed_view_reports_the_same_keys(tmp_path, dist_both):
    res = bench("dist", tmp_path, "--batch-size", "16", "--batches", "3", "--world-sizes", "2",
                "--typed", "3")
    two, homo = res["dist"]["2"], dist_both["dist"]["2"]
    assert res["typed"] == 3 and res["single"]["edges"] > 0
    assert set(two) == set(homo) - {"per_round_seed_lookup"}
    assert two["id_bytes_per_edge_remote"] > 0 and all(e > 0 for e in two["edges_per_rank"])
