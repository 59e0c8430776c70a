"""Data-parallel training on a parameter server under BSP, ASP, SSP, DSSP, ElasticBSP or backup workers.

Real run (rank 0 serves, ranks 1..n are workers)::

    mpiexec -n 5 python -m hpcbsp.apps.elastic.train --policy elastic --R 20 --slowdown 1,1,1.5,3

Virtual-clock run of the same thing (no MPI; any number of workers)::

    python -m hpcbsp.apps.elastic.train --simulate --policy all --slowdown 1,1,1.5,3

A PyTorch CNN on the digits with real compute times, every policy and the allreduce baseline
(needs the ``torch`` extra)::

    mpiexec -n 5 python -m hpcbsp.apps.elastic.train --model cnn --dataset digits --policy all

Each policy trains for ``--duration`` seconds; the output directory receives ``curves.csv``
(accuracy vs time per policy), ``workers.csv`` (waiting time per worker), ``pushes.csv`` (every
push time the server logged), ``summary.json`` (staleness statistics, time to reach BSP's final
accuracy, the configuration) and ``accuracy.png``.

A long run saves itself with ``--checkpoint DIR`` and, after a kill, resumes with the same
command plus ``--restart``; a simulated run then ends with exactly the bits an uninterrupted one
gives, a real run goes on from the server's last saved state (see ``hpcbsp.apps.elastic.resume``).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from hpcbsp.util.args import (
    OneLineParser,
    add_alias,
    add_checkpoint,
    add_json,
    add_ledger,
    add_n,
    add_quiet,
    add_repeats,
    add_seed,
    check_checkpoint,
    check_memory,
    check_outputs,
    fraction,
    integer,
    ledger_output,
    nonnegative_float,
    nonnegative_int,
    positive_float,
    positive_int,
    positive_seconds,
)
from hpcbsp.util.launcher import launcher_rank, launcher_size
from hpcbsp.util.outputs import OutputError, prepare_dir
from hpcbsp.util.progress import Progress
from hpcbsp.elastic.data import DATASETS, DEFAULT_SAMPLES, DIGITS_SAMPLES, DatasetUnavailable, load_dataset
from .experiment import PolicyRun, TrainConfig, build_model, model_info, model_report, run_mpi, run_simulated, warm_up
from hpcbsp.elastic.models import MODELS, TorchUnavailable
from hpcbsp.elastic.policies import REGISTRY, PolicyError, PolicyOptions
from .report import compare, format_table, write_outputs
from .resume import CheckpointError, CheckpointPlan
from hpcbsp.elastic.timing import TimingModel
from hpcbsp.elastic.wire import FORMATS

if TYPE_CHECKING:
    from hpcbsp.elastic.world import World

__all__ = ["main", "build_parser"]

DEFAULT_SLOWDOWN = (1.0, 1.0, 1.5, 3.0)
#: Largest --jitter (lognormal sigma of iteration times) accepted.
MAX_JITTER = 3.0
PROG = "python -m hpcbsp.apps.elastic.train"
#: Bounds that keep a run finite: a simulated run handles every iteration as an event (about
#: 30-100 us each with training, so 2 million take minutes), and every evaluation runs the model
#: over the test set.
MAX_SIMULATED_ITERATIONS = 2_000_000
MAX_EVALUATIONS = 100_000
#: Fewest samples --n accepts: two per class of the datasets with the most classes (10).
MIN_SAMPLES = 20


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0],
                formatter_class=argparse.RawDescriptionHelpFormatter,
                epilog="Example: mpiexec -n 5 python -m hpcbsp.apps.elastic.train --policy all --duration 8")
    g = p.add_argument_group("policies")
    g.add_argument("--policy", default="all",
                   help=f"comma-separated policies or 'all' ({', '.join(REGISTRY)}); default all")
    g.add_argument("--R", type=integer, default=20, help="ElasticBSP lookahead: most iterations between barriers (default 20)")
    g.add_argument("--s", type=integer, default=3, help="SSP staleness bound (default 3)")
    g.add_argument("--s-lower", type=integer, default=3, help="DSSP lower bound s_L (default 3)")
    g.add_argument("--s-upper", type=integer, default=15, help="DSSP upper bound s_U (default 15)")
    g.add_argument("--backup", type=integer, default=1, help="backup workers b: the first n-b gradients count (default 1)")
    g.add_argument("--window", type=integer, default=3,
                   help="ElasticBSP/DSSP predict an iteration time as the median of the last WINDOW intervals (default 3)")
    g = p.add_argument_group("workers and timing")
    g.add_argument("--slowdown", default=None,
                   help="per-worker iteration-time multipliers, one per worker, e.g. 1,1,1.5,3 "
                        "(default: 1,1,1.5,3 for 4 workers, else all 1 but the last worker at 3)")
    g.add_argument("--workers", type=positive_int, default=None, help="number of workers with --simulate (default 4)")
    g.add_argument("--base-delay", type=nonnegative_float, default=0.02,
                   help="iteration time of a worker at slowdown 1, seconds (default 0.02; "
                        "> 0 with --simulate, where 0 would stop the virtual clock)")
    g.add_argument("--jitter", type=nonnegative_float, default=0.1, help="lognormal sigma of iteration-time noise (default 0.1)")
    g.add_argument("--change-at", type=nonnegative_float, default=None,
                   help="time (s) at which --change-worker changes speed (default: never)")
    g.add_argument("--change-worker", type=nonnegative_int, default=0, help="worker whose speed changes (default 0)")
    g.add_argument("--change-factor", type=positive_float, default=2.0, help="its iteration-time factor after the change (default 2)")
    g.add_argument("--stall-prob", type=fraction, default=0.0, help="probability that an iteration stalls (default 0)")
    g.add_argument("--stall-factor", type=positive_float, default=10.0, help="how much longer a stalled iteration takes (default 10)")
    g = p.add_argument_group("training")
    g.add_argument("--dataset", choices=DATASETS, default="digits",
                   help="digits (scikit-learn's bundled images; extra 'digits'), generated clusters, or teacher "
                        "(random inputs labelled by a fixed random network) (default digits)")
    g.add_argument("--model", choices=MODELS, default="softmax",
                   help="softmax, mlp (numpy); cnn, resnet, student (PyTorch, extra 'torch'); default softmax")
    g.add_argument("--hidden", type=positive_int, default=32, help="MLP/student hidden units (default 32)")
    g.add_argument("--lr", type=positive_float, default=0.05, help="SGD learning rate (default 0.05)")
    g.add_argument("--lr-decay", type=nonnegative_float, default=0.0,
                   help="learning-rate rule: update k uses lr / (1 + LR_DECAY * k) (default 0: constant)")
    g.add_argument("--batch", type=positive_int, default=16, help="mini-batch size per worker (default 16)")
    g.add_argument("--duration", type=positive_float, default=10.0, help="seconds of training per policy (default 10)")
    g.add_argument("--eval-every", type=positive_float, default=0.25, help="seconds between test-accuracy evaluations (default 0.25)")
    add_n(g, "samples of the dataset (20%% of them held out for testing)", per="in total", default=None,
          shown_default=f"the dataset's: {DIGITS_SAMPLES:,} digits (fewer: a seeded subset), "
                        f"{DEFAULT_SAMPLES['generated']:,} generated, {DEFAULT_SAMPLES['teacher']:,} teacher; "
                        f"at least {MIN_SAMPLES}",
          old=("--teacher-samples",))
    add_repeats(g, "runs per policy, each with other mini-batches and timing noise; medians reported",
                default=1)
    add_seed(g, "the data, the workers' shards and mini-batches, the model's initial weights and "
                "the iteration-time noise")
    g = p.add_argument_group("PyTorch models and the wire")
    g.add_argument("--depth", type=positive_int, default=2,
                   help="student: hidden layers; resnet: residual blocks (default 2)")
    g.add_argument("--device", default="cpu", help="where a torch model computes: cpu, cuda, cuda:1... (default cpu)")
    g.add_argument("--threads", type=positive_int, default=1, help="torch threads per rank (default 1: ranks are the parallelism)")
    g.add_argument("--compute", choices=("auto", "real", "sleep"), default="auto",
                   help="MPI iteration times: real = measured compute x slowdown (the extra is slept), "
                        "sleep = --base-delay x slowdown; auto = real for torch models (default auto)")
    g.add_argument("--grad-dtype", choices=FORMATS, default=None,
                   help="gradients on the wire (default: the weights' dtype, float32 for torch); "
                        "float16/bfloat16 halve the push (allreduce always sums full precision)")
    g.add_argument("--teacher-dim", type=positive_int, default=64, help="--dataset teacher: inputs per sample (default 64)")
    g = p.add_argument_group("run")
    g.add_argument("--simulate", action="store_true", help="virtual clock instead of MPI (no mpiexec needed)")
    g.add_argument("--out-dir", dest="out", type=Path, default=Path("runs/elastic"), metavar="DIR",
                   help="output folder (default runs/elastic; checked before the run)")
    add_alias(g, "--out", dest="out", type=Path)  # the old spelling
    g.add_argument("--no-plot", action="store_true", help="do not write accuracy.png")
    add_quiet(g)
    add_ledger(g, "the training world's own supersteps, its ranks' meeting points between policy "
                  "runs (the parameter server's and the allreduce baseline's messages are not "
                  "among them); real runs only, not --simulate")
    add_json(g, "the comparison per policy, the model, the workers and the files written")
    g.add_argument("--timeout", type=positive_seconds, default=None,
                   help="longest single wait in an MPI run before failing (default: "
                        "$HPCBSP_SYNC_TIMEOUT, else 60 s)")
    g = p.add_argument_group("checkpoint and restart")
    add_checkpoint(g, None, checkpoint_help="one subdirectory per policy run and repeat; without "
                                            "--restart DIR must be new or empty",
                   restart_help="per policy run (one without a checkpoint starts afresh, a finished "
                                "one is not run again); with --simulate the result is bit-identical "
                                "to an uninterrupted run")
    g.add_argument("--checkpoint-every", type=float, default=None, metavar="SECONDS",
                   help="seconds between saves: virtual with --simulate (default 1), wall-clock "
                        "otherwise (default 30; each save pauses the server for about a second "
                        "per million pushes logged)")
    g.add_argument("--die-after-saves", type=int, default=None, help=argparse.SUPPRESS)  # tests
    return p


def _policies(text: str) -> list[str]:
    names = list(REGISTRY) if text.strip() == "all" else [s.strip() for s in text.split(",") if s.strip()]
    if not names:
        raise PolicyError("--policy needs at least one policy name")
    for name in names:
        if name not in REGISTRY:
            raise PolicyError(f"unknown policy {name!r}; choose from: {', '.join(REGISTRY)}, all")
    return names


def _slowdown(text: str | None, n_workers: int | None) -> tuple[float, ...]:
    if text is None:
        n = n_workers or len(DEFAULT_SLOWDOWN)
        return DEFAULT_SLOWDOWN if n == len(DEFAULT_SLOWDOWN) else (1.0,) * (n - 1) + (3.0,)
    try:
        values = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise ValueError(f"--slowdown must be comma-separated numbers, got {text!r}") from None
    if n_workers is not None and len(values) != n_workers:
        raise ValueError(f"--slowdown lists {len(values)} workers but there are {n_workers} "
                         f"(one value per worker, e.g. {','.join(['1'] * n_workers)})")
    return values


def make_config(args: argparse.Namespace, n_workers: int | None,
                timeout: float | None = None) -> TrainConfig:
    """Validate the options into a :class:`TrainConfig` (ValueError/PolicyError on bad input);
    ``timeout``: the training world's (else ``--timeout``, else the config's default)."""
    if n_workers is not None and n_workers < 1:
        raise ValueError("needs at least one worker")
    for name in ("duration", "eval_every", "base_delay", "jitter", "change_at", "change_factor",
                 "stall_prob", "stall_factor", "lr", "timeout"):
        value = getattr(args, name, None)
        if value is not None and not math.isfinite(value):
            raise ValueError(f"--{name.replace('_', '-')} must be a finite number, got {value}")
    for name in ("duration", "eval_every"):
        if getattr(args, name) <= 0:
            raise ValueError(f"--{name.replace('_', '-')} must be positive")
    if args.duration / args.eval_every > MAX_EVALUATIONS:
        raise ValueError(f"--eval-every {args.eval_every:g} would evaluate the model "
                         f"{args.duration / args.eval_every:.3g} times in --duration "
                         f"{args.duration:g} s (at most {MAX_EVALUATIONS:,}): give a larger --eval-every")
    if timeout is None:
        timeout = args.timeout if args.timeout is not None else TrainConfig.timeout
    if args.lr <= 0 or args.batch < 1 or args.repeats < 1 or args.hidden < 1 or not timeout > 0:
        raise ValueError("--lr and --timeout must be positive; --batch, --repeats and --hidden at least 1")
    if not args.lr_decay >= 0:
        raise ValueError(f"--lr-decay must be at least 0, got {args.lr_decay}")
    if args.depth < 1 or args.threads < 1:
        raise ValueError("--depth and --threads must be at least 1")
    options = PolicyOptions(R=args.R, s=args.s, s_lower=args.s_lower, s_upper=args.s_upper,
                            backup=args.backup, window=args.window)
    slowdown = _slowdown(args.slowdown, n_workers)
    if args.jitter > MAX_JITTER:
        raise ValueError(f"--jitter {args.jitter:g} is too large: at most {MAX_JITTER:g} (a lognormal sigma; "
                         f"{MAX_JITTER:g} already spreads iteration times by a factor of about 400 either way)")
    if "backup" in _policies(args.policy) and args.backup >= len(slowdown):
        raise ValueError(f"--backup {args.backup} must be fewer than the {len(slowdown)} workers")
    timing = TimingModel(base_s=args.base_delay, slowdown=slowdown, jitter=args.jitter,
                         change_at=args.change_at, change_worker=args.change_worker,
                         change_factor=args.change_factor, stall_prob=args.stall_prob,
                         stall_factor=args.stall_factor, seed=args.seed)
    if args.simulate:
        _check_simulable(timing, args.duration, len(slowdown))
    return TrainConfig(timing=timing, options=options, model=args.model, hidden=args.hidden, lr=args.lr,
                       batch=args.batch, duration=args.duration, eval_every=args.eval_every,
                       seed=args.seed, timeout=timeout, depth=args.depth, device=args.device,
                       threads=args.threads, compute=args.compute, grad_format=args.grad_dtype,
                       teacher_dim=args.teacher_dim, samples=args.n,
                       lr_decay=args.lr_decay)


def _check_simulable(timing: TimingModel, duration: float, workers: int) -> None:
    """Refuse timings a virtual clock cannot get through: zero-time iterations (time would stand
    still) or so many iterations that the run would not end in reasonable time."""
    shortest = timing.shortest_s(duration)
    if timing.base_s <= 0:
        raise ValueError(f"--base-delay {timing.base_s:g} cannot be simulated: on the virtual clock "
                         "every iteration would take 0 s and time would never advance; give a "
                         "positive --base-delay (default 0.02), or run it for real under mpiexec")
    iterations = workers * duration / shortest if shortest > 0 else math.inf
    if iterations > MAX_SIMULATED_ITERATIONS:
        raise ValueError(f"iterations of {shortest:.3g} s (--base-delay x the smallest --slowdown, "
                         f"--change-factor or --stall-factor) on {workers} workers for --duration "
                         f"{duration:g} s would simulate about {iterations:.3g} iterations (at most "
                         f"{MAX_SIMULATED_ITERATIONS:,}): give a larger --base-delay or a shorter "
                         "--duration")


def _fail(message: str, rank: int | None = None) -> int:
    if (launcher_rank() if rank is None else rank) == 0:
        print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The checks of the shared options that need no MPI and no data, before any work (a usage
    error exits 2): --n against the dataset and the memory, --ledger, --checkpoint/--restart."""
    if args.n is not None:
        if args.n < MIN_SAMPLES:
            parser.error(f"--n {args.n} is too few samples: at least {MIN_SAMPLES}")
        if args.dataset == "digits" and args.n > DIGITS_SAMPLES:
            parser.error(f"--n {args.n:,}: --dataset digits has {DIGITS_SAMPLES:,} images (give at "
                         "most that many, or --dataset generated or teacher, of any size)")
        features = {"generated": 20, "teacher": args.teacher_dim}.get(args.dataset, 64)
        # the samples, their standardised copy and the train/test split of it (float64)
        check_memory(parser, 3 * 8.0 * args.n * features, f"--n {args.n} ({args.dataset})",
                     "use a smaller --n")
    if args.ledger and args.simulate:
        parser.error("--ledger needs a real run under mpiexec: a simulated run (--simulate) "
                     "has no supersteps")
    check_outputs(parser, [ledger_output(args.ledger)])
    # A simulated run's checkpoint folder is checked here; a real run's on rank 0, in the
    # training world (the other ranks may not see the same files).
    check_checkpoint(parser, args, lambda _: _check_checkpoint_dir(args) if args.simulate else None,
                     (ValueError, OutputError))


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_args(parser, args)
    try:
        if args.simulate and launcher_size() > 1:
            raise ValueError(f"--simulate runs on one process (a virtual clock) but was started on "
                             f"{launcher_size()} ranks: run it without mpiexec")
        prepare_dir(args.out, "--out-dir")  # before the work: a file in the way must not cost the run
        policies = _policies(args.policy)
        if args.simulate:
            config = make_config(args, args.workers)
        elif args.workers is not None:
            raise ValueError("--workers is for --simulate; under MPI the workers are ranks 1..n-1")
        # (A real run's options are checked once MPI says how many workers there are.)
        plan = _checkpoint_plan(args)
        if plan is not None and args.simulate:
            plan.check("simulated", policies, args.repeats)
        data = _load_data(args)
        if args.simulate:
            model = build_model(config, data)
            _say(args, model_report(config, model, simulated=True))
    except (ValueError, PolicyError, DatasetUnavailable, TorchUnavailable, CheckpointError, OutputError) as exc:
        return _fail(str(exc))
    if args.simulate:
        try:
            runs = [_run_sim(config, name, data, rep, plan, args)
                    for rep in range(args.repeats) for name in policies]
        except CheckpointError as exc:
            return _fail(str(exc))
        return _finish(args, config, runs, model)
    return _main_mpi(args, policies, data, plan)


