"""``hpcbsp-cost``: calibrate, predict, validate and plot the BSF and BSP cost models.

Subcommands (each has ``--help`` and ``--json``)::

    hpcbsp-cost bsf --latency S --t-c S --t-map S --t-a S --t-p S --list-length N [--comm ...] [--granularity ...] [--workers LIST]
    hpcbsp-cost fit --runs RUNS.csv [--list-length N] [--granularity ...] [--comm ...] -o MODEL.json
    hpcbsp-cost predict MODEL.json --workers 1,2,4,...,100000
    hpcbsp-cost validate MODEL.json --runs RUNS.csv
    hpcbsp-cost plot MODEL.json [--runs RUNS.csv] -o speedup.png
    hpcbsp-cost suggest MODEL.json [--budget S] [--repeats R]
    hpcbsp-cost calibrate [--workers 1,2,3] [--until-width W] -- COMMAND ...
    mpiexec -n P hpcbsp-cost probe -o PROFILE.json
    hpcbsp-cost ledger RUN.json --profile PROFILE.json

Bad input prints one line on stderr and exits with status 2.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Sequence

from hpcbsp.cost.errors import CostInputError
from hpcbsp.cost.klist import parse_workers
from hpcbsp.farm.model import BSFModel
from hpcbsp.farm.params import BSFParams
from hpcbsp.farm.terms import GRANULARITIES
from hpcbsp.util.args.parser import OneLineParser, closed_stdout, quiet_pipe
from hpcbsp.util.args.types import fraction, nonnegative_float, nonnegative_int, positive_int, positive_seconds, seconds, seed
from hpcbsp.util.args.vocabulary import add_alias, add_placement, add_quiet
from hpcbsp.util.choices import EXCHANGES
from hpcbsp.util.launcher import launcher_rank
from hpcbsp.util.outputs import OutputError, prepare_output

PROG = "hpcbsp-cost"
#: Where `hpcbsp-cost probe` writes its profile unless told otherwise.
DEFAULT_PROFILE = os.path.join("runs", "probe", "PROFILE.json")
#: The image formats `hpcbsp-cost plot` writes (by file name ending).
PLOT_SUFFIXES = (".png", ".svg", ".pdf")


def _workers(text: str) -> list[int]:
    try:
        return parse_workers(text)
    except CostInputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _emit(args: argparse.Namespace, doc: Any, text: str) -> None:
    if args.json:
        print(json.dumps(doc, indent=1, allow_nan=False))
    else:
        print(text)


# -- subcommands ---------------------------------------------------------------------------------

def cmd_bsf(args: argparse.Namespace) -> int:
    from hpcbsp.cost.modelfile import CalibratedModel, provenance, save_model
    from hpcbsp.cost.predict import check_positive_time, default_workers, format_prediction, prediction

    params = BSFParams(args.latency, args.t_c, args.t_map, args.t_a, args.t_p, args.list_length, t_0=args.t_0,
                       order_share=args.order_share)
    model = BSFModel(params, args.comm, args.granularity)
    cm = CalibratedModel(model, fit={"source": "bsf command line"}, provenance=provenance(source="bsf"))
    check_positive_time(model, args.workers)
    workers = args.workers or default_workers(model)
    doc = prediction(cm, workers)
    doc["k_max_closed"] = model.k_max_closed()
    doc["k_max_numeric"] = model.k_max_numeric()
    doc["aggregate"] = model.aggregate()
    doc["params"] = params.as_dict()
    text = format_prediction(doc)
    text += (f"\nclosed form: K_BSF = {_fmt_opt(doc['k_bsf'])} -> integer {_fmt_opt(doc['k_max_closed'])}; "
             f"numeric argmax: {_fmt_opt(doc['k_max_numeric'])}")
    if args.output:
        save_model(args.output, cm)
        text += f"\nmodel written to {args.output}"
    _emit(args, doc, text)
    return 0


def _fmt_opt(value: float | int | None) -> str:
    if value is None:
        return "none"
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def cmd_fit(args: argparse.Namespace) -> int:
    from hpcbsp.cost.fit import fit_runs
    from hpcbsp.cost.modelfile import save_model
    from hpcbsp.cost.predict import format_k_max, prediction
    from hpcbsp.cost.runs import read_runs

    runs = read_runs(args.runs)
    cm = fit_runs(runs, list_length=args.list_length, comms=[args.comm] if args.comm else None,
                  granularities=[args.granularity] if args.granularity else None,
                  n_boot=args.bootstrap, seed=args.seed)
    save_model(args.output, cm)
    doc = cm.as_dict()
    summary = prediction(cm, [1])
    p = cm.model.params
    scores = cm.fit["forward_mean_relative_error"] or cm.fit["cv_mean_relative_error"]
    lines = [f"fitted {len(runs)} runs at K = {', '.join(map(str, cm.fit['workers']))}; chosen form {cm.fit['chosen']} "
             f"by {cm.fit['selection']}",
             "mean held-out relative error: " + ", ".join(
                 f"{k} {'n/a' if v is None else f'{100 * v:.2f} %'}" for k, v in scores.items()),
             *(f"refused term {r['term']}: {r['why']}" for r in cm.fit["refused_terms"]),
             f"parameters: 2L+t_c = {p.t_c:.4g} s, t_Map = {p.t_map:.4g} s, t_a = {p.t_a:.4g} s, t_p = {p.t_p:.4g} s, "
             f"l = {p.list_length if p.list_length else 'unknown'}",
             f"training MAPE {cm.fit['train_mape']:.2f} %",
             format_k_max(summary)]
    lines += [f"note: {n}" for n in cm.fit["notes"]]
    lines.append(f"model written to {args.output}")
    _emit(args, doc, "\n".join(lines))
    return 0


def cmd_predict(args: argparse.Namespace) -> int:
    from hpcbsp.cost.modelfile import load_model
    from hpcbsp.cost.predict import format_prediction, prediction

    cm = load_model(args.model)
    doc = prediction(cm, args.workers)
    _emit(args, doc, format_prediction(doc))
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from hpcbsp.cost.modelfile import load_model
    from hpcbsp.cost.runs import read_runs
    from hpcbsp.cost.validate import format_validation, validation

    cm = load_model(args.model)
    doc = validation(cm, read_runs(args.runs))
    text = format_validation(doc)
    status = 0
    if args.max_mape is not None:
        doc["max_mape"] = args.max_mape
        doc["passed"] = doc["mape"] <= args.max_mape
        if not doc["passed"]:
            status = 1
            text += f"\nFAILED: MAPE {doc['mape']:.2f} % exceeds --max-mape {args.max_mape:g} %"
        else:
            text += f"\npassed: MAPE {doc['mape']:.2f} % is within --max-mape {args.max_mape:g} %"
    _emit(args, doc, text)
    if status and args.json:
        sys.stderr.write(f"{PROG} validate: MAPE {doc['mape']:.2f} % exceeds --max-mape {args.max_mape:g} %\n")
    return status


def cmd_plot(args: argparse.Namespace) -> int:
    from hpcbsp.cost.modelfile import load_model
    from hpcbsp.cost.plot import plot_speedup
    from hpcbsp.cost.runs import read_runs

    cm = load_model(args.model)
    runs = read_runs(args.runs) if args.runs else None
    doc = plot_speedup(cm, args.output, runs=runs, max_workers=args.max_workers)
    _emit(args, doc, f"speedup plot written to {doc['path']}")
    return 0


def cmd_suggest(args: argparse.Namespace) -> int:
    from hpcbsp.cost.modelfile import load_model
    from hpcbsp.cost.suggest import format_suggestion, suggest

    doc = suggest(load_model(args.model), budget=args.budget, repeats=args.repeats, iterations=args.iterations,
                  noise=args.noise, max_workers=args.max_workers)
    _emit(args, doc, format_suggestion(doc))
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    from hpcbsp.cost.calibrate import calibrate, format_calibration

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise CostInputError("calibrate needs the program to run after '--', e.g. "
                             "hpcbsp-cost calibrate -- python -m hpcbsp.apps.bsf.jacobi --n 400")
    doc = calibrate(command, workers=args.workers, repeats=args.repeats, out_dir=args.out_dir,
                    timeout=args.timeout, mpiexec=args.mpiexec, list_length=args.list_length,
                    n_boot=args.bootstrap, progress=None if args.json or args.quiet else sys.stderr,
                    exchange=args.exchange, emulate=args.emulate_compute, hosts=args.hosts, launch=args.launch,
                    until_width=args.until_width, max_workers=args.max_workers)
    _emit(args, doc, format_calibration(doc))
    return 0


def cmd_probe(args: argparse.Namespace) -> int:
    from hpcbsp.cost.probe import format_profile, run_probe

    profile = run_probe(max_h=args.max_h, repeats=args.repeats, quick=args.quick, output=args.output,
                        progress=None if args.json else sys.stderr)
    if profile is not None:  # rank 0 only
        _emit(args, profile, format_profile(profile) + f"\nprofile written to {args.output}")
    return 0


def cmd_ledger(args: argparse.Namespace) -> int:
    from hpcbsp.cost.bspmodel import compare, format_comparison, load_ledger
    from hpcbsp.cost.profile import load_profile

    doc = compare(load_ledger(args.run), load_profile(args.profile))
    _emit(args, doc, format_comparison(doc, limit=args.limit))
    return 0


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hpcbsp")
    except PackageNotFoundError:
        return "unknown (not installed)"


# -- parser --------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog=PROG, description="Calibrate, predict, validate and plot the BSF and BSP cost models.",
                     epilog="Run `hpcbsp-cost SUBCOMMAND --help` for the options of each subcommand.")
    parser.add_argument("--version", action="version", version=f"{PROG} (hpcbsp) {_version()}")
    sub = parser.add_subparsers(dest="subcommand", metavar="SUBCOMMAND", required=True)

    def add(name: str, help_text: str, func) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text, allow_abbrev=False)
        p.add_argument("--json", action="store_true", help="print the result as JSON")
        p.set_defaults(func=func)
        return p

    p = add("bsf", "Evaluate the BSF model for given cost parameters: T, speedup, efficiency per K and K_max "
                   "(closed form and numeric argmax).", cmd_bsf)
    p.add_argument("--latency", type=seconds, required=True, metavar="S",
                   help="L: latency of one message, per worker a superstep spans [s]")
    p.add_argument("--t-c", type=seconds, required=True, metavar="S",
                   help="t_c: master-worker exchange of one order and one result, latency excluded [s]")
    p.add_argument("--t-map", type=seconds, required=True, metavar="S", help="t_Map: Map over the whole list on one worker [s]")
    p.add_argument("--t-a", type=seconds, required=True, metavar="S", help="t_a: one Reduce operation [s]")
    p.add_argument("--t-p", type=seconds, required=True, metavar="S", help="t_p: master compute and stop test [s]")
    p.add_argument("--list-length", type=positive_int, required=True, metavar="N", help="l: length of the map list")
    p.add_argument("--t-0", type=float, default=0.0, metavar="S",
                   help="t_0: constant per iteration of the exchange, may be negative (default 0, as in the paper) [s]")
    p.add_argument("--order-share", type=fraction, default=0.5, metavar="F",
                   help="the order's share of an exchange's bytes, for the tree form (default 0.5)")
    _form_options(p, default=True)
    p.add_argument("--workers", type=_workers, metavar="LIST",
                   help="worker counts, e.g. 1,2,4,...,4096 or 1-16 (default: powers of 2 past K_max)")
    p.add_argument("-o", "--out", dest="output", metavar="MODEL.json", help="also write the model file")
    add_alias(p, "--output", dest="output")

    p = add("fit", "Fit the BSF model to measured runs (NNLS on relative error; form and terms chosen by forward "
                   "validation from 6 worker counts on, terms the range cannot identify refused and named; "
                   "bootstrap intervals) and write MODEL.json.", cmd_fit)
    p.add_argument("--runs", required=True, metavar="RUNS.csv", help="CSV with a header and columns workers,seconds")
    p.add_argument("--list-length", type=positive_int, metavar="N",
                   help="l; enables the t_a term and --granularity ceil (default: the runs' list_length column)")
    _form_options(p, default=False)
    p.add_argument("--bootstrap", type=nonnegative_int, default=200, metavar="N",
                   help="bootstrap replicates (default 200; 0: none)")
    p.add_argument("--seed", type=seed, default=0, metavar="S", help="bootstrap seed (default 0)")
    p.add_argument("-o", "--out", dest="output", required=True, metavar="MODEL.json", help="where to write the model")
    add_alias(p, "--output", dest="output")

    p = add("predict", "Print T, speedup and efficiency per K and K_max with its interval.", cmd_predict)
    p.add_argument("model", metavar="MODEL.json")
    p.add_argument("--workers", type=_workers, default=parse_workers("1,2,4,...,100000"), metavar="LIST",
                   help="worker counts, e.g. 1,2,4,...,100000 (the default) or 1-64")

    p = add("validate", "Compare a model with measured runs: mean and max absolute percentage error per K.", cmd_validate)
    p.add_argument("model", metavar="MODEL.json")
    p.add_argument("--runs", required=True, metavar="RUNS.csv", help="measured runs (columns workers,seconds)")
    p.add_argument("--max-mape", type=nonnegative_float, metavar="PERCENT",
                   help="fail (exit status 1) when the mean absolute percentage error over all runs exceeds PERCENT")

    p = add("plot", "Plot the predicted speedup with its band, the measured points and K_max.", cmd_plot)
    p.add_argument("model", metavar="MODEL.json")
    p.add_argument("--runs", metavar="RUNS.csv", help="measured runs to draw as points")
    p.add_argument("--max-workers", type=positive_int, metavar="K", help="right end of the K axis")
    p.add_argument("-o", "--out", dest="output", required=True, metavar="speedup.png",
                   help="image file: .png, .svg or .pdf")
    add_alias(p, "--output", dest="output")

    p = add("suggest", "Name the worker count to measure next: the one whose runs narrow the K_max interval "
                       "most per second (the model's bootstrap reweighted by simulated measurements).", cmd_suggest)
    p.add_argument("model", metavar="MODEL.json")
    p.add_argument("--budget", type=positive_seconds, metavar="S", help="most seconds the runs at that K may take")
    p.add_argument("--repeats", type=positive_int, default=2, metavar="R", help="runs at that K (default 2)")
    p.add_argument("--iterations", type=positive_int, metavar="N",
                   help="iterations of one run (default: the model's record; else costs are per iteration)")
    p.add_argument("--noise", type=fraction, metavar="F",
                   help="relative noise of one run's time (default: the model's record, else 0.05)")
    p.add_argument("--max-workers", type=positive_int, metavar="K", help="largest K that can be run")

    p = add("calibrate", "Run a BSF program (one built on hpcbsp.farm) under mpiexec at a few small worker "
                         "counts and write RUNS.csv and MODEL.json.", cmd_calibrate)
    p.add_argument("--workers", type=_workers, default=[1, 2, 3], metavar="LIST",
                   help="worker counts to run (default 1,2,3; each run uses K+1 ranks)")
    p.add_argument("--repeats", type=positive_int, default=2, metavar="R", help="runs per worker count (default 2)")
    p.add_argument("--out-dir", default="runs/calibrate", metavar="DIR",
                   help="where RUNS.csv, MODEL.json and the run logs go (default runs/calibrate)")
    p.add_argument("--list-length", type=positive_int, metavar="N", help="override the list length the farm reports")
    p.add_argument("--bootstrap", type=nonnegative_int, default=200, metavar="N",
                   help="bootstrap replicates (default 200; 0: none)")
    p.add_argument("--timeout", type=positive_seconds, default=300.0, metavar="S",
                   help="limit per run in seconds, fractions allowed (default 300)")
    p.add_argument("--mpiexec", metavar="PATH", help="mpiexec to use (default: the one beside this Python)")
    add_placement(p, "each run")
    add_quiet(p)
    p.add_argument("--exchange", choices=EXCHANGES,
                   help="the farm's exchange in every run (default: the program's own, linear unless it says)")
    p.add_argument("--emulate-compute", nargs="?", const="measure", metavar="t_map=S[,t_a=S]",
                   help="a SIMULATION of compute: workers wait the Map's time instead of computing "
                        "(measured by the first run unless given); master, messages and syncs stay real")
    p.add_argument("--until-width", type=nonnegative_int, metavar="W",
                   help="then run where `suggest` says until the K_max 95%% interval is at most W wide")
    p.add_argument("--max-workers", type=positive_int, metavar="K", help="largest suggested K (default: the "
                   "host file's hosts less one, else the CPUs)")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND ...",
                   help="the program, e.g. -- python -m hpcbsp.apps.bsf.jacobi --n 400")

    p = add("probe", "Measure this machine's BSP parameters r, g and l (run under mpiexec) and write a profile.", cmd_probe)
    p.add_argument("-o", "--out", dest="output", default=DEFAULT_PROFILE, metavar="PROFILE.json",
                   help=f"where to write the machine profile (default {DEFAULT_PROFILE})")
    add_alias(p, "--output", dest="output")
    p.add_argument("--max-h", type=positive_int, default=None, metavar="H",
                   help="largest h-relation in words per rank (default 256, 64 with --quick)")
    p.add_argument("--repeats", type=positive_int, default=None, metavar="R",
                   help="timed repetitions per h (default 20, 5 with --quick)")
    p.add_argument("--quick", action="store_true", help="a short probe (seconds) for tests and demos")

    p = add("ledger", "Show a run's superstep ledger with the BSP prediction w + g·h + l per superstep.", cmd_ledger)
    p.add_argument("run", metavar="RUN.json", help="ledger written by bsp.ledger.save (.json or .csv)")
    p.add_argument("--profile", required=True, metavar="PROFILE.json", help="machine profile from `hpcbsp-cost probe`")
    p.add_argument("--limit", type=positive_int, default=40, metavar="N",
                   help="supersteps to list (default 40; the summary covers all)")
    return parser


def _form_options(p: argparse.ArgumentParser, *, default: bool) -> None:
    p.add_argument("--comm", choices=EXCHANGES, default="linear" if default else None,
                   help="master-worker communication: one by one (linear) or the farm's binomial tree"
                        + (" (default linear)" if default else " (default linear; a fit cannot tell the tree's "
                           "latency from its transfers)"))
    p.add_argument("--granularity", choices=GRANULARITIES, default="continuous" if default else None,
                   help="the slowest worker's share: l/K (continuous) or ceil(l/K) (ceil)"
                        + (" (default continuous)" if default else " (default: chosen from the runs)"))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``hpcbsp-cost``; returns the exit status (141, quietly, when stdout's
    reader has gone: :func:`hpcbsp.util.args.parser.quiet_pipe`)."""
    return quiet_pipe(lambda: _main(argv))


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        # Output paths are checked (and their folders made) before any work is done.
        if args.subcommand == "plot" and not args.output.lower().endswith(PLOT_SUFFIXES):
            raise CostInputError(f"-o {args.output}: the image format comes from the file name; "
                                 f"end it with {', '.join(PLOT_SUFFIXES)}")
        if getattr(args, "output", None):
            prepare_output(args.output, "output file")
        if getattr(args, "out_dir", None):
            prepare_output(os.path.join(args.out_dir, "RUNS.csv"), "output folder")
        return int(args.func(args))
    except (CostInputError, OutputError) as exc:
        if launcher_rank() == 0:  # under mpiexec (probe) every rank finds the same problem
            sys.stderr.write(f"{PROG} {args.subcommand}: error: {exc}\n")
        return 2
    except OSError as exc:  # a file problem met while working: say which, without a traceback
        if closed_stdout(exc):  # `hpcbsp-cost predict ... | head`: main's quiet_pipe ends it quietly
            raise
        sys.stderr.write(f"{PROG} {args.subcommand}: error: {exc.strerror or exc}"
                         f"{f': {exc.filename}' if exc.filename else ''}\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write(f"{PROG}: interrupted\n")
        return 130


if __name__ == "__main__":
    sys.exit(main())
