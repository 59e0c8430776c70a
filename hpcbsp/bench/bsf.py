"""BSF validation: calibrate at K <= 3, predict T(K), measure K = 1..32 with emulated compute.

    python -m hpcbsp.bench bsf [--workers 1-32] [--calibrate 1,2,3] [--apps jacobi,cimmino]
                               [--exchanges linear,tree] [--n 1000] [--iters 20] [--quick]
                               [--hosts FILE | --launch srun]

Run it **without** mpiexec: it launches one job of max(K) + 1 ranks itself (``HPCBSP_WAIT=yield``
and the MPI's own yield setting, ``MPIR_CVAR_ENABLE_HEAVY_YIELD=1`` for MPICH, so that waiting
ranks give their cores away, :mod:`hpcbsp.util.mpiflavour`): on this machine, or with ``--hosts
FILE`` one rank on each host of FILE (``mpiexec -f FILE -ppn 1`` or Open MPI's equivalent;
through the emulated cluster's launcher when FILE is its host file), or with ``--launch srun``
one task per node of the Slurm allocation (:mod:`hpcbsp.util.jobcommand`).  In that job, for
every app (BSF Jacobi, BSF Cimmino) and exchange (linear, tree):

1. calibration: farm runs at K in ``--calibrate`` (``--repeats`` each) on the first K + 1 ranks,
   the others asleep; the first run measures the Map of the whole list on the master, every
   later run waits exactly that (emulated compute: workers wait the Map's time for their share
   instead of computing; the master's fold, Compute and StopCond, the messages and the syncs are
   real, see :mod:`hpcbsp.farm.emulation`).  The model is made from those runs as ``hpcbsp-cost
   calibrate`` makes it (:func:`hpcbsp.cost.calibrate.model_from_reports`);
2. measurement: one run (``--sweep-repeats``) at every K of ``--workers``;
3. comparison: one line per series with ``T(K) MAPE = X %`` over the measured K and the
   predicted and measured K_max (the argmax of the measured speedup T(1)/T(K); "beyond N" when
   the curve still rises at the last K), and a speedup plot per series.

Everything is a **simulation of compute** and says so.  Targets (issues 17 and 29): MAPE <= 5 % over
K = 1..32, predicted K_max within 15 % of the measured one (or both beyond 32).  Figures are
meaningful only on a machine nobody else is loading.  Outputs: ``--out-dir`` (default
``runs/bench-bsf``): ``measurements.json``, ``validation.csv``, ``speedup-APP-EXCHANGE.png``.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from typing import Any

import numpy as np

from hpcbsp.bench import measuring
from hpcbsp.util.args.checks import check_out_dir
from hpcbsp.util.args.parser import OneLineParser
from hpcbsp.util.args.types import positive_int
from hpcbsp.util.args.vocabulary import add_iters, add_n, add_placement, add_repeats
from hpcbsp.util.choices import EXCHANGES
from hpcbsp.util.jobcommand import JobCommandError, job_command
from hpcbsp.util.mpiflavour import child_env, mpiexec_flavour, root_refusal, timeout_env
from hpcbsp.util.progress import Progress
from hpcbsp.util.progress import child_env as progress_env

APPS = ("jacobi", "cimmino")
#: Relative K_max tolerance of the issue's target.
KMAX_TOLERANCE = 0.15
#: T(K) MAPE target: 10 % (issue 17), tightened to 5 % once the tree and t_0 were in the model (issue 29).
MAPE_TARGET = 5.0
#: A measured T within this of the best is on the curve's flat top (reported beside K_max).
FLAT_TOP = 0.02


# ---------------------------------------------------------------------------------- the MPI job
def _problem(app: str, n: int) -> Any:
    from hpcbsp.apps.bsf.system import diagonally_dominant_system

    if app == "jacobi":
        from hpcbsp.apps.bsf.jacobi import jacobi_problem

        a, b = diagonally_dominant_system(n, 0, 1.5)  # as the app builds it
        return jacobi_problem(a, b, 1e-10)
    from hpcbsp.apps.bsf.cimmino import cimmino_problem

    a, b = diagonally_dominant_system(n, 0, 3.0)
    return cimmino_problem(a, b, 1e-10)


def _idle_until_all(world: Any, nap: float = 0.005) -> None:
    """A barrier on ``world`` polled with naps: ranks outside the current run stay asleep."""
    req = world.Ibarrier()
    while not req.Test():
        time.sleep(nap)


def _run_at(world: Any, k: int, problem: Any, n: int, iters: int, exchange: str, emulation: Any) -> dict[str, Any]:
    """One farm run on world ranks 0..k (K = k workers); its timings on every rank."""
    from mpi4py import MPI

    from hpcbsp.farm import run_farm
    from hpcbsp.runtime import BSP

    sub = world.Split(0 if world.Get_rank() <= k else MPI.UNDEFINED, world.Get_rank())
    timings = None
    if sub != MPI.COMM_NULL:
        try:
            with BSP(sub, wait="yield") as bsp:
                result = run_farm(bsp, problem, np.zeros(n), max_iter=iters, exchange=exchange, emulate=emulation)
                timings = result.timings.as_dict()
        finally:
            sub.Free()
    _idle_until_all(world)
    return world.bcast(timings, root=0)


def measure(args: argparse.Namespace) -> int:
    """Inside the launched job: every run, written to ``measurements.json`` by rank 0."""
    from mpi4py import MPI

    from hpcbsp.farm import FarmEmulation

    world = MPI.COMM_WORLD
    me = world.Get_rank()
    need = max(args.workers + args.calibrate) + 1
    if world.Get_size() < need:
        if me == 0:
            print(f"bench bsf: the job has {world.Get_size()} ranks, {need} needed", file=sys.stderr)
        return 2
    series = []
    runs = len(args.apps) * len(args.exchanges) * (len(args.calibrate) * args.repeats
                                                   + len(args.workers) * args.sweep_repeats)
    show, done = Progress("bench bsf", runs, unit="run", enabled=me == 0), 0
    for app in args.apps:
        problem = _problem(app, args.n)
        for exchange in args.exchanges:
            emulation = FarmEmulation(args.t_map, 0.0) if args.t_map is not None else FarmEmulation()
            calibration: list[dict[str, Any]] = []
            sweep: list[dict[str, Any]] = []
            plan = [("calibration", k) for k in args.calibrate for _ in range(args.repeats)] + \
                   [("sweep", k) for k in args.workers for _ in range(args.sweep_repeats)]
            for what, k in plan:
                t = _run_at(world, k, problem, args.n, args.iters, exchange, emulation)
                if emulation.measured:  # the first run measured the Map: every later one waits that long
                    emulation = FarmEmulation(t["emulated"]["t_map"], t["emulated"]["t_a"])
                (calibration if what == "calibration" else sweep).append(t)
                done += 1
                show(done, f"{app} {exchange} {what} K = {k}: {1e3 * t['seconds_per_iteration']:.3f} ms per iteration")
            series.append({"app": app, "exchange": exchange, "n": args.n, "iterations": args.iters,
                           "emulated": calibration[0]["emulated"], "calibration": calibration, "sweep": sweep})
            world.Barrier()
        del problem
    hosts = world.gather(socket.gethostname(), root=0)
    if me == 0:
        with open(os.path.join(args.out_dir, "measurements.json"), "w") as fh:
            json.dump({"series": series, "ranks": world.Get_size(), "cpus": os.cpu_count(),
                       "hosts": len(set(hosts or []))}, fh)
    return 0


# ---------------------------------------------------------------------------------- the report
def measured_k_max(workers: np.ndarray, seconds: np.ndarray) -> int | None:
    """The least K of largest measured speedup T(1)/T(K) (mean per K); None if it is the last K."""
    ks = np.unique(workers)
    mean = np.array([seconds[workers == k].mean() for k in ks])
    best = int(ks[int(np.argmin(mean))])
    return None if best == int(ks[-1]) and ks.size > 1 else best


def flat_top(workers: np.ndarray, seconds: np.ndarray, within: float = FLAT_TOP) -> tuple[int, int]:
    """The least and largest K whose measured T (mean per K) is within ``within`` of the best:
    where the speedup curve is that flat, its argmax is decided by a run's noise."""
    ks = np.unique(workers)
    mean = np.array([seconds[workers == k].mean() for k in ks])
    near = ks[mean <= (1.0 + within) * mean.min()]
    return int(near.min()), int(near.max())


