"""Data-parallel training on a parameter server under BSP, ASP, SSP, DSSP, ElasticBSP or backup workers.

Real run (rank 0 serves, ranks 1..n are workers)::

    mpiexec -n 5 python -m hpcbsp.elastic.train --policy elastic --R 20 --slowdown 1,1,1.5,3

Virtual-clock run of the same thing (no MPI; any number of workers)::

    python -m hpcbsp.elastic.train --simulate --policy all --slowdown 1,1,1.5,3

Each policy trains for ``--duration`` seconds; the output directory receives ``curves.csv``
(accuracy vs time per policy), ``workers.csv`` (waiting time per worker), ``pushes.csv`` (every
push time the server logged), ``summary.json`` (staleness statistics, time to reach BSP's final
accuracy, the configuration) and ``accuracy.png``.

A long run saves itself with ``--checkpoint DIR`` and, after a kill, resumes with the same
command plus ``--restart``; a simulated run then ends with exactly the bits an uninterrupted one
gives, a real run goes on from the server's last saved state (see ``hpcbsp.elastic.resume``).
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..util.args import OneLineParser, launcher_rank
from .data import DATASETS, DatasetUnavailable, load_dataset
from .experiment import PolicyRun, TrainConfig, build_model, run_mpi, run_simulated, warm_up
from .policies import REGISTRY, PolicyError, PolicyOptions
from .report import compare, format_table, write_outputs
from .resume import CheckpointError, CheckpointPlan
from .timing import TimingModel

__all__ = ["main", "build_parser"]

DEFAULT_SLOWDOWN = (1.0, 1.0, 1.5, 3.0)
PROG = "python -m hpcbsp.elastic.train"


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0],
                formatter_class=argparse.RawDescriptionHelpFormatter,
                epilog="Example: mpiexec -n 5 python -m hpcbsp.elastic.train --policy all --duration 8")
    g = p.add_argument_group("policies")
    g.add_argument("--policy", default="all",
                   help=f"comma-separated policies or 'all' ({', '.join(REGISTRY)}); default all")
    g.add_argument("--R", type=int, default=20, help="ElasticBSP lookahead: most iterations between barriers (default 20)")
    g.add_argument("--s", type=int, default=3, help="SSP staleness bound (default 3)")
    g.add_argument("--s-lower", type=int, default=3, help="DSSP lower bound s_L (default 3)")
    g.add_argument("--s-upper", type=int, default=15, help="DSSP upper bound s_U (default 15)")
    g.add_argument("--backup", type=int, default=1, help="backup workers b: the first n-b gradients count (default 1)")
    g.add_argument("--window", type=int, default=3,
                   help="ElasticBSP/DSSP predict an iteration time as the median of the last WINDOW intervals (default 3)")
    g = p.add_argument_group("workers and timing")
    g.add_argument("--slowdown", default=None,
                   help="per-worker iteration-time multipliers, one per worker, e.g. 1,1,1.5,3 "
                        "(default: 1,1,1.5,3 for 4 workers, else all 1 but the last worker at 3)")
    g.add_argument("--workers", type=int, default=None, help="number of workers with --simulate (default 4)")
    g.add_argument("--base-delay", type=float, default=0.02, help="iteration time of a worker at slowdown 1, seconds (default 0.02)")
    g.add_argument("--jitter", type=float, default=0.1, help="lognormal sigma of iteration-time noise (default 0.1)")
    g.add_argument("--change-at", type=float, default=None, help="time (s) at which --change-worker changes speed (default: never)")
    g.add_argument("--change-worker", type=int, default=0, help="worker whose speed changes (default 0)")
    g.add_argument("--change-factor", type=float, default=2.0, help="its iteration-time factor after the change (default 2)")
    g.add_argument("--stall-prob", type=float, default=0.0, help="probability that an iteration stalls (default 0)")
    g.add_argument("--stall-factor", type=float, default=10.0, help="how much longer a stalled iteration takes (default 10)")
    g = p.add_argument_group("training")
    g.add_argument("--dataset", choices=DATASETS, default="digits",
                   help="digits (scikit-learn's bundled images; extra 'digits') or generated clusters (default digits)")
    g.add_argument("--model", choices=("softmax", "mlp"), default="softmax", help="default softmax")
    g.add_argument("--hidden", type=int, default=32, help="MLP hidden units (default 32)")
    g.add_argument("--lr", type=float, default=0.05, help="SGD learning rate (default 0.05)")
    g.add_argument("--batch", type=int, default=16, help="mini-batch size per worker (default 16)")
    g.add_argument("--duration", type=float, default=10.0, help="seconds of training per policy (default 10)")
    g.add_argument("--eval-every", type=float, default=0.25, help="seconds between test-accuracy evaluations (default 0.25)")
    g.add_argument("--repeats", type=int, default=1, help="runs per policy with different seeds; medians reported (default 1)")
    g.add_argument("--seed", type=int, default=0)
    g = p.add_argument_group("run")
    g.add_argument("--simulate", action="store_true", help="virtual clock instead of MPI (no mpiexec needed)")
    g.add_argument("--out", type=Path, default=Path("runs/elastic"), help="output directory (default runs/elastic)")
    g.add_argument("--no-plot", action="store_true", help="do not write accuracy.png")
    g.add_argument("--timeout", type=float, default=60.0, help="longest single wait in an MPI run before failing (default 60 s)")
    g = p.add_argument_group("checkpoint and restart")
    g.add_argument("--checkpoint", type=Path, default=None, metavar="DIR",
                   help="save each policy run under DIR (one subdirectory per policy and repeat)")
    g.add_argument("--checkpoint-every", type=float, default=None, metavar="SECONDS",
                   help="seconds between saves: virtual with --simulate (default 1), wall-clock "
                        "otherwise (default 30; each save pauses the server for about a second "
                        "per million pushes logged)")
    g.add_argument("--restart", action="store_true",
                   help="resume every run from its checkpoint in --checkpoint DIR (runs without "
                        "one start afresh, finished ones are not run again); with --simulate the "
                        "result is bit-identical to an uninterrupted run")
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


def make_config(args: argparse.Namespace, n_workers: int | None) -> TrainConfig:
    """Validate the options into a :class:`TrainConfig` (ValueError/PolicyError on bad input)."""
    if n_workers is not None and n_workers < 1:
        raise ValueError("needs at least one worker")
    for name in ("duration", "eval_every"):
        if getattr(args, name) <= 0:
            raise ValueError(f"--{name.replace('_', '-')} must be positive")
    if args.lr <= 0 or args.batch < 1 or args.repeats < 1 or args.hidden < 1 or args.timeout <= 0:
        raise ValueError("--lr and --timeout must be positive; --batch, --repeats and --hidden at least 1")
    options = PolicyOptions(R=args.R, s=args.s, s_lower=args.s_lower, s_upper=args.s_upper,
                            backup=args.backup, window=args.window)
    slowdown = _slowdown(args.slowdown, n_workers)
    if "backup" in _policies(args.policy) and args.backup >= len(slowdown):
        raise ValueError(f"--backup {args.backup} must be fewer than the {len(slowdown)} workers")
    timing = TimingModel(base_s=args.base_delay, slowdown=slowdown, jitter=args.jitter,
                         change_at=args.change_at, change_worker=args.change_worker,
                         change_factor=args.change_factor, stall_prob=args.stall_prob,
                         stall_factor=args.stall_factor, seed=args.seed)
    return TrainConfig(timing=timing, options=options, model=args.model, hidden=args.hidden, lr=args.lr,
                       batch=args.batch, duration=args.duration, eval_every=args.eval_every,
                       seed=args.seed, timeout=args.timeout)


def _fail(message: str, rank: int | None = None) -> int:
    if (launcher_rank() if rank is None else rank) == 0:
        print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        policies = _policies(args.policy)
        if args.simulate:
            config = make_config(args, args.workers)
        elif args.workers is not None:
            raise ValueError("--workers is for --simulate; under MPI the workers are ranks 1..n-1")
        # (A real run's options are checked once MPI says how many workers there are.)
        plan = _checkpoint_plan(args)
        data = load_dataset(args.dataset, args.seed)
    except (ValueError, PolicyError, DatasetUnavailable) as exc:
        return _fail(str(exc))
    if args.simulate:
        try:
            runs = [_run_sim(config, name, data, rep, plan)
                    for rep in range(args.repeats) for name in policies]
        except CheckpointError as exc:
            return _fail(str(exc))
        return _finish(args, config, runs)
    return _main_mpi(args, policies, data, plan)


def _checkpoint_plan(args: argparse.Namespace) -> CheckpointPlan | None:
    if args.checkpoint is None:
        if args.restart:
            raise ValueError("--restart needs --checkpoint DIR: the directory the killed run saved to")
        return None
    if args.die_after_saves is not None and args.die_after_saves < 1:
        raise ValueError("--die-after-saves must be at least 1")
    if args.simulate:  # (a real run: rank 0 checks, the others may not see the same files)
        _check_checkpoint_dir(args)
    every = args.checkpoint_every
    if every is None:
        every = 1.0 if args.simulate else 30.0
    return CheckpointPlan(args.checkpoint, every=every, restart=args.restart,
                          die_after=args.die_after_saves)


def _check_checkpoint_dir(args: argparse.Namespace) -> None:
    if args.checkpoint.exists() and not args.checkpoint.is_dir():
        raise ValueError(f"--checkpoint {args.checkpoint} exists and is not a directory")
    if args.checkpoint.is_dir() and any(args.checkpoint.iterdir()) and not args.restart:
        raise ValueError(f"--checkpoint {args.checkpoint} already holds checkpoints: add --restart "
                         "to resume from them, or choose an empty directory")


def _run_sim(config: TrainConfig, name: str, data: Any, repeat: int,
             plan: CheckpointPlan | None) -> PolicyRun:
    run = run_simulated(config, name, data, repeat, checkpoint=plan)
    acc = run.curve[-1][1] if run.curve else float("nan")
    resumed = _resumed(run, "virtual s")
    print(f"[simulated] {run.label:24s} repeat {repeat}: {config.duration:g} virtual s, "
          f"{run.log.updates} updates, final accuracy {acc:.3f}{resumed}", flush=True)
    return run


def _resumed(run: PolicyRun, unit: str) -> str:
    if run.resumed_at is None:
        return ""
    if run.finished_before:
        return " (finished before the restart: read from its checkpoint)"
    return f" (resumed from its checkpoint at {run.resumed_at:.3f} {unit})"


def _main_mpi(args: argparse.Namespace, policies: list[str], data: Any,
              plan: CheckpointPlan | None) -> int:
    from mpi4py import MPI

    from hpcbsp.runtime import deathwatch
    from hpcbsp.runtime.launch import check_world
    from hpcbsp.runtime.report import abort_job

    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    try:
        check_world(world.Get_size())
        if world.Get_size() < 2:
            raise ValueError("a real run needs at least 2 ranks (1 server + workers): "
                             "mpiexec -n 5 python -m hpcbsp.elastic.train ..., or use --simulate")
        config = make_config(args, world.Get_size() - 1)
    except (ValueError, RuntimeError) as exc:
        return _fail(str(exc), rank)
    error = None
    if rank == 0 and plan is not None:  # the checkpoints live where rank 0 (the server) writes
        try:
            _check_checkpoint_dir(args)
        except ValueError as exc:
            error = str(exc)
    error = world.bcast(error, root=0)
    if error is not None:
        return _fail(error, rank)
    deathwatch.start(rank, world.Get_size())  # a rank that dies silently is named
    comm = world.Dup()
    try:
        warm_up(build_model(config, data), data)
        comm.Barrier()
        runs = []
        for rep in range(args.repeats):
            for name in policies:
                if rank == 0:
                    print(f"[mpi] {name}: {config.n_workers} workers, {config.duration:g} s "
                          f"(repeat {rep})", flush=True)
                run = run_mpi(comm, config, name, data, rep, progress=_progress(config.duration),
                              checkpoint=plan)
                if run is not None:
                    runs.append(run)
                    if run.resumed_at is not None:
                        print(f"  [{run.label}]{_resumed(run, 's')}", flush=True)
                comm.Barrier()
        status = _finish(args, config, runs) if rank == 0 else 0
    except CheckpointError as exc:  # raised on every rank alike: a usage error, not a crash
        comm.Free()
        return _fail(str(exc), rank)
    except Exception as exc:  # one rank failing must not leave the others waiting forever
        abort_job(f"{PROG}: rank {rank}: {type(exc).__name__}: {exc}\n")
        return 1  # (not reached: abort_job ends the job)
    comm.Free()
    return status


def _progress(duration: float):
    last = [-1.0]

    def show(label: str, t: float, log: Any) -> None:
        if t - last[0] >= 1.0 or not log.curve:
            last[0] = t
            acc = log.curve[-1][1] if log.curve else float("nan")
            print(f"  [{label}] {t:5.1f}/{duration:g} s  accuracy {acc:.3f}  updates {log.updates}",
                  flush=True)
    return show


def _finish(args: argparse.Namespace, config: TrainConfig, runs: list[PolicyRun]) -> int:
    cfg = {"argv": vars(args), "timing": asdict(config.timing),
           "options": asdict(config.options)}
    print(format_table(compare(runs)))
    written, skipped = write_outputs(args.out, runs, cfg, slowdown=config.timing.slowdown,
                                     plot=not args.no_plot)
    if skipped:
        print(skipped)
    print("wrote " + ", ".join(str(p) for p in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
