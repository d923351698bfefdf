"""Rank 0's account of a training or sampling run: console lines, progress bar, metrics.jsonl.

The console gets one line per epoch (loss, accuracy, batches/s, sampled edges/s, time) and, every
``training.log_every`` steps, a step line; a tqdm bar only when stderr is a terminal (under
torchrun ``--tee`` or in a log file every redraw would become a new line). ``metrics.jsonl``
receives the same records as JSON lines (``start``, ``step``, ``epoch``, ``final``, ``service``),
appended across resumes; ``mnmg-sampler plot`` draws them.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from ..system.console import fmt_count, stderr_is_tty


def epoch_line(rec: dict, epochs: int) -> str:
    """One console line for an ``epoch`` record (0-based ``epoch``, shown 1-based)."""
    parts = [f"epoch {rec['epoch'] + 1:>{len(str(epochs))}}/{epochs}"]
    if "train_loss" in rec:
        parts += [f"loss {rec['train_loss']:.4f}", f"acc {rec['train_acc']:.4f}"]
        if "val_acc" in rec:
            parts.append(f"val_acc {rec['val_acc']:.4f}")
    else:
        parts += [f"{rec['batches']:,} batches", f"{fmt_count(rec['sampled_edges'])} edges"]
    parts += [f"{rec['batches_per_s']:.1f} batches/s",
              f"{fmt_count(rec['edges_per_s'])} edges/s", f"{rec['seconds']:.1f}s"]
    return "  ".join(parts)


def step_line(rec: dict, epochs: int) -> str:
    """One console line for a ``step`` record (rank 0's own batches since the last step line)."""
    parts = [f"epoch {rec['epoch'] + 1:>{len(str(epochs))}}/{epochs}",
             f"step {rec['step']}/{rec['steps']}"]
    if "loss" in rec:
        parts += [f"loss {rec['loss']:.4f}", f"acc {rec['acc']:.4f}"]
    parts += [f"{rec['batches_per_s']:.1f} batches/s (rank 0)"]
    return "  ".join(parts)


def service_line(stats: dict) -> str:
    """The sampling service's counters in one readable line (the full set is in metrics.jsonl)."""
    g = stats.get
    parts = [f"{g('rounds', 0):,} rounds ({g('idle_rounds', 0):,} idle)",
             f"{g('requests', 0):,} requests ({g('requests_per_round', 0.0):.2f} per round)",
             f"{fmt_count(g('kernel_edges', 0))} edges sampled"]
    if "t_kernel" in stats:
        parts.append(f"kernel {g('t_kernel'):.2f}s")
    if "t_exchange" in stats:
        parts.append(f"exchange {g('t_exchange'):.2f}s "
                     f"({g('bytes_exchanged', 0) / 2**20:,.1f} MiB)")
    if "t_wait" in stats:
        parts.append(f"waiting {g('t_wait'):.2f}s ({g('t_wait_rows', 0.0):.2f}s for rows)")
    shared = g("shared_topology") or {}
    if shared.get("enabled"):  # the shared topology (every rank on this host)
        parts.append(f"shared topology ({shared.get('agreement', 'gloo')} agreement)")
    hosts = g("placement") or []
    if len(hosts) > 1:  # what each host holds of the others (distributed/fit.py)
        parts.append(f"placement ({hosts[0].get('from', 'decided')}) " + "; ".join(
            f"host {h['host']}: topology {h['topology']}, rows {h['rows']}"
            + (f" ({h['cache_rows']:,} cached)" if h["cache_rows"] else "") for h in hosts))
    return ", ".join(parts)


class RunReport:
    """Console and metrics of one run, on every rank (only rank 0 prints or writes); ``epoch``
    takes a record already reduced over ranks."""

    def __init__(self, rank: int, epochs: int, steps_per_epoch: int, log_every: int = 0,
                 progress: bool = True, metrics_path: Path | None = None) -> None:
        self.on = rank == 0
        self.epochs = epochs
        self.steps = steps_per_epoch
        self.log_every = log_every
        self.progress = progress
        self.metrics_path = metrics_path if self.on else None
        if self.metrics_path is not None:
            self.metrics_path.parent.mkdir(parents=True, exist_ok=True)
        self.bar = None
        self._window_reset()

    def open_bar(self, first_epoch: int = 0) -> None:
        """A tqdm bar over the remaining steps, on rank 0 and only on a terminal."""
        if not (self.on and self.progress and stderr_is_tty()):
            return
        try:
            from tqdm import tqdm
        except ImportError:
            return
        self.bar = tqdm(total=max(0, self.epochs - first_epoch) * self.steps, unit="batch",
                        dynamic_ncols=True, mininterval=0.5, leave=False)

    def _window_reset(self) -> None:
        self._w = {"loss": 0.0, "correct": 0.0, "seeds": 0, "batches": 0}
        self._t = time.perf_counter()

    def write(self, **rec: Any) -> None:
        """One JSON line of ``metrics.jsonl`` (rank 0; appended across resumes)."""
        if self.metrics_path is not None:
            with open(self.metrics_path, "a") as f:
                f.write(json.dumps(rec, sort_keys=True, default=float) + "\n")

    def print(self, line: str) -> None:
        """A console line from rank 0 (above the bar when there is one)."""
        if not self.on:
            return
        if self.bar is not None:
            self.bar.write(line)
        else:
            print(line, flush=True)

    def start(self, **rec: Any) -> None:
        self.write(event="start", **rec)

    def epoch_start(self) -> None:
        self._window_reset()

    def step(self, epoch: int, step: int, loss: float | None = None, correct: float = 0.0,
             seeds: int = 0) -> None:
        """After step ``step`` (1-based) of ``epoch``: bar, and every ``log_every`` steps a line.

        ``loss`` is the batch's mean loss over ``seeds`` seeds (None in sample mode).
        """
        if not self.on:
            return
        w = self._w
        w["batches"] += 1
        if loss is not None:
            w["loss"] += loss * seeds
            w["correct"] += correct
            w["seeds"] += seeds
        if self.bar is not None:
            self.bar.update(1)
        if not self.log_every or step % self.log_every or step >= self.steps:
            return  # the epoch line covers the last step
        dt = max(time.perf_counter() - self._t, 1e-9)
        rec: dict[str, Any] = {"event": "step", "epoch": epoch, "step": step, "steps": self.steps,
                               "global_step": epoch * self.steps + step,
                               "batches_per_s": w["batches"] / dt}
        if w["seeds"]:
            rec.update(loss=w["loss"] / w["seeds"], acc=w["correct"] / w["seeds"])
        self.write(**rec)
        if self.bar is not None:
            if "loss" in rec:
                self.bar.set_postfix(loss=f"{rec['loss']:.3f}", refresh=False)
        else:
            self.print(step_line(rec, self.epochs))
        self._window_reset()

    def epoch(self, rec: dict) -> None:
        """The epoch's record (``event: epoch``): metrics.jsonl and one console line."""
        if not self.on:
            return
        self.write(**rec)
        self.print(epoch_line(rec, self.epochs))

    def final(self, rec: dict, line: str) -> None:
        if not self.on:
            return
        self.close()
        self.write(**rec)
        print(line, flush=True)

    def service(self, stats: dict) -> None:
        """The sampling service's counters: a readable log line, the numbers in metrics.jsonl."""
        if not self.on:
            return
        self.write(event="service", **stats)
        self.print(f"sampling service (rank 0): {service_line(stats)}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def epoch_record(epoch: int, seconds: float, batches: float, edges: float, **extra: Any) -> dict:
    """An ``epoch`` record: counts over all ranks and their rates over the epoch's seconds."""
    dt = max(seconds, 1e-9)
    return {"event": "epoch", "epoch": epoch, "seconds": seconds, "batches": int(batches),
            "sampled_edges": int(edges), "batches_per_s": batches / dt, "edges_per_s": edges / dt,
            **extra}