def k_max_agrees(predicted: int | None, measured: int | None) -> bool:
    """The issue's target: within 15 % of the measured K_max, or both beyond the range."""
    if predicted is None or measured is None:
        return predicted is None and measured is None
    return abs(predicted - measured) <= KMAX_TOLERANCE * measured


def analyse(doc: dict[str, Any], out_dir: str, plot: bool = True) -> tuple[list[str], list[dict[str, Any]]]:
    """Model each series from its calibration runs and compare with its sweep: lines and rows."""
    from hpcbsp.cost.calibrate import model_from_reports
    from hpcbsp.cost.farmmodel import NOTICE
    from hpcbsp.cost.runs import Runs
    from hpcbsp.cost.validate import validation

    lines, rows = [], []
    for s in doc["series"]:
        by_k: dict[int, list[dict[str, Any]]] = {}
        for t in s["calibration"]:
            by_k.setdefault(int(t["workers"]), []).append(t)
        cm, method, _ = model_from_reports(by_k, int(s["n"]), n_boot=200)
        sweep = Runs.from_arrays([t["workers"] for t in s["sweep"]], [t["seconds_per_iteration"] for t in s["sweep"]])
        check = validation(cm, sweep)
        top = int(sweep.workers.max())
        k_pred = cm.model.k_max(top)
        k_meas = measured_k_max(sweep.workers, sweep.seconds)
        top_lo, top_hi = flat_top(sweep.workers, sweep.seconds)
        lo, hi = cm.k_max_interval()
        fmt = lambda k: f"beyond {top}" if k is None else str(k)  # noqa: E731
        ok = check["mape"] <= MAPE_TARGET and k_max_agrees(k_pred, k_meas)
        lines.append(f"{s['app']:8s} n = {s['n']}, {s['exchange']:6s} exchange, emulated t_Map = "
                     f"{1e3 * s['emulated']['t_map']:.3f} ms: T(K) MAPE = {check['mape']:.1f} % "
                     f"over K = {int(sweep.workers.min())}..{top} ({len(sweep)} runs); K_max predicted "
                     f"{fmt(k_pred)} (95 % interval [{lo}, {hi if hi is not None else 'no turnover'}]), "
                     f"measured {fmt(k_meas)} (measured T within {100 * FLAT_TOP:g} % of its best at "
                     f"K = {top_lo}..{top_hi}); calibrated at K = {sorted(by_k)} ({method}); "
                     f"{'targets met' if ok else 'targets NOT met'}")
        for p in check["points"]:
            rows.append({"app": s["app"], "exchange": s["exchange"], "workers": p["workers"],
                         "measured_s": p["measured_mean"], "predicted_s": p["predicted"], "ape": p["mape"],
                         "region": p["region"]})
        if plot:
            from hpcbsp.cost.plot import plot_speedup

            path = os.path.join(out_dir, f"speedup-{s['app']}-{s['exchange']}.png")
            plot_speedup(cm, path, runs=sweep, max_workers=top,
                         title=f"BSF {s['app']} n = {s['n']}, {s['exchange']} exchange: {NOTICE.split(':')[0]}")
    return lines, rows