def _load_data(args: argparse.Namespace) -> Any:
    return load_dataset(args.dataset, args.seed, teacher_dim=args.teacher_dim, samples=args.n)


def _checkpoint_plan(args: argparse.Namespace) -> CheckpointPlan | None:
    if args.checkpoint is None:  # (--restart without it: refused by check_args)
        return None
    if args.die_after_saves is not None and args.die_after_saves < 1:
        raise ValueError("--die-after-saves must be at least 1")
    every = args.checkpoint_every
    if every is None:
        every = 1.0 if args.simulate else 30.0
    return CheckpointPlan(Path(args.checkpoint), every=every, restart=args.restart,
                          die_after=args.die_after_saves, quiet=args.quiet)


def _check_checkpoint_dir(args: argparse.Namespace) -> None:
    """--checkpoint DIR can be written (OutputError) and, without --restart, holds nothing."""
    directory = Path(args.checkpoint)
    prepare_dir(directory, "--checkpoint")
    if directory.is_dir() and any(directory.iterdir()) and not args.restart:
        raise ValueError(f"--checkpoint {directory} is not empty: add --restart to resume "
                         "from the checkpoints in it, or choose an empty or new directory")


def _say(args: argparse.Namespace, line: str) -> None:
    """A line of the run's text report: on stdout, or with --json on stderr (stdout is for the
    JSON object), or nowhere with --json --quiet."""
    if not args.json:
        print(line, flush=True)
    elif not args.quiet:
        print(line, file=sys.stderr, flush=True)


