"""Compare policy runs and write them out: CSV curves, per-worker CSV, JSON summary, PNG plot.

The headline figure is the time each policy needs to reach BSP's final accuracy (BSP's last
``FINAL_POINTS`` evaluations averaged, so that one lucky evaluation does not set the bar),
measured per repeat and reported as the median over repeats.
"""
from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path
from collections.abc import Sequence
from typing import Any

import numpy as np

from hpcbsp.elastic.runlog import staleness_summary

from .experiment import PolicyRun

__all__ = ["time_to_reach", "final_accuracy", "compare", "format_table", "write_outputs", "FINAL_POINTS"]

FINAL_POINTS = 3


def time_to_reach(curve: Sequence[tuple[float, float, float, int]], target: float) -> float | None:
    """First time at which the accuracy is at least ``target`` (None if never).

    A relative 1e-9 slack absorbs rounding in ``target``: the mean of equal accuracies can
    exceed them by an ulp.
    """
    for t, acc, _, _ in curve:
        if acc >= target - 1e-9 * abs(target):
            return t
    return None


def final_accuracy(curve: Sequence[tuple[float, float, float, int]]) -> float:
    """Mean accuracy of the last :data:`FINAL_POINTS` evaluations."""
    tail = [acc for _, acc, _, _ in curve[-FINAL_POINTS:]]
    return float(np.mean(tail)) if tail else float("nan")


def _median(values: list[float | None]) -> float | None:
    # A policy that did not reach the target in some repeat counts as infinitely slow there.
    if not values:
        return None
    med = statistics.median([np.inf if v is None else v for v in values])
    return None if not np.isfinite(med) else float(med)


def compare(runs: list[PolicyRun]) -> dict[str, dict[str, Any]]:
    """Per mode and policy label: final accuracy, time to BSP's final accuracy, waits, staleness.

    Returns ``{mode: {label: {...}}}``; times are medians over the repeats.
    """
    out: dict[str, dict[str, Any]] = {}
    for mode in sorted({r.mode for r in runs}):
        in_mode = [r for r in runs if r.mode == mode]
        targets = {r.repeat: final_accuracy(r.curve) for r in in_mode if r.policy == "bsp"}
        table: dict[str, Any] = {}
        for label in dict.fromkeys(r.label for r in in_mode):
            mine = [r for r in in_mode if r.label == label]
            reach = [time_to_reach(r.curve, targets[r.repeat]) for r in mine if r.repeat in targets]
            table[label] = {
                "policy": mine[0].policy,
                "repeats": len(mine),
                "final_accuracy": statistics.median(final_accuracy(r.curve) for r in mine),
                "bsp_final_accuracy": statistics.median(targets.values()) if targets else None,
                "time_to_bsp_final_s": _median(reach) if targets else None,
                "reached_in": sum(v is not None for v in reach),
                "updates": statistics.median(r.log.updates for r in mine),
                "mean_wait_fraction": statistics.median(
                    float(np.mean(r.log.wait_s) / max(r.log.duration_s, 1e-12)) for r in mine),
                "staleness_mean": statistics.median(
                    staleness_summary(r.log.staleness).get("mean", 0.0) for r in mine),
                "staleness_max": max(staleness_summary(r.log.staleness).get("max", 0) for r in mine),
            }
        out[mode] = table
    return out


def format_table(comparison: dict[str, dict[str, Any]]) -> str:
    """The comparison as aligned text, one block per mode."""
    lines = []
    for mode, table in comparison.items():
        bsp = next((v["bsp_final_accuracy"] for v in table.values() if v["bsp_final_accuracy"] is not None), None)
        head = f"[{mode}] time to reach BSP's final accuracy"
        lines.append(head + (f" ({bsp:.3f})" if bsp is not None else " (BSP not run)"))
        lines.append(f"  {'policy':24s} {'final acc':>9s} {'t->BSP final':>12s} {'vs BSP':>7s} "
                     f"{'updates':>8s} {'wait %':>7s} {'stale mean/max':>14s}")
        bsp_time = next((v["time_to_bsp_final_s"] for v in table.values() if v["policy"] == "bsp"), None)
        for label, v in table.items():
            t = v["time_to_bsp_final_s"]
            t_txt = "never" if t is None else f"{t:.2f} s"
            ratio = f"{bsp_time / t:.2f}x" if t and bsp_time else "-"
            lines.append(f"  {label:24s} {v['final_accuracy']:9.3f} {t_txt:>12s} {ratio:>7s} "
                         f"{v['updates']:8.0f} {100 * v['mean_wait_fraction']:6.1f}% "
                         f"{v['staleness_mean']:8.2f}/{v['staleness_max']:<5d}")
    return "\n".join(lines)