def report(args: argparse.Namespace) -> int:
    from hpcbsp.cost.farmmodel import NOTICE
    from hpcbsp.cost.runs import write_runs

    with open(os.path.join(args.out_dir, "measurements.json")) as fh:
        doc = json.load(fh)
    lines, rows = analyse(doc, args.out_dir, plot=not args.no_plot)
    how = "measured on the master" if doc["series"][0]["emulated"]["measured"] else "given by --t-map"
    where = (f"one on each of {doc['hosts']} hosts" if doc.get("hosts", 1) > 1 else f"on {doc['cpus']} CPUs of one host")
    print(f"{NOTICE} (each series' t_Map {how}); {doc['ranks']} ranks, {where}, waiting ranks yield")
    for line in lines:
        print(line)
    write_runs(os.path.join(args.out_dir, "validation.csv"), rows,
               ("app", "exchange", "workers", "measured_s", "predicted_s", "ape", "region"))
    print(f"targets: MAPE <= {MAPE_TARGET:g} %, K_max within {100 * KMAX_TOLERANCE:g} % (or both beyond the range); "
          f"wrote {args.out_dir}/validation.csv" + ("" if args.no_plot else " and speedup-*.png"))
    return 0


# ---------------------------------------------------------------------------------- command line
def _list(choices: tuple[str, ...]):
    def parse(text: str) -> list[str]:
        items = [t.strip() for t in text.split(",") if t.strip()]
        bad = [t for t in items if t not in choices]
        if bad or not items:
            raise argparse.ArgumentTypeError(f"choose from {', '.join(choices)}, got {text!r}")
        return items
    return parse


