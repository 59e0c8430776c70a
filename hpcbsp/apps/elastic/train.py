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
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from hpcbsp.elastic.data import DatasetUnavailable, load_dataset
from hpcbsp.elastic.models import TorchUnavailable
from hpcbsp.elastic.policies import REGISTRY, PolicyError, PolicyOptions
from hpcbsp.elastic.keyranges import servers_problem
from hpcbsp.elastic.timing import TimingModel
from hpcbsp.util.launcher import launcher_rank, launcher_size
from hpcbsp.util.outputs import OutputError, prepare_dir
from hpcbsp.util.progress import Progress

from .cli import PROG, build_parser, check_args, check_checkpoint_dir, finish, say, show_progress
from .experiment import (PolicyRun, TrainConfig, build_model, model_report, run_mpi, run_simulated,
                         servers_report, warm_up)
from .resume import CheckpointError, CheckpointPlan

if TYPE_CHECKING:
    from hpcbsp.elastic.world import World

__all__ = ["main", "build_parser"]

DEFAULT_SLOWDOWN = (1.0, 1.0, 1.5, 3.0)
#: Largest --jitter (lognormal sigma of iteration times) accepted.
MAX_JITTER = 3.0
#: Bounds that keep a run finite: a simulated run handles every iteration as an event (about
#: 30-100 us each with training, so 2 million take minutes), and every evaluation runs the model
#: over the test set.
MAX_SIMULATED_ITERATIONS = 2_000_000
MAX_EVALUATIONS = 100_000


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
                       lr_decay=args.lr_decay, servers=args.servers)


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


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_args(parser, args)
    try:
        if args.servers > 1 and args.simulate:
            raise ValueError(f"--servers {args.servers} is for a real run under mpiexec: the virtual "
                             "clock (--simulate) has no server ranks")
        problem = servers_problem(args.servers, launcher_size()) if args.servers > 1 else None
        if problem is not None:
            raise ValueError(problem)
        if args.simulate and launcher_size() > 1:
            raise ValueError(f"--simulate runs on one process (a virtual clock) but was started on "
                             f"{launcher_size()} ranks: run it without mpiexec")
        prepare_dir(args.out, "--out-dir")  # before the work: a file in the way must not cost the run
        policies = _policies(args.policy)
        if args.simulate:
            config = make_config(args, args.workers)
        elif args.workers is not None:
            raise ValueError("--workers is for --simulate; under MPI the workers are the ranks that do not serve")
        # (A real run's options are checked once MPI says how many workers there are.)
        plan = _checkpoint_plan(args)
        if plan is not None and args.simulate:
            plan.check("simulated", policies, args.repeats)
        data = _load_data(args)
        if args.simulate:
            model = build_model(config, data)
            say(args, model_report(config, model, simulated=True))
    except (ValueError, PolicyError, DatasetUnavailable, TorchUnavailable, CheckpointError, OutputError) as exc:
        return _fail(str(exc))
    if args.simulate:
        try:
            runs = [_run_sim(config, name, data, rep, plan, args)
                    for rep in range(args.repeats) for name in policies]
        except CheckpointError as exc:
            return _fail(str(exc))
        return finish(args, config, runs, model)
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


def _run_sim(config: TrainConfig, name: str, data: Any, repeat: int,
             plan: CheckpointPlan | None, args: argparse.Namespace) -> PolicyRun:
    show = Progress(f"simulated {name} repeat {repeat}", float(config.duration), enabled=not args.quiet,
                    unit="virtual s")
    run = run_simulated(config, name, data, repeat, checkpoint=plan, progress=lambda t: show(min(t, config.duration)))
    acc = run.curve[-1][1] if run.curve else float("nan")
    resumed = _resumed(run, "virtual s")
    say(args, f"[simulated] {run.label:24s} repeat {repeat}: {config.duration:g} virtual s, "
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
    return finish(args, *outcome) if rank == 0 else 0


def _train_world(world: World, args: argparse.Namespace, policies: list[str], data: Any,
                 plan: CheckpointPlan | None) -> _Trained | str:
    """Train every policy on ``world``.  Returns the runs (on rank 0; empty elsewhere), or the
    usage error that every rank found alike (the options, the model, the checkpoints).  Anything
    else raised on one rank ends the job as in every hpcbsp program (:mod:`hpcbsp.elastic.world`)."""
    try:
        config = make_config(args, world.size - args.servers, timeout=world.timeout)
        model = build_model(config, data)  # (a model that cannot be built stops every rank here)
    except (ValueError, RuntimeError) as exc:
        return str(exc)
    if world.is_server:
        say(args, model_report(config, model))
        if config.servers > 1:
            say(args, servers_report(config, model))
    error = None
    if world.is_server and plan is not None:  # the checkpoints live where rank 0 (the server) writes
        try:
            check_checkpoint_dir(args)
            plan.check("mpi", policies, args.repeats)
        except (ValueError, CheckpointError, OutputError) as exc:
            error = str(exc)
    error = world.bsp.broadcast(error)
    if error is not None:
        return error
    if args.ledger:  # every superstep's record (those above too), in files as the run goes (save merges them)
        world.bsp.ledger.stream_for(args.ledger)
    warm_up(model, data)
    world.bsp.sync()
    runs = []
    try:
        for rep in range(args.repeats):
            for name in policies:
                if world.is_server:
                    say(args, f"[mpi] {name}: {config.n_workers} workers, {config.duration:g} s "
                               f"(repeat {rep})")
                run = run_mpi(world.comm, config, name, data, rep,
                              progress=None if args.quiet else show_progress(config.duration),
                              checkpoint=plan)
                if run is not None:
                    runs.append(run)
                    if run.resumed_at is not None:
                        say(args, f"  [{run.label}]{_resumed(run, 's')}")
                world.bsp.sync()
    except CheckpointError as exc:  # raised on every rank alike: a usage error, not a crash
        return str(exc)
    if args.ledger:  # (collective; checked before the work by check_args)
        world.bsp.ledger.save(args.ledger)
    return _Trained(config, runs, model)


if __name__ == "__main__":
    sys.exit(main())
