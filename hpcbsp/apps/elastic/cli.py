"""The command line and the outputs of ``python -m hpcbsp.apps.elastic.train``
(:mod:`.train` runs the training).

* :func:`build_parser`: the options;
* :func:`check_args`: the checks of the options that need no MPI and no data, made before any
  work (a usage error is one line and exit status 2): ``--n``, ``--ledger``, the checkpoint
  folder, and ``--device`` (:func:`device_problem`: a CUDA device asked of a torch without CUDA
  is refused here, before MPI starts or any data is loaded);
* :func:`say`, :func:`show_progress`, :func:`finish`: the run's text or JSON report on rank 0
  and the files it writes (:mod:`.report`).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from hpcbsp.elastic.data import DATASETS, DEFAULT_SAMPLES, DIGITS_SAMPLES
from hpcbsp.elastic.models import MODELS, TORCH_MODELS
from hpcbsp.elastic.policies import REGISTRY
from hpcbsp.elastic.wire import FORMATS
from hpcbsp.util.args.checks import check_checkpoint, check_memory, check_outputs, ledger_output
from hpcbsp.util.args.parser import OneLineParser
from hpcbsp.util.args.types import (fraction, integer, nonnegative_float, nonnegative_int, positive_float,
                                    positive_int, positive_seconds)
from hpcbsp.util.args.vocabulary import (add_alias, add_checkpoint, add_json, add_ledger, add_n, add_quiet,
                                         add_repeats, add_seed)
from hpcbsp.util.outputs import OutputError, prepare_dir
from hpcbsp.util.progress import Progress

from .experiment import PolicyRun, TrainConfig, model_info
from .report import compare, format_table, write_outputs

__all__ = ["PROG", "MIN_SAMPLES", "build_parser", "check_args", "check_checkpoint_dir", "device_problem",
           "say", "show_progress", "finish"]

PROG = "python -m hpcbsp.apps.elastic.train"
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
    g.add_argument("--servers", type=positive_int, default=1, metavar="S",
                   help="parameter-server ranks, each holding 1/S of the model (one per node where the "
                        "job spans nodes); the other ranks work (default 1; real runs only)")
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
    problem = device_problem(args.device, args.model)
    if problem is not None:
        parser.error(problem)
    # A simulated run's checkpoint folder is checked here; a real run's on rank 0, in the
    # training world (the other ranks may not see the same files).
    check_checkpoint(parser, args, lambda _: check_checkpoint_dir(args) if args.simulate else None,
                     (ValueError, OutputError))


def device_problem(device: str, model: str) -> str | None:
    """Why ``--device DEVICE`` cannot run ``--model MODEL`` here (None: it can).

    ``cpu`` always can.  Any other device is for the torch models only (the numpy ones compute
    on the CPU), needs torch, and must be one this torch build sees: ``cuda`` or ``cuda:K`` needs
    ``torch.cuda.is_available()`` (and K below the device count).  Imports torch only when a
    device other than the CPU is asked for.
    """
    if device.strip().lower() == "cpu":
        return None
    if model not in TORCH_MODELS:
        return (f"--device {device}: --model {model} computes with numpy on the CPU; --device "
                f"is for the torch models ({', '.join(TORCH_MODELS)})")
    try:
        from hpcbsp.elastic.torch.adapter import TorchModelError, check_device
    except ImportError:
        return (f"--device {device}: --model {model} needs PyTorch, which is not installed: "
                "`pip install 'hpcbsp[torch]'` (README: Installing torch)")
    try:
        check_device(device)
    except TorchModelError as exc:
        return str(exc)
    return None


def check_checkpoint_dir(args: argparse.Namespace) -> None:
    """--checkpoint DIR can be written (OutputError) and, without --restart, holds nothing."""
    directory = Path(args.checkpoint)
    prepare_dir(directory, "--checkpoint")
    if directory.is_dir() and any(directory.iterdir()) and not args.restart:
        raise ValueError(f"--checkpoint {directory} is not empty: add --restart to resume "
                         "from the checkpoints in it, or choose an empty or new directory")


def say(args: argparse.Namespace, line: str) -> None:
    """A line of the run's text report: on stdout, or with --json on stderr (stdout is for the
    JSON object), or nowhere with --json --quiet."""
    if not args.json:
        print(line, flush=True)
    elif not args.quiet:
        print(line, file=sys.stderr, flush=True)


def show_progress(duration: float):
    """Progress of a real run's policies on stderr (the server's rank), with the accuracy."""
    shows: dict[str, Progress] = {}

    def show(label: str, t: float, log: Any) -> None:
        bar = shows.setdefault(label, Progress(label, float(duration), unit="s", every_s=1.0))
        acc = log.curve[-1][1] if log.curve else float("nan")
        bar(min(t, duration), f"accuracy {acc:.3f}, updates {log.updates}")
    return show


def finish(args: argparse.Namespace, config: TrainConfig, runs: list[PolicyRun],
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