def write_outputs(out_dir: Path, runs: list[PolicyRun], config: dict[str, Any], *,
                  slowdown: tuple[float, ...], plot: bool = True) -> tuple[list[Path], str | None]:
    """Write ``curves.csv``, ``workers.csv``, ``pushes.csv``, ``summary.json`` and ``accuracy.png``.

    Returns the paths written and, when the plot was skipped, why.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    curves = out_dir / "curves.csv"
    with curves.open("w", newline="") as fh:
        wr = csv.writer(fh)
        wr.writerow(["mode", "policy", "repeat", "time_s", "accuracy", "loss", "updates"])
        for r in runs:
            for t, acc, loss, upd in r.curve:
                wr.writerow([r.mode, r.label, r.repeat, f"{t:.6f}", f"{acc:.6f}", f"{loss:.6f}", upd])
    written.append(curves)
    workers = out_dir / "workers.csv"
    with workers.open("w", newline="") as fh:
        wr = csv.writer(fh)
        wr.writerow(["mode", "policy", "repeat", "worker", "slowdown", "pushes", "applied", "dropped",
                     "wait_s", "wait_fraction", "worker_blocked_s"])
        for r in runs:
            log = r.log
            for w in range(log.n_workers):
                blocked = "" if r.worker_blocked_s is None else f"{r.worker_blocked_s[w]:.6f}"
                wr.writerow([r.mode, r.label, r.repeat, w, slowdown[w], log.pushes[w], log.applied[w],
                             log.dropped[w], f"{log.wait_s[w]:.6f}",
                             f"{log.wait_s[w] / max(log.duration_s, 1e-12):.6f}", blocked])
    written.append(workers)
    pushes = out_dir / "pushes.csv"
    with pushes.open("w", newline="") as fh:
        wr = csv.writer(fh)
        wr.writerow(["mode", "policy", "repeat", "worker", "time_s"])
        for r in runs:
            wr.writerows([r.mode, r.label, r.repeat, w, f"{t:.6f}"] for w, t in r.log.push_times)
    written.append(pushes)
    summary = out_dir / "summary.json"
    payload = {
        "config": config,
        "comparison": compare(runs),
        "runs": [{"mode": r.mode, "policy": r.label, "repeat": r.repeat, **r.log.summary(),
                  "policy_stats": r.policy_stats, "worker_blocked_s": r.worker_blocked_s,
                  "resumed_at": r.resumed_at} for r in runs],
    }
    summary.write_text(json.dumps(payload, indent=2, default=_jsonable))
    written.append(summary)
    skipped = None
    if plot:
        png = out_dir / "accuracy.png"
        skipped = _plot(png, runs)
        if skipped is None:
            written.append(png)
    return written, skipped


def _jsonable(x: Any) -> Any:
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, Path):
        return str(x)
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


def _plot(path: Path, runs: list[PolicyRun]) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (`pip install 'hpcbsp[plot]'`): plot skipped"
    modes = sorted({r.mode for r in runs})
    fig, axes = plt.subplots(len(modes), 2, figsize=(12, 4.2 * len(modes)), squeeze=False)
    for row, mode in zip(axes, modes):
        first = [r for r in runs if r.mode == mode and r.repeat == 0]
        for r in first:
            t = [p[0] for p in r.curve]
            row[0].plot(t, [p[1] for p in r.curve], label=r.label)
        row[0].set_xlabel("virtual time (s)" if mode == "simulated" else "wall-clock time (s)")
        row[0].set_ylabel("test accuracy")
        row[0].set_title(f"{mode}: accuracy vs time")
        row[0].legend(fontsize=8)
        width = 0.8 / max(len(first), 1)
        for k, r in enumerate(first):
            x = np.arange(r.log.n_workers) + k * width
            row[1].bar(x, 100 * r.log.wait_s / max(r.log.duration_s, 1e-12), width, label=r.label)
        row[1].set_xticks(np.arange(first[0].log.n_workers) + 0.4 - width / 2 if first else [])
        row[1].set_xticklabels([str(w) for w in range(first[0].log.n_workers)] if first else [])
        row[1].set_xlabel("worker")
        row[1].set_ylabel("time waiting (%)")
        row[1].set_title(f"{mode}: waiting time per worker")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None
