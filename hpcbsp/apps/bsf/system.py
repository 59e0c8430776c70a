"""What the BSF linear-system apps (Jacobi, Cimmino) share: the test system, the run, the check,
the report and the command line.

An app supplies a function ``problem(a, b, args) -> BSFProblem`` and its own options; this module
builds the system from a seed on every rank, runs the farm, checks the answer against
``numpy.linalg.solve`` on rank 0 and prints what the run measured of itself.
"""
from __future__ import annotations

import argparse
import json
from typing import Any, Callable

import numpy as np

import hpcbsp
from hpcbsp import kernels
from hpcbsp.farm import BSFProblem, FarmCheckpoint, parse_emulation, run_farm
from hpcbsp.runtime.api.checkpoint import exists as checkpoint_exists
from hpcbsp.util.args.checks import check_checkpoint, check_memory, check_outputs, ledger_output
from hpcbsp.util.args.parser import OneLineParser
from hpcbsp.util.args.types import positive_float, positive_int
from hpcbsp.util.args.vocabulary import add_checkpoint, add_common_options, add_n
from hpcbsp.util.choices import EXCHANGES
from hpcbsp.util.progress import Progress
from hpcbsp.util.text import plural

ProblemBuilder = Callable[[np.ndarray, np.ndarray, argparse.Namespace], BSFProblem]


def diagonally_dominant_system(n: int, seed: int = 0, dominance: float = 1.5) -> tuple[np.ndarray, np.ndarray]:
    """A reproducible n×n system whose diagonal is ``dominance`` times its row's off-diagonal sum.

    ``dominance > 1`` makes A strictly diagonally dominant, so Jacobi converges with rate at
    most 1/dominance; the off-diagonal entries are positive, so the rate is close to that bound
    and a run takes a few dozen iterations (enough to time).  The same seed gives the same
    system on every rank.
    """
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.0, 1.0, size=(n, n))
    np.fill_diagonal(a, 0.0)
    off = np.abs(a).sum(axis=1)
    np.fill_diagonal(a, dominance * off + 1.0)
    b = rng.uniform(-1.0, 1.0, size=n)
    return a, b


def vector_sum_problem(n: int, map_fn: Callable[[np.ndarray, slice], np.ndarray],
                       compute: Callable[[np.ndarray, np.ndarray], np.ndarray], eps: float) -> BSFProblem:
    """A BSF problem over the n rows or columns of a system: a sublist is a ``slice``, ⊕ is vector
    addition, and the master stops when ||x' − x||₂ < eps."""
    def stop(x_next: np.ndarray, x: np.ndarray) -> bool:
        diff = x_next - x
        return kernels.sqnorm(diff) < eps * eps

    return BSFProblem(items=lambda start, end: slice(start, end), list_length=n, map=map_fn, reduce=np.add,
                      fold=lambda blk: blk.sum(axis=0), compute=compute, stop=stop)


def solve(bsp: "hpcbsp.BSP", name: str, build: ProblemBuilder, args: argparse.Namespace,
          dominance: float = 1.5) -> dict[str, Any]:
    """Run one app on this BSP context; rank 0's result carries the check against numpy."""
    if args.ledger:  # every superstep's record, in files as the run goes (save merges them)
        bsp.ledger.stream_for(args.ledger)
    a, b = diagonally_dominant_system(args.n, args.seed, dominance)
    # The options of app_parser; callers that build their own namespace (the demo) may omit them.
    ck_path, out_path = getattr(args, "checkpoint", None), getattr(args, "out", None)
    quiet = getattr(args, "quiet", False)
    checkpoint = FarmCheckpoint(ck_path, args.every, args.restart, quiet=quiet) if ck_path else None
    show = Progress(name, args.max_iter, enabled=not quiet and bsp.pid == 0, unit="iteration", limit=True)
    spec = getattr(args, "emulate_compute", None)
    result = run_farm(bsp, build(a, b, args), np.zeros(args.n), max_iter=args.max_iter,
                      label=f"{name} n={args.n}", checkpoint=checkpoint, progress=show,
                      exchange=getattr(args, "exchange", None),
                      emulate=parse_emulation(spec) if spec else None)
    if out_path and bsp.pid == 0:
        np.save(out_path, result.x)
    if args.ledger:
        bsp.ledger.save(args.ledger)
    out: dict[str, Any] = {"n": args.n, "iterations": result.iterations, "converged": result.converged,
                           "workers": result.workers, "timings": result.timings.as_dict(),
                           "emulated_compute": result.timings.emulated}
    if bsp.pid == 0:
        out["max_error"] = float(np.max(np.abs(result.x - np.linalg.solve(a, b))))
    return out


