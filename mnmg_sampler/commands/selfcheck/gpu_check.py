"""``launch/gpu_check.sh``: every GPU claim checked and measured in one short run.

``python -m mnmg_sampler.commands.selfcheck.gpu_check --out DIR [--simulate] [--budget S]`` runs
the steps of :mod:`.gpu_steps`, each in its own process with its own deadline, so a step that
fails, crashes or hangs cannot stop the others. The report's keys (:data:`REPORT_KEYS`) and
statuses (:data:`STATUSES`): docs/gpu.md#the-projects-own-gpu-run-launchgpu_checksh. The runner
imports nothing heavy (no torch), so a broken CUDA install cannot take the report down with it.
Exit code 0 when no step failed or timed out, 1 otherwise.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from ...system.console import fmt_count
from .environment import nvidia_smi

ROOT = Path(__file__).resolve().parents[3]
FORMAT_NAME = "mnmg-sampler-gpu-check/1"
REPORT_KEYS = ("format", "date", "mode", "command", "host", "budget_s", "seconds", "verdict",
               "versions", "steps", "figures", "never_run_on_gpu")
STEP_KEYS = ("status", "seconds", "timeout_s", "error", "figures", "skipped_parts")
PASS, FAIL, SKIPPED, TIMEOUT = "pass", "fail", "skipped", "timeout"
STATUSES = (PASS, FAIL, SKIPPED, TIMEOUT)
#: (step, its own time limit in seconds on a GPU); the sum is the default budget
STEPS = (("versions", 20), ("selfcheck", 90), ("gpu_tests", 80), ("bench", 95), ("train", 60))
BUDGET_S = float(sum(t for _, t in STEPS))
SIM_TIMEOUT_S = 60.0  # per step in --simulate mode (tiny sizes)

#: Each GPU claim and the steps that must pass on a GPU for it to leave the list.
CLAIMS = {
    "CUDA uniform and weighted kernels bit-identical to the CPU kernels on a device":
        ("selfcheck", "gpu_tests"),
    "typed CUDA kernel bit-identical to the typed CPU kernel on a device": ("selfcheck",
                                                                           "gpu_tests"),
    "temporal CUDA kernel bit-identical to the temporal CPU kernel on a device": ("gpu_tests",),
    "kernel launch path: external_stream, as_cuda_array(sync=False), gpus[i] context":
        ("selfcheck", "bench"),
    "CUDA kernels compiled to PTX and launched on a device": ("gpu_tests",),
    "Numba and CuPy allocations in PyTorch's caching allocator": ("selfcheck",),
    "expandable_segments in force as configured": ("selfcheck",),
    "CUDA hop of a rank: one copy each way per hop, batches equal to the CPU's": ("bench",),
    "one-hop CUDA kernel rate against the GPU's random-gather rate": ("bench",),
    "multi-hop minibatches/s with the CUDA hop against the CPU kernel": ("bench",),
    "training over NCCL (one rank): steps/s, GPU memory peak, host-to-device bytes": ("train",),
    "features.placement pinned and device serving the right rows": ("train",),
}
NOT_COVERED = ("NCCL all-to-all between ranks (exchange lines need torchrun with 2+ GPUs)",
               "bit-packing (CPU only: no GPU twin)")


def _step(name: str, out: Path, simulate: bool, timeout: float) -> dict:
    """Run one step in its own process; its record (never raises)."""
    res = out / "steps" / f"{name}.json"
    log = out / "steps" / f"{name}.log"
    cmd = [sys.executable, "-m", "mnmg_sampler.commands.selfcheck.gpu_steps", name,
           "--result", str(res), "--seconds", f"{timeout:.0f}"] + (["--simulate"] if simulate
                                                                     else [])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    if simulate:
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    else:
        env.pop("NUMBA_ENABLE_CUDASIM", None)
    t0 = time.monotonic()
    rec = {"status": FAIL, "seconds": None, "timeout_s": round(timeout), "error": None,
           "figures": {}, "skipped_parts": {}}
    with open(log, "w") as f:
        p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT,
                             start_new_session=True)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill(p)
            rc = None
    rec["seconds"] = round(time.monotonic() - t0, 2)
    if res.is_file():
        try:
            got = json.loads(res.read_text())
            rec.update({k: got[k] for k in ("figures", "skipped_parts") if k in got})
            rec["status"], rec["error"] = got.get("status", PASS), got.get("error")
        except (OSError, ValueError) as e:
            rec["error"] = f"unreadable result {res.name}: {e}"
    if rc is None:
        rec["status"] = TIMEOUT
        rec["error"] = f"stopped after {timeout:.0f}s (its time limit); see steps/{log.name}"
    elif rc != 0:
        rec["status"] = FAIL
        rec["error"] = f"exit code {rc}: {_last_error(log)}"
    return rec


def _kill(p: subprocess.Popen) -> None:
    """The step's whole process group (its own pytest or torch children too)."""
    import signal

    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        p.kill()
    p.wait()