def _run_sim(config: TrainConfig, name: str, data: Any, repeat: int,
             plan: CheckpointPlan | None, args: argparse.Namespace) -> PolicyRun:
    show = Progress(f"simulated {name} repeat {repeat}", float(config.duration), enabled=not args.quiet,
                    unit="virtual s")
    run = run_simulated(config, name, data, repeat, checkpoint=plan, progress=lambda t: show(min(t, config.duration)))
    acc = run.curve[-1][1] if run.curve else float("nan")
    resumed = _resumed(run, "virtual s")
    _say(args, f"[simulated] {run.label:24s} repeat {repeat}: {config.duration:g} virtual s, "
               f"{run.log.updates} updates, final accuracy {acc:.3f}{resumed}")
    return run


def _resumed(run: PolicyRun, unit: str) -> str:
    if run.resumed_at is None:
        return ""
    if run.finished_before:
        return " (finished before the restart: read from its checkpoint)"
    return f" (resumed from its checkpoint at {run.resumed_at:.3f} {unit})"


class _Trained(NamedTuple):
    """What a training world hands back to rank 0's report."""

    config: TrainConfig
    runs: list[PolicyRun]
    model: Any


def _main_mpi(args: argparse.Namespace, policies: list[str], data: Any,
              plan: CheckpointPlan | None) -> int:
    """A real run: every policy in turn on one training world, then rank 0 writes the outputs."""
    from mpi4py import MPI

    from hpcbsp.elastic.world import WorldTooSmall, launch_world  # (MPI only for a real run)

    rank = MPI.COMM_WORLD.Get_rank()
    try:
        outcome = launch_world(_train_world, args, policies, data, plan, timeout=args.timeout)
    except WorldTooSmall as exc:
        return _fail(f"a real run needs at least 2 ranks (1 server + workers), this job has "
                     f"{exc.size}: mpiexec -n 5 {PROG} ..., or use --simulate", rank)
    if isinstance(outcome, str):
        return _fail(outcome, rank)
    return _finish(args, *outcome) if rank == 0 else 0