def report(out: dict[str, Any], tolerance: float, name: str, argv: list[str] | None = None) -> int:
    """Print rank 0's summary; return the exit status (1 if the check failed).

    A run on one rank measured no communication: it prints no K_max, but the command that
    gives one (``argv``: the arguments to repeat, default ``sys.argv[1:]``).
    """
    from hpcbsp.cost.errors import CostInputError
    from hpcbsp.cost.farmmodel import format_farm_parameters, model_from_farm
    from hpcbsp.runtime.launch import rerun_command

    if out.get("emulated_compute"):
        # A simulation of compute: x is not a solution, so there is nothing to check it against.
        print(f"{name}: n = {out['n']}, K = {out['workers']} worker(s), {out['iterations']} iterations "
              "(fixed), no check against numpy")
        print(format_farm_parameters(out["timings"]))
        return 0
    ok = out["converged"] and out["max_error"] <= tolerance
    print(f"{name}: n = {out['n']}, K = {plural(out['workers'], 'worker')}, {plural(out['iterations'], 'iteration')}, "
          f"{'converged' if out['converged'] else 'NOT converged'}")
    print(f"check against numpy.linalg.solve: max |x - x*| = {out['max_error']:.2e} "
          f"(tolerance {tolerance:.0e})  {'OK' if ok else 'FAILED'}")
    print(format_farm_parameters(out["timings"]))
    try:
        cm = model_from_farm(out["timings"])
    except CostInputError as exc:  # one rank: no prediction rather than a wrong one
        print(f"predicted scalability boundary K_max: none; {exc}: {rerun_command(2, argv)}")
        return 0 if ok else 1
    lo, hi = cm.k_max_interval()
    k_max = cm.model.k_max()
    print(f"predicted scalability boundary K_max = {k_max if k_max else 'none (no turnover)'} "
          f"(95% interval over iterations [{lo}, {hi if hi is not None else 'no turnover'}])")
    return 0 if ok else 1


def app_parser(module: str, description: str, n: int, max_iter: int) -> OneLineParser:
    """The options every linear-system app has (the shared vocabulary of docs/cli.md)."""
    parser = OneLineParser(prog=f"mpiexec -n P python -m hpcbsp.apps.bsf.{module}", description=description)
    add_n(parser, "order of the system, also the list length l", per="in total", default=n)
    parser.add_argument("--eps", type=positive_float, default=1e-10, help="stop when ||x' - x||_2 < eps (default 1e-10)")
    parser.add_argument("--max-iter", type=positive_int, default=max_iter, help=f"iteration limit (default {max_iter})")
    add_common_options(parser, seed_help="seed of the random system")
    parser.add_argument("--out", metavar="X.npy", help="write the solution x (rank 0)")
    add_checkpoint(parser, "iterations (x and the iteration count are saved; a restart may use any number of ranks)")
    parser.add_argument("--exchange", choices=EXCHANGES,
                        help="master-worker exchange: one by one or a binomial tree (default $HPCBSP_FARM_EXCHANGE "
                             "or linear); both give the same bits")
    parser.add_argument("--emulate-compute", nargs="?", const="measure", metavar="t_map=S[,t_a=S]",
                        help="a SIMULATION of compute: workers wait the Map's measured (or given) time instead "
                             "of computing; runs exactly --max-iter iterations and x is not a solution")
    return parser


def app_main(parser: OneLineParser, argv: list[str] | None, name: str, build: ProblemBuilder, *,
             dominance: float, tolerance_factor: float) -> int:
    """Parse and check the options, run the app on MPI.COMM_WORLD, report on rank 0."""
    args = parser.parse_args(argv)
    # never over a folder that is not a farm checkpoint
    check_checkpoint(parser, args, lambda path: FarmCheckpoint(path).check(), (hpcbsp.BSPError,),
                     exists=checkpoint_exists)
    if args.emulate_compute:
        try:
            parse_emulation(args.emulate_compute)
        except ValueError as exc:
            parser.error(f"--emulate-compute: {exc}")
    # Every rank holds the dense system A (n x n float64) and the oracle copies it once more.
    check_memory(parser, 3 * 8.0 * args.n * args.n, f"--n {args.n} (a dense {args.n} x {args.n} system)",
                 "use a smaller --n")
    check_outputs(parser, [(args.out, "--out file", (".npy",)), ledger_output(args.ledger)])
    from mpi4py import MPI

    size = MPI.COMM_WORLD.Get_size()
    if size - 1 > args.n:
        parser.error(f"{size - 1} workers but a list of only {args.n}: use at most {args.n + 1} ranks")
    out = hpcbsp.run(solve, name, build, args, dominance)
    if MPI.COMM_WORLD.Get_rank() != 0:
        return 0
    tolerance = tolerance_factor * args.eps
    if args.json:
        print(json.dumps(out))
        if out.get("emulated_compute"):
            return 0
        return 0 if out["converged"] and out["max_error"] <= tolerance else 1
    return report(out, tolerance, name, argv)


if __name__ == "__main__":
    import sys

    from hpcbsp.util.args.parser import not_a_program

    sys.exit(not_a_program("hpcbsp.apps.bsf.system",
                           "run python -m hpcbsp.apps.bsf.jacobi or python -m hpcbsp.apps.bsf.cimmino (--help for options)"))