def _workers(text: str) -> list[int]:
    from hpcbsp.cost.errors import CostInputError
    from hpcbsp.cost.klist import parse_workers

    try:
        return parse_workers(text)
    except CostInputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m hpcbsp.bench bsf", description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=_workers, default=list(range(1, 33)), metavar="LIST",
                   help="worker counts K measured (default 1-32; the job has max K + 1 ranks)")
    p.add_argument("--calibrate", type=_workers, default=[1, 2, 3], metavar="LIST",
                   help="worker counts the model is calibrated from (default 1,2,3)")
    add_repeats(p, "calibration runs per K", default=2)
    p.add_argument("--sweep-repeats", type=positive_int, default=1, help="measured runs per K (default 1)")
    p.add_argument("--apps", type=_list(APPS), default=list(APPS), metavar="LIST", help="jacobi,cimmino (default both)")
    p.add_argument("--exchanges", type=_list(EXCHANGES), default=list(EXCHANGES), metavar="LIST",
                   help=f"{','.join(EXCHANGES)} (default all)")
    add_n(p, "system order = list length l", per="in total", default=1000)
    add_iters(p, "farm iterations per run", default=12)
    p.add_argument("--t-map", type=float, default=None, metavar="S",
                   help="emulate a Map of S seconds for the whole list instead of measuring the app's")
    p.add_argument("--out-dir", default=os.path.join("runs", "bench-bsf"), metavar="DIR",
                   help="outputs (default runs/bench-bsf)")
    add_placement(p, "the bench's job")
    p.add_argument("--timeout", type=float, default=1800.0, metavar="S", help="limit for the MPI job (default 1800 s)")
    p.add_argument("--no-plot", action="store_true", help="skip the plots")
    p.add_argument("--report-only", action="store_true",
                   help="run nothing: model and compare the runs already in --out-dir's measurements.json again")
    p.add_argument("--quick", action="store_true", help="a check that it runs: K = 1-4, n = 200, 5 iterations")
    p.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)  # the launched MPI job
    return p


def main(argv: list[str]) -> int:
    from hpcbsp.runtime.launch import detect_launch, find_mpiexec

    ps = parser()
    args = ps.parse_args(argv)
    if args.quick:
        args.workers, args.n, args.iters, args.repeats = [1, 2, 3, 4], 200, 5, 1
    if args.repeats < 1 or args.sweep_repeats < 1 or args.iters < 1:
        ps.error("--repeats, --sweep-repeats and --iters must be >= 1")
    if args.n < max(args.workers + args.calibrate):
        ps.error(f"--n ({args.n}) must be at least the largest K ({max(args.workers + args.calibrate)})")
    if args.t_map is not None and not args.t_map >= 0:
        ps.error("--t-map must be >= 0 seconds")
    if args.inner:
        return measure(args)
    if not args.report_only:
        check_out_dir(ps, args.out_dir, "--out-dir")  # before the job, not a traceback after the launch
    if args.report_only:
        if not os.path.isfile(os.path.join(args.out_dir, "measurements.json")):
            ps.error(f"--report-only: no {os.path.join(args.out_dir, 'measurements.json')}; run the bench first")
        measuring()
        return report(args)
    if detect_launch().launcher != "singleton":
        ps.error("run it without mpiexec or srun: it launches its own MPI job of max K + 1 ranks")
    mpiexec = find_mpiexec()
    if not mpiexec and args.launch == "mpiexec":
        ps.error("no mpiexec found beside this Python or on PATH")
    ranks = max(args.workers + args.calibrate) + 1
    flavour = mpiexec_flavour(mpiexec)
    try:
        launch = job_command(mpiexec or "mpiexec", ranks, hosts=args.hosts, launch=args.launch, flavour=flavour)
    except JobCommandError as exc:
        ps.error(str(exc))
    refusal = root_refusal(flavour) if args.launch == "mpiexec" else None
    if refusal:
        ps.error(f"{mpiexec}: {refusal}")
    measuring()
    os.makedirs(args.out_dir, exist_ok=True)
    # Without an enclosing job's launcher variables; waiting ranks give their cores away, in
    # hpcbsp's control step (HPCBSP_WAIT) and inside the MPI library (its own yield setting).
    env = child_env(os.environ)
    env.update({**flavour.yield_env, **timeout_env(int(args.timeout)), "HPCBSP_WAIT": "yield", "PYTHONUNBUFFERED": "1",
                **progress_env()})
    cmd = [*launch, sys.executable, "-m", "hpcbsp.bench", "bsf", "--inner", *argv]
    where = (f"one rank on each of {ranks} hosts of {args.hosts}" if args.hosts else
             f"{ranks} tasks on {ranks} nodes by srun" if args.launch == "srun" else f"on {os.cpu_count()} CPUs here")
    print(f"bench bsf: one MPI job of {ranks} ranks, {where} "
          f"({len(args.apps) * len(args.exchanges)} series); progress on stderr", flush=True)
    try:
        proc = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, timeout=args.timeout + 30)
    except subprocess.TimeoutExpired:
        print(f"bench bsf: the MPI job did not finish within {args.timeout:g} s", file=sys.stderr)
        return 1
    if proc.returncode != 0:
        print(f"bench bsf: the MPI job failed with status {proc.returncode}", file=sys.stderr)
        return 1
    return report(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