def _train_world(world: World, args: argparse.Namespace, policies: list[str], data: Any,
                 plan: CheckpointPlan | None) -> _Trained | str:
    """Train every policy on ``world``.  Returns the runs (on rank 0; empty elsewhere), or the
    usage error that every rank found alike (the options, the model, the checkpoints).  Anything
    else raised on one rank ends the job as in every hpcbsp program (:mod:`hpcbsp.elastic.world`)."""
    try:
        config = make_config(args, world.n_workers, timeout=world.timeout)
        model = build_model(config, data)  # (a model that cannot be built stops every rank here)
    except (ValueError, RuntimeError) as exc:
        return str(exc)
    if world.is_server:
        _say(args, model_report(config, model))
    error = None
    if world.is_server and plan is not None:  # the checkpoints live where rank 0 (the server) writes
        try:
            _check_checkpoint_dir(args)
            plan.check("mpi", policies, args.repeats)
        except (ValueError, CheckpointError, OutputError) as exc:
            error = str(exc)
    error = world.bsp.broadcast(error)
    if error is not None:
        return error
    warm_up(model, data)
    world.bsp.sync()
    runs = []
    try:
        for rep in range(args.repeats):
            for name in policies:
                if world.is_server:
                    _say(args, f"[mpi] {name}: {config.n_workers} workers, {config.duration:g} s "
                               f"(repeat {rep})")
                run = run_mpi(world.comm, config, name, data, rep,
                              progress=None if args.quiet else _progress(config.duration),
                              checkpoint=plan)
                if run is not None:
                    runs.append(run)
                    if run.resumed_at is not None:
                        _say(args, f"  [{run.label}]{_resumed(run, 's')}")
                world.bsp.sync()
    except CheckpointError as exc:  # raised on every rank alike: a usage error, not a crash
        return str(exc)
    if args.ledger:  # (collective; checked before the work by check_args)
        world.bsp.ledger.save(args.ledger)
    return _Trained(config, runs, model)