def _last_error(log: Path) -> str:
    """The log's last line, and where in the package it was raised (the report may be all that
    comes back from the GPU machine: the first run's said only "No backend type ...")."""
    lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    frames = [ln for ln in lines if ln.startswith("File ") and "mnmg_sampler" in ln]
    where = ""
    if frames:  # relative to the package: no path of the machine in the report
        where = f" (raised under {frames[-1][frames[-1].rfind('mnmg_sampler'):][:200]})"
    return (" ".join(lines[-1:])[:500] + where) or "no output"


def _headline(steps: dict) -> dict:
    """The numbers a reader looks for first, taken from the steps' figures."""
    def get(step, *path):
        v = steps.get(step, {}).get("figures", {})
        for k in path:
            v = v.get(k) if isinstance(v, dict) else None
        return v

    one = get("bench", "one_hop") or {}
    out = {"one_hop": {name: {k: r.get(k) for k in ("edges_per_s", "gather_reads_per_s",
                                                      "ratio_vs_gather", "cpu_edges_per_s",
                                                      "equal_to_cpu")}
                       for name, r in one.items()}}
    mh = get("bench", "multi_hop") or {}
    out["multi_hop"] = {k: mh.get(k) for k in ("graph", "gpu_batches_per_s", "cpu_batches_per_s",
                                               "gpu_vs_cpu", "equal_to_cpu")}
    out["train"] = {p: {k: r.get(k) for k in ("steps_per_s", "gpu_peak_allocated_bytes",
                                              "h2d_bytes_per_step", "features_equal")}
                    for p, r in (get("train", "placements") or {}).items()}
    out["selfcheck_cuda_uniform"] = get("selfcheck", "kernel.cuda.uniform")
    return out


def never_run(steps: dict, simulate: bool) -> list[str]:
    """The claims not (yet) shown on a GPU: a claim leaves the list once every step it needs
    passed on a real GPU."""
    left = [c for c, need in CLAIMS.items()
            if simulate or any(steps.get(s, {}).get("status") != PASS for s in need)]
    return left + list(NOT_COVERED)


