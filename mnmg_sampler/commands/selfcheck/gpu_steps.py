"""The steps of ``launch/gpu_check.sh``, one per process (:mod:`.gpu_check` starts them).

``python -m mnmg_sampler.commands.selfcheck.gpu_steps STEP --result FILE --seconds S
[--simulate]`` runs one step and writes its result to ``FILE`` as JSON: ``{"status": ...,
"error": ..., "figures": {...}, "skipped_parts": {part: why}}``, rewritten after each thing a
step measures, so a step stopped at its deadline keeps what it finished. An exception leaves the
file as last written and exits non-zero: the runner records the step as failed with the
exception's last line. Steps, in order: ``versions``, ``selfcheck``, ``gpu_tests``, ``bench``,
``train`` (what each proves: the table of ``docs/gpu.md``). With ``--simulate`` every step runs at
tiny sizes on the CPU under Numba's CUDA simulator; what needs a real device (GPU rates, NCCL) is
listed in ``skipped_parts`` with why.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from ...system.console import jsonable
from .result import median_seconds

ROOT = Path(__file__).resolve().parents[3]
#: Test-only: ``MNMG_GPU_CHECK_INJECT=STEP[:hang][,...]`` makes those steps raise (or hang) at
#: their start, so a test can show that a failed or hung step is recorded and the others run.
INJECT_ENV = "MNMG_GPU_CHECK_INJECT"
#: Read by ``tests/gpu_sim/sim_run.py``: the simulator tests run on the CUDA device instead.
DEVICE_TESTS_ENV = "MNMG_GPU_TESTS_ON_DEVICE"
NO_DEVICE = "simulate: no CUDA device"


class Step:
    """What a step writes: its figures, the parts it skipped, and a verdict it may set."""

    def __init__(self, path: Path, simulate: bool, seconds: float) -> None:
        self.path, self.simulate = path, simulate
        self.deadline = time.monotonic() + seconds
        self.out: dict = {"status": "pass", "error": None, "figures": {}, "skipped_parts": {}}

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def skip(self, part: str, why: str) -> None:
        self.out["skipped_parts"][part] = why
        self.save()

    def fail(self, error: str) -> None:
        self.out["status"] = "fail"
        prev = self.out["error"]
        self.out["error"] = f"{prev}; {error}" if prev else error
        self.save()

    def put(self, **figures) -> None:
        self.out["figures"].update(figures)
        self.save()

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.out, indent=1, default=jsonable))
        tmp.replace(self.path)


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


# ------------------------------------------------------------------------------- versions


def versions(s: Step) -> None:
    from .environment import _version, backends, gpus
    from .environment import versions as env_versions
    from .result import run_check

    v = run_check("env.versions", env_versions)
    data = dict(v.data)
    data["numba_cuda"] = _version("numba_cuda")
    g = run_check("env.gpus", gpus)
    b = run_check("env.backends", backends)
    s.put(versions=data, gpus=g.data.get("gpus", []), gpus_detail=g.detail, backends=b.data)
    for c in (v, g, b):
        if c.verdict == "fail":
            s.fail(f"{c.name}: {c.detail}")


# ------------------------------------------------------------------------------ selfcheck


def selfcheck(s: Step) -> None:
    from ..cli import _main

    path = s.path.with_name("selfcheck.json")
    argv = ["selfcheck", "--repeats", "1" if s.simulate else "3", "--json", str(path)]
    if s.simulate:
        argv += ["--scale", "4"]
    code = _main(argv)
    report = json.loads(path.read_text())
    lines = {c["name"]: {"verdict": c["verdict"], "detail": c["detail"],
                         "seconds": c["seconds"]} for c in report["checks"]}
    figures: dict = {"exit_code": code, "summary": report["summary"], "lines": lines,
                     "report_file": path.name}
    for name in ("kernel.cuda.uniform", "kernel.cuda.weighted"):
        data = next((c["ranks"][0]["data"] for c in report["checks"] if c["name"] == name), {})
        keep = ("edges_per_s", "cpu_edges_per_s", "gather_reads_per_s", "ratio_vs_gather",
                "vs_cpu", "first_call_s", "device")
        figures[name] = {k: data[k] for k in keep if k in data}
    s.put(**figures)
    bad = [f"{n}: {c['detail']}" for n, c in lines.items() if c["verdict"] == "fail"]
    if bad or code != 0:
        s.fail("; ".join(bad) or f"selfcheck exited with {code}")


# ------------------------------------------------------------------------------ gpu_tests

DEVICE_TEST_FILES = ("test_cuda_kernels.py", "test_cuda_typed.py", "test_cuda_temporal.py",
                     "test_cuda_ptx.py", "test_transfers.py")
SIM_TEST_FILES = ("test_cuda_ptx.py",)  # simulate: the runner's path, one cheap file


def _junit(path: Path) -> dict:
    import xml.etree.ElementTree as ET

    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    out = {k: sum(int(x.get(k, 0)) for x in suites)
           for k in ("tests", "failures", "errors", "skipped")}
    bad = []
    for case in root.iter("testcase"):
        for kind in ("failure", "error"):
            e = case.find(kind)
            if e is not None:
                msg = " ".join((e.get("message") or e.text or "").split())[:300]
                bad.append(f"{case.get('name')}: {msg}")
    out["failed"] = bad
    return out


def gpu_tests(s: Step) -> None:
    """Every file in its own pytest process, all at once (they check results, not speed)."""
    import subprocess

    files = SIM_TEST_FILES if s.simulate else DEVICE_TEST_FILES
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if not s.simulate:
        env[DEVICE_TESTS_ENV] = "1"
        env.pop("NUMBA_ENABLE_CUDASIM", None)
    procs = {}
    for f in files:
        xml = s.path.with_name(f"pytest-{Path(f).stem}.xml")
        log = open(s.path.with_name(f"pytest-{Path(f).stem}.log"), "w")  # noqa: SIM115
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               f"--junitxml={xml}", f"tests/gpu_sim/{f}"]
        procs[f] = (subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log,
                                     stderr=subprocess.STDOUT), xml, log)
    res: dict = {}
    for f, (p, xml, log) in procs.items():
        try:
            p.wait(timeout=max(1.0, s.left() - 3))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            res[f] = {"status": "timeout"}
        log.close()
        if f not in res:
            res[f] = ({**_junit(xml), "exit_code": p.returncode} if xml.is_file() else
                      {"exit_code": p.returncode, "status": "no junit report (see its .log)"})
        s.put(files=res)
    total = {k: sum(r.get(k, 0) for r in res.values())
             for k in ("tests", "failures", "errors", "skipped")}
    s.put(**total)
    bad = [f"{f}: {r['status']}" for f, r in res.items() if "status" in r]
    bad += [f"{f}::{b}" for f, r in res.items() for b in r.get("failed", [])]
    bad += [f"{f}: pytest exit code {r['exit_code']}" for f, r in res.items()
            if "status" not in r and not r.get("failed") and r["exit_code"] not in (0, 5)]
    if bad:
        s.fail("; ".join(bad)[:2000])


# ---------------------------------------------------------------------------------- bench

FANOUTS, BATCH = [15, 10, 5], 1024
SIM_FANOUTS, SIM_BATCH = [3, 2], 4


class _Counter:
    """The two methods of an exchanger :class:`CudaHop` uses, counted (one process)."""

    def __init__(self) -> None:
        self.transfers = {"h2d": 0, "d2h": 0}

    def h2d(self, t, device):
        self.transfers["h2d"] += 1
        return t.to(device, non_blocking=True)

    def d2h(self, t):
        self.transfers["d2h"] += 1
        return t.cpu()


def _graph(scale: int, device) -> tuple:
    """R-MAT ``scale`` with edge factor 16: ``(CSRGraph on the host, (indptr, indices,
    edge_ids) on device or None)``. The edges are drawn on every core; on a GPU the CSR is
    sorted there (a stable sort by destination: rows in canonical order, edge ids the positions
    in the edge list, the CSR of :meth:`CSRGraph.from_edges`) and copied back once."""
    import torch

    from ...graph.csr import CSRGraph
    from ...graph.rmat import rmat_edges

    name, n = f"rmat:{scale}", 1 << scale
    src, dst = rmat_edges(scale, edge_factor=16, seed=0)
    if device.type != "cuda":
        return CSRGraph.from_edges(src, dst, n, name=name), None
    s_d, d_d = torch.from_numpy(src).to(device), torch.from_numpy(dst).to(device)
    del src, dst
    order = torch.sort(d_d, stable=True).indices
    indices, eids = s_d[order], order
    del s_d, order
    indptr = torch.zeros(n + 1, dtype=torch.int64, device=device)
    torch.cumsum(torch.bincount(d_d, minlength=n), 0, out=indptr[1:])
    del d_d
    g = CSRGraph(indptr=indptr.cpu().numpy(), indices=indices.cpu().numpy(),
                 edge_ids=eids.cpu().numpy(), name=name)
    return g, (indptr, indices, eids)


def _one_hop(s: Step, g, on_device, device, repeats: int) -> dict:
    """The CUDA kernel on fanout 10 over up to 2**20 seeds against the CPU kernel (bit for bit)
    and a random gather of ``indices`` on the device, the same number of reads."""
    import numpy as np
    import torch

    from ...graph.datasets import nonisolated_nodes
    from ...ops import cpu
    from ...ops.cuda import sample_neighbors_cuda
    from .result import compare, quiet_wraparound

    seeds = nonisolated_nodes(g)
    n = 32 if s.simulate else min(seeds.size, 1 << 20)
    rows = np.random.default_rng(1).permutation(seeds)[:n].astype(np.int64)
    keys = (np.arange(n, dtype=np.int64) // BATCH) * 7919 + 5
    t0 = time.perf_counter()
    arrays = on_device or [torch.from_numpy(np.array(a)).to(device)
                           for a in (g.indptr, g.indices, g.edge_ids)]
    r_d, k_d = (torch.from_numpy(a).to(device) for a in (rows, keys))
    _sync()
    out = {"graph": f"{g.name} ({g.num_nodes:,} nodes, {g.num_edges:,} edges)",
           "seeds": int(n), "fanout": 10, "to_device_s": time.perf_counter() - t0}

    def gpu():
        return sample_neighbors_cuda(*arrays, r_d, r_d, k_d, 7, 0, 10, False)

    def host():
        return cpu.sample_neighbors(g.indptr, g.indices, g.edge_ids, rows, rows, keys, 7, 0, 10,
                                    False)

    with quiet_wraparound():
        t0 = time.perf_counter()
        got = [t.cpu().numpy() for t in gpu()]
        out["first_call_s"] = time.perf_counter() - t0
        want = host()
    diff = compare(want, got, ("counts", "neighbors", "edge_ids"))
    out["equal_to_cpu"] = diff is None
    if diff:
        s.fail(f"{g.name} one-hop CUDA kernel differs from the CPU kernel: {diff}")
    edges = int(want[1].size)
    out["sampled_edges"] = edges
    c_s = median_seconds(host, repeats)
    out["cpu_edges_per_s"] = edges / max(c_s, 1e-12)
    if s.simulate:
        s.skip("one_hop_rates", f"{NO_DEVICE}: the GPU kernel's and the gather's rates")
        return out
    k_s = median_seconds(gpu, repeats, _sync)
    idx = arrays[1]
    pos = torch.randint(0, idx.numel(), (max(edges, 1),), device=device)
    (idx[pos[:1024]].sum()).item()
    g_s = median_seconds(lambda: idx[pos].sum(), repeats, _sync)
    out.update(edges_per_s=edges / k_s, gather_reads_per_s=edges / g_s,
               ratio_vs_gather=(edges / k_s) / (edges / g_s),
               vs_cpu=(edges / k_s) / out["cpu_edges_per_s"])
    return out


def _multi_hop(s: Step, g, device, repeats: int) -> dict:
    """Minibatches per second: the CUDA hop as a rank runs it (one copy each way per hop,
    dedup on the CPU) against the CPU kernel on every core; the batches must be equal."""
    import numpy as np

    from ...bench.timing import MultiHopBench
    from ...distributed.cuda_hop import CudaHop
    from ...graph.datasets import nonisolated_nodes
    from ...sampling.sampler import HopSegments, MultiHopSampler
    from .result import compare, quiet_wraparound

    fanouts, bs = (SIM_FANOUTS, SIM_BATCH) if s.simulate else (FANOUTS, BATCH)
    batches = 2 if s.simulate else 30
    seeds = np.random.default_rng(2).permutation(nonisolated_nodes(g))
    cpu_b = MultiHopBench(g, seeds, fanouts, False, 3, bs, batches)
    ex = _Counter()
    hop = CudaHop((g.indptr, g.indices, g.edge_ids, np.arange(g.num_nodes, dtype=np.int64)),
                   device)

    def hop_fn(h: HopSegments):
        keys, fan, rep = h.per_node()
        return hop(ex, h.nodes, keys, 3, h.hop, fan, rep, h.edge_ids)

    gpu_b = MultiHopBench(g, seeds, fanouts, False, 3, bs, batches)
    with quiet_wraparound():
        gpu_b.sampler = MultiHopSampler(hop_fn, g.num_nodes)
        keys = ("n_id", "edge_index", "e_id", "num_sampled_nodes", "num_sampled_edges")
        for i in range(min(3, gpu_b.n)):
            (a,) = cpu_b.sampler.sample([cpu_b.reqs[i]])
            (b,) = gpu_b.sampler.sample([gpu_b.reqs[i]])
            diff = compare([np.asarray(getattr(a, k)) for k in keys],
                           [np.asarray(getattr(b, k)) for k in keys], keys)
            if diff:
                s.fail(f"{g.name} multi-hop batch {i}: CUDA hop differs from the CPU: {diff}")
                break
        out = {"graph": g.name, "fanouts": fanouts, "batch_size": bs, "batches": cpu_b.n,
               "equal_to_cpu": diff is None if gpu_b.n else None}
        for _ in range(repeats):
            cpu_b.run_once()
        c = cpu_b.result()
        out.update(cpu_batches_per_s=c["batches_per_s"], cpu_edges_per_s=c["per_s"],
                   edges_per_batch=c["edges_per_batch"])
        if s.simulate:
            s.skip("multi_hop_rates", f"{NO_DEVICE}: the CUDA hop's rate")
            return out
        h0 = dict(ex.transfers)
        for _ in range(repeats):
            gpu_b.run_once()
    m = gpu_b.result()
    hops = len(fanouts) * gpu_b.n * repeats
    out.update(gpu_batches_per_s=m["batches_per_s"], gpu_edges_per_s=m["per_s"],
               gpu_vs_cpu=m["batches_per_s"] / c["batches_per_s"],
               h2d_per_hop=(ex.transfers["h2d"] - h0["h2d"]) / hops,
               d2h_per_hop=(ex.transfers["d2h"] - h0["d2h"]) / hops)
    return out


def bench(s: Step) -> None:
    import numba
    import torch

    from ...system.gpu import simulator_enabled
    from ...system.runtime import set_threads

    threads = set_threads(numba.config.NUMBA_NUM_THREADS)
    device = torch.device("cpu") if simulator_enabled() else torch.device("cuda", 0)
    scales = [7] if s.simulate else [22, 23, 24]
    repeats = 1 if s.simulate else 5
    s.put(threads=threads, device=str(device), one_hop={}, multi_hop=None)
    for i, scale in enumerate(scales):
        if i and s.left() < 12 * 2 ** (scale - 22):  # a larger graph would not finish in time
            s.skip(f"rmat:{scale}", f"not started: {s.left():.0f}s left in the step")
            continue
        t0 = time.perf_counter()
        g, on_device = _graph(scale, device)
        gen_s = time.perf_counter() - t0
        r = _one_hop(s, g, on_device, device, repeats)
        r["generate_s"] = gen_s
        s.out["figures"]["one_hop"][g.name] = r
        s.save()
        if i == 0:
            s.put(multi_hop=_multi_hop(s, g, device, 1 if s.simulate else 3))
        del g, on_device
        if device.type == "cuda":
            torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------- train


def _train_loop(s: Step, cfg, placement: str, steps: int, pdir) -> dict:
    """One placement: service, loader, GraphSAGE under DDP, ``steps`` optimizer steps."""
    import numpy as np
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    from ...distributed.service import SamplingService
    from ...graph.partition_io import load_partition
    from ...graph.permute import node_features
    from ...loaders.neighbor import DistNeighborLoader
    from ...train.model import GraphSAGE
    from ...train.setup import make_optimizer, split_ids

    dev = torch.device("cuda", torch.cuda.current_device()) if cfg.runtime.device == "cuda" \
        else torch.device("cpu")
    part = load_partition(pdir, 0, 1)
    d, sm = cfg.dataset, cfg.sampler
    service = SamplingService(part, seed=sm.seed, placement=placement, device=dev)
    out: dict = {"placement": placement}
    try:
        table = service.features.table
        out["table_device"] = str(table.device)
        out["table_pinned"] = bool(table.is_pinned()) if table.device.type == "cpu" else None
        if placement == "pinned" and not out["table_pinned"]:
            s.fail("placement pinned: the feature table is not page-locked")
        if placement == "device" and table.device.type != "cuda":
            s.fail(f"placement device: the feature table is on {table.device}")
        ids = split_ids(int(part.num_nodes), d.split, d.split_seed)
        loader = DistNeighborLoader(service, ids["train"], sm.fanouts, sm.batch_size,
                                    shuffle=True, seed=sm.seed, prefetch=sm.prefetch)
        torch.manual_seed(0)
        classes = d.num_classes
        model = GraphSAGE(d.feature_dim, cfg.model.hidden, classes, len(sm.fanouts)).to(dev)
        model = DDP(model, device_ids=[dev.index] if dev.type == "cuda" else None)
        opt = make_optimizer(model.parameters(), cfg.optimizer)
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(dev)
        h2d = done = warm = 0
        bad = None
        t0 = time.perf_counter()
        epoch = 0
        while done < steps:
            loader.set_epoch(epoch)
            for b in loader:
                if done < 3 and bad is None:  # the rows the store served are the generator's
                    nid = torch.as_tensor(b.n_id).cpu().numpy()
                    want = node_features(nid, d.feature_dim, d.seed, classes)
                    if not np.array_equal(b.x.cpu().numpy(), want):
                        bad = f"batch {done}: features differ from the generated rows"
                moved = [t for t in (b.x, b.edge_index, b.y) if t.device != dev]
                h2d += sum(t.numel() * t.element_size() for t in moved)
                out_ = model(b.x.to(dev), b.edge_index.to(dev))[: b.batch_size]
                loss = torch.nn.functional.cross_entropy(out_, b.y[: b.batch_size].to(dev))
                opt.zero_grad()
                loss.backward()
                opt.step()
                done += 1
                if done == 5:  # the first steps compile kernels and fill the pools
                    _sync()
                    t0, warm = time.perf_counter(), done
                if done >= steps or s.left() < 10:
                    break
            epoch += 1
            if s.left() < 10:
                break
        _sync()
        wall = time.perf_counter() - t0
        timed = done - warm
        out.update(steps=done, timed_steps=timed, steps_per_s=timed / max(wall, 1e-9),
                   h2d_bytes_per_step=h2d / max(done, 1), last_loss=float(loss),
                   features_equal=bad is None)
        ex = getattr(service.sampler, "ex", None)
        if ex is not None:
            out["exchanger_copies_per_step"] = {k: v / max(done, 1)
                                                for k, v in ex.transfers.items()}
        if dev.type == "cuda":
            out["gpu_peak_allocated_bytes"] = int(torch.cuda.max_memory_allocated(dev))
            out["gpu_peak_reserved_bytes"] = int(torch.cuda.max_memory_reserved(dev))
        if bad:
            s.fail(f"placement {placement}: {bad}")
        if done < steps:
            s.fail(f"placement {placement}: {done} of {steps} steps before the deadline")
    finally:
        service.shutdown()
    return out


def train(s: Step) -> None:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="mnmg-gpu-check-", ignore_cleanup_errors=True) as tmp:
        _train(s, tmp)  # the partition: not part of the report


def _train(s: Step, tmp: str) -> None:
    import torch.distributed as dist

    from ...config import load_config
    from ...train.setup import ensure_partitions, start_rank

    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                "MASTER_PORT"):
        os.environ.pop(var, None)  # a world of one over an in-process store
    if s.simulate:
        size = ["dataset.name=rmat:8", "sampler.fanouts=[3,2]", "sampler.batch_size=16",
                "runtime.backend=gloo", "runtime.device=cpu"]
        placements, steps = ["host"], 6
        s.skip("nccl", f"{NO_DEVICE}: gloo on the CPU stands in for NCCL, host placement only")
    else:
        size = ["dataset.name=rmat:18", "sampler.fanouts=[15,10,5]", "sampler.batch_size=1024",
                "runtime.backend=nccl", "runtime.device=cuda"]
        placements, steps = ["pinned", "device"], 200
    cfg = load_config(None, size + [
        "dataset.feature_dim=128", "dataset.num_classes=8", "dataset.undirected=true",
        "dataset.split=[0.9,0.05,0.05]", "model.hidden=128", "sampler.prefetch=4",
        f"output.dir={tmp}", "runtime.threads_per_rank=null"])
    t0 = time.perf_counter()
    env, device = start_rank(cfg)
    try:
        pdir = ensure_partitions(cfg, env.rank, env.world_size)
        s.put(backend=str(dist.get_backend()), device=str(device), dataset=cfg.dataset.name,
              fanouts=cfg.sampler.fanouts, batch_size=cfg.sampler.batch_size,
              feature_dim=cfg.dataset.feature_dim, setup_s=time.perf_counter() - t0,
              placements={})
        for p in placements:
            s.out["figures"]["placements"][p] = _train_loop(s, cfg, p, steps, pdir)
            s.save()
    finally:
        dist.destroy_process_group()


STEPS = {"versions": versions, "selfcheck": selfcheck, "gpu_tests": gpu_tests, "bench": bench,
         "train": train}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("step", choices=sorted(STEPS))
    p.add_argument("--result", required=True, type=Path)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--simulate", action="store_true")
    a = p.parse_args(argv)
    s = Step(a.result, a.simulate, a.seconds)
    s.save()
    inject = dict((x.split(":") + [""])[:2] for x in os.environ.get(INJECT_ENV, "").split(","))
    if inject.get(a.step) == "hang":
        time.sleep(3600)
    if a.step in inject:
        raise RuntimeError(f"injected failure of step {a.step} ({INJECT_ENV}, tests only)")
    STEPS[a.step](s)
    s.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