def _progress(duration: float):
    """Progress of a real run's policies on stderr (the server's rank), with the accuracy."""
    shows: dict[str, Progress] = {}

    def show(label: str, t: float, log: Any) -> None:
        bar = shows.setdefault(label, Progress(label, float(duration), unit="s", every_s=1.0))
        acc = log.curve[-1][1] if log.curve else float("nan")
        bar(min(t, duration), f"accuracy {acc:.3f}, updates {log.updates}")
    return show


def _finish(args: argparse.Namespace, config: TrainConfig, runs: list[PolicyRun],
            model: Any = None) -> int:
    """Rank 0's report: the comparison as text (or, with --json, one JSON object) and the files."""
    cfg = {"argv": vars(args), "timing": asdict(config.timing),
           "options": asdict(config.options), "model": model_info(config, model)}
    comparison = compare(runs)
    if not args.json:
        print(format_table(comparison))
    written, skipped = write_outputs(args.out, runs, cfg, slowdown=config.timing.slowdown,
                                     plot=not args.no_plot)
    if args.json:
        print(json.dumps(_finite({
            "mode": "simulated" if args.simulate else "mpi", "workers": config.n_workers,
            "dataset": args.dataset, "samples": args.n, "model": cfg["model"], "repeats": args.repeats,
            "seed": args.seed, "duration_s": config.duration, "comparison": comparison,
            "written": [str(p) for p in written], "plot_skipped": skipped, "ledger": args.ledger}),
            default=_plain))
        return 0
    if skipped:
        print(skipped)
    print("wrote " + ", ".join(str(p) for p in written))
    if args.ledger:
        print(f"ledger written to {args.ledger}")
    return 0


def _finite(x: Any) -> Any:
    """``x`` with every NaN or infinity as None (JSON has neither)."""
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def _plain(x: Any) -> Any:
    """numpy scalars as Python numbers, for json.dumps."""
    if hasattr(x, "item"):
        return x.item()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


if __name__ == "__main__":
    sys.exit(main())
