"""``mnmg-sampler plot RUN_DIR``: draw a run's curves from its metrics.jsonl to a PNG.

Panels: loss (train, validation and rank 0's ``training.log_every`` step losses), accuracy
(train, validation, final test) and throughput (sampled edges/s and batches/s per epoch, over all
ranks; a sampling run has only this one). Needs matplotlib: ``pip install 'mnmg-sampler[plot]'``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..errors import ConfigError, MissingDependencyError

METRICS = "metrics.jsonl"


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "plot", help="draw a run's training curves (metrics.jsonl) to a PNG",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", metavar="RUN_DIR",
                   help="a run's output.dir (holding metrics.jsonl), or the metrics file itself")
    p.add_argument("--out", metavar="PNG", default=None,
                   help="image to write (default: RUN_DIR/curves.png)")
    p.set_defaults(func=run)


def metrics_path(run_dir: str) -> Path:
    """The metrics file of ``run_dir`` (a directory, or the file itself)."""
    p = Path(run_dir)
    path = p / METRICS if p.is_dir() else p
    if not path.is_file():
        raise ConfigError(f"no metrics file at {path}",
                          "there is nothing to plot",
                          "pass a run's output.dir (after `mnmg-sampler train`) or its "
                          "metrics.jsonl")
    return path


def last_run(path: Path) -> list[dict]:
    """The records of the newest run in ``path``: from its last fresh ``start`` (a resumed run's
    ``start`` has ``first_epoch > 0`` and continues the same curves); repeated epochs (a crash
    after an epoch record, then a resume) keep their newest record."""
    recs = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            recs.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path}:{n} is not a JSON line ({e.msg})",
                              "the metrics cannot be read",
                              "pass the metrics.jsonl a run wrote") from e
    starts = [i for i, r in enumerate(recs)
              if r.get("event") == "start" and not r.get("first_epoch")]
    recs = recs[starts[-1]:] if starts else recs
    out: list[dict] = []
    for r in recs:
        if r.get("event") in ("epoch", "step"):
            key = (r["event"], r.get("epoch"), r.get("step"))
            out = [o for o in out if (o.get("event"), o.get("epoch"), o.get("step")) != key]
        out.append(r)
    return out


def plot(recs: list[dict], out: Path, title: str) -> Path:
    """Draw ``recs`` (one run's metrics records) to ``out`` (PNG)."""
    try:
        import matplotlib
    except ImportError as e:
        raise MissingDependencyError("matplotlib is not installed",
                                     "no image of the curves can be drawn",
                                     "pip install 'mnmg-sampler[plot]'") from e
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = sorted((r for r in recs if r.get("event") == "epoch"), key=lambda r: r["epoch"])
    steps = [r for r in recs if r.get("event") == "step" and "loss" in r]
    final = next((r for r in reversed(recs) if r.get("event") == "final"), {})
    if not epochs:
        raise ConfigError("the metrics hold no epoch record yet", "there is nothing to plot",
                          "plot after the first epoch has finished")
    trained = any("train_loss" in r for r in epochs)
    x = [r["epoch"] + 1 for r in epochs]
    ncols = 3 if trained else 1
    fig, axes = plt.subplots(1, ncols, figsize=(5 * ncols, 3.8), squeeze=False)
    axes = list(axes[0])

    def series(key):
        pts = [(r["epoch"] + 1, r[key]) for r in epochs if r.get(key) is not None]
        return [p[0] for p in pts], [p[1] for p in pts]

    if trained:
        ax = axes.pop(0)
        if steps:
            ax.plot([r["epoch"] + r["step"] / r["steps"] for r in steps],
                    [r["loss"] for r in steps], ".", color="0.7", ms=3,
                    label="train (rank 0, every log_every steps)")
        ax.plot(*series("train_loss"), "o-", label="train")
        if any("val_loss" in r for r in epochs):
            ax.plot(*series("val_loss"), "s-", label="validation")
        ax.set(xlabel="epoch", ylabel="loss", title="loss")
        ax.legend()
        ax = axes.pop(0)
        ax.plot(*series("train_acc"), "o-", label="train")
        if any("val_acc" in r for r in epochs):
            ax.plot(*series("val_acc"), "s-", label="validation")
        if "test_acc" in final:
            ax.axhline(final["test_acc"], color="k", ls="--", lw=1,
                       label=f"test (final) {final['test_acc']:.4f}")
        ax.set(xlabel="epoch", ylabel="accuracy", title="accuracy")
        ax.legend()
    ax = axes.pop(0)
    eps = [r.get("edges_per_s", float("nan")) for r in epochs]
    units = ((1e9, "billion "), (1e6, "million "), (1e3, "thousand "))
    scale, unit = next(((v, u) for v, u in units if max(eps, default=0) >= v), (1, ""))
    ax.plot(x, [v / scale for v in eps], "o-", color="C2", label="sampled edges/s")
    ax.set(xlabel="epoch", ylabel=f"{unit}sampled edges/s", title="throughput (all ranks)")
    ax2 = ax.twinx()
    ax2.plot(x, [r.get("batches_per_s", float("nan")) for r in epochs], "s--", color="C3",
             label="batches/s")
    ax2.set_ylabel("batches/s")
    lines = ax.get_lines() + ax2.get_lines()
    ax.legend(lines, [ln.get_label() for ln in lines])
    from matplotlib.ticker import MaxNLocator

    for a in fig.axes:
        a.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.suptitle(title if trained else f"{title}, sampling only")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def run(args: argparse.Namespace) -> int:
    path = metrics_path(args.run)
    recs = last_run(path)
    out = Path(args.out) if args.out else path.parent / "curves.png"
    start = next((r for r in recs if r.get("event") == "start"), {})
    name = start.get("config", {}).get("name", path.parent.name)
    world = start.get("world_size")
    title = f"{name}" + (f" ({world} rank(s))" if world else "")
    plot(recs, out, title)
    print(f"wrote {out}")
    return 0