def run(out: Path, simulate: bool, budget: float, command: str) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    (out / "steps").mkdir(exist_ok=True)
    start = time.monotonic()
    deadline = start + budget
    steps: dict = {}
    for name, own in STEPS:
        left = deadline - time.monotonic()
        if left < 5:
            steps[name] = {"status": SKIPPED, "seconds": None, "timeout_s": 0,
                           "error": f"not started: the {budget:.0f}s budget was spent",
                           "figures": {}, "skipped_parts": {}}
            continue
        limit = min(SIM_TIMEOUT_S if simulate else own, left)
        print(f"gpu_check: {name} (limit {limit:.0f}s) ...", flush=True)
        steps[name] = _step(name, out, simulate, limit)
        r = steps[name]
        print(f"gpu_check: {name}: {r['status']} in {r['seconds']}s"
              + (f": {r['error']}" if r["error"] else ""), flush=True)
    bad = [n for n, r in steps.items() if r["status"] in (FAIL, TIMEOUT)]
    report = {
        "format": FORMAT_NAME,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "mode": "simulate" if simulate else "gpu", "command": command,
        "host": platform.node(), "budget_s": budget,
        "seconds": round(time.monotonic() - start, 1),
        "verdict": FAIL if bad else PASS,
        "versions": dict(steps["versions"]["figures"].get("versions", {}),
                         nvidia_smi=nvidia_smi("--query-gpu=name,driver_version,memory.total",
                                               "--format=csv,noheader")),
        "steps": steps, "figures": _headline(steps),
        "never_run_on_gpu": never_run(steps, simulate),
    }
    (out / "gpu_check.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "gpu_check.md").write_text(markdown(report))
    return report


def _rate(v) -> str:
    return fmt_count(v) if isinstance(v, (int, float)) else "-"


def markdown(r: dict) -> str:
    """The summary: verdict, versions, one row per step, headline figures, the list."""
    v = r["versions"]
    lines = [f"# GPU check, {r['date']} ({r['mode']})", "",
             f"Verdict **{r['verdict']}** in {r['seconds']}s (budget {r['budget_s']:.0f}s) on "
             f"`{r['host']}`; command `{r['command']}`.", "",
             f"Versions: torch {v.get('torch')} (CUDA {v.get('torch_cuda')}), driver "
             f"{v.get('driver')}, numba {v.get('numba')}, numba-cuda {v.get('numba_cuda')}, "
             f"cupy {v.get('cupy')}; nvidia-smi: {v.get('nvidia_smi')}", "",
             "| step | status | seconds | error / skipped parts |", "| --- | --- | --- | --- |"]
    for name, s in r["steps"].items():
        note = s["error"] or "; ".join(f"{k}: {w}" for k, w in s["skipped_parts"].items())
        note = (note or "").replace("|", "/").replace("\n", " ")[:400]
        lines.append(f"| {name} | {s['status']} | {s['seconds']} | {note} |")
    f = r["figures"]
    lines += ["", "## Figures", "",
              "| one-hop kernel (fanout 10) | GPU edges/s | GPU gather reads/s | kernel / gather "
              "| CPU edges/s | equal to CPU |", "| --- | --- | --- | --- | --- | --- |"]
    for g, o in f["one_hop"].items():
        ratio = o["ratio_vs_gather"]
        lines.append(f"| {g} | {_rate(o['edges_per_s'])} | {_rate(o['gather_reads_per_s'])} | "
                     f"{'-' if ratio is None else f'{ratio:.2f}x'} | "
                     f"{_rate(o['cpu_edges_per_s'])} | {o['equal_to_cpu']} |")
    m = f["multi_hop"]
    lines += ["", f"Multi-hop on {m.get('graph')}: {_rate(m.get('gpu_batches_per_s'))} "
              f"batches/s with the CUDA hop, {_rate(m.get('cpu_batches_per_s'))} with the CPU "
              f"kernel; batches equal: {m.get('equal_to_cpu')}.", ""]
    for p, t in f["train"].items():
        peak = t.get("gpu_peak_allocated_bytes")
        lines.append(f"- training, placement {p}: {_rate(t.get('steps_per_s'))} steps/s, GPU "
                     f"peak {'-' if peak is None else f'{peak / 2**20:,.0f} MiB'}, "
                     f"{_rate(t.get('h2d_bytes_per_step'))}B host-to-device per step, "
                     f"features equal: {t.get('features_equal')}")
    lines += ["", "## Never run on a GPU (after this run)", ""]
    lines += [f"- {c}" for c in r["never_run_on_gpu"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, type=Path, help="directory for the report")
    p.add_argument("--simulate", action="store_true",
                   help="no GPU: tiny sizes on the CPU under Numba's CUDA simulator")
    p.add_argument("--budget", type=float, default=BUDGET_S,
                   help=f"seconds for every step together (default: {BUDGET_S:.0f})")
    a = p.parse_args(argv)
    command = "gpu_check " + " ".join(argv if argv is not None else sys.argv[1:])
    r = run(a.out, a.simulate, a.budget, command)
    print(f"gpu_check: {r['verdict']} in {r['seconds']}s; wrote {a.out / 'gpu_check.json'} and "
          f"{a.out / 'gpu_check.md'}", flush=True)
    return 1 if r["verdict"] == FAIL else 0


if __name__ == "__main__":
    sys.exit(main())
