"""``make run``: hpcbsp in one minute, on 2 ranks.

    mpiexec -n 2 python -m hpcbsp.apps.demo [--n N] [--out-dir DIR] [--seed S] [--ledger PATH] [--json]

1. runs a BSF Jacobi solve with the farm skeleton (rank 0 master, rank 1 worker) and checks it
   against ``numpy.linalg.solve``;
2. prints the superstep ledger of that run;
3. calibrates the BSF cost model from the parameters the run measured of itself and prints the
   predicted speedup curve and scalability boundary K_max for this machine;
4. writes the model and a speedup plot under ``runs/demo/``.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
from typing import Any

import hpcbsp
from hpcbsp.apps.bsf.system import solve
from hpcbsp.apps.bsf.jacobi import build as jacobi
from hpcbsp.util.args.checks import check_memory, check_out_dir, check_outputs, ledger_output
from hpcbsp.util.args.parser import OneLineParser
from hpcbsp.util.args.vocabulary import add_common_options, add_n
from hpcbsp.util.text import plural
from hpcbsp.runtime.superstep.ledgersummary import LedgerSummary, gather_summary


def run_demo(bsp: "hpcbsp.BSP", n: int, seed: int = 0, ledger: str | None = None, quiet: bool = False
             ) -> tuple[dict[str, Any], LedgerSummary | None]:
    """The Jacobi solve and the ledger's summary (on rank 0: every rank's window and totals,
    :mod:`hpcbsp.runtime.superstep.ledgersummary`); the ledger is saved to ``ledger`` if given
    (streamed: every superstep)."""
    args = argparse.Namespace(n=n, seed=seed, eps=1e-10, max_iter=500, ledger=ledger, quiet=quiet)
    out = solve(bsp, "BSF Jacobi", jacobi, args)
    return out, gather_summary(bsp.ledger)


def report(out: dict[str, Any], ledger: LedgerSummary, nprocs: int, out_dir: str) -> int:
    """Rank 0: print the run, its ledger, the model's prediction; write the model and the plot."""
    from hpcbsp.cost.farmmodel import format_farm_parameters, model_from_farm
    from hpcbsp.cost.modelfile import save_model
    from hpcbsp.cost.plot import plot_speedup
    from hpcbsp.cost.predict import format_prediction, prediction

    ok = out["converged"] and out["max_error"] < 1e-7
    print(f"hpcbsp demo: BSF Jacobi, n = {out['n']}, on {plural(nprocs, 'rank')} "
          f"(rank 0 master, {out['workers']} worker{'s' if out['workers'] != 1 else ''})")
    print(f"  {out['iterations']} iterations, {'converged' if out['converged'] else 'NOT converged'}; "
          f"max |x - numpy.linalg.solve(A, b)| = {out['max_error']:.1e}  {'OK' if ok else 'FAILED'}")
    print()
    print(ledger.text())
    print()
    print(format_farm_parameters(out["timings"]))
    # The band comes from the spread of single iterations: wide when they disagree (a busy machine).
    cm = model_from_farm(out["timings"], n_boot=200, spread=True)
    k_max = cm.model.k_max()
    top = max(16, 4 * k_max) if k_max else 256
    workers = sorted({1, 2, 4, 8, 16, 32, 64, 128, 256, top} & set(range(1, top + 1)) | ({k_max} if k_max else set()))
    print()
    print("predicted on this machine from that one run:")
    print(format_prediction(prediction(cm, workers)))
    print(f"(95% band and interval: the spread of the run's single iterations; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs while it ran)")
    os.makedirs(out_dir, exist_ok=True)
    model_path = os.path.join(out_dir, "MODEL.json")
    plot_path = os.path.join(out_dir, "speedup.png")
    save_model(model_path, cm)
    plot_speedup(cm, plot_path, title=f"BSF Jacobi n = {out['n']}: predicted speedup on this machine")
    print()
    print(f"wrote {model_path} and the plot {plot_path}")
    print(f"next: hpcbsp-cost predict {model_path} --workers 1,2,4,...,1024   "
          f"(or hpcbsp-cost calibrate -- python -m hpcbsp.apps.bsf.jacobi)")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="mpiexec -n 2 python -m hpcbsp.apps.demo", description=__doc__.split("\n\n")[0])
    add_n(parser, "order of the linear system", per="in total", default=2000)
    parser.add_argument("--out-dir", default=os.path.join("runs", "demo"),
                        help="where the model and the plot go (default runs/demo)")
    add_common_options(parser, seed_help="seed of the random system")
    args = parser.parse_args(argv)
    check_out_dir(parser, args.out_dir, "--out-dir")
    check_memory(parser, 3 * 8.0 * args.n * args.n, f"--n {args.n} (a dense {args.n} x {args.n} system)",
                 "use a smaller --n")
    check_outputs(parser, [ledger_output(args.ledger)])
    from mpi4py import MPI

    size = MPI.COMM_WORLD.Get_size()
    if size == 1:  # the prediction is the point, and one rank cannot measure communication
        from hpcbsp.runtime.launch import rerun_command

        parser.error("one rank measures no communication (the master would be its own worker), "
                     "so it cannot predict how the solve scales; run it on 2 ranks: "
                     + rerun_command(2, argv))
    if args.n < max(2, size - 1):
        parser.error(f"--n must be at least {max(2, size - 1)}, got {args.n}")
    out, ledger = hpcbsp.run(run_demo, args.n, args.seed, args.ledger, args.quiet)
    if MPI.COMM_WORLD.Get_rank() != 0:
        return 0
    assert ledger is not None  # (rank 0's)
    if args.json:
        with contextlib.redirect_stdout(io.StringIO()):
            status = report(out, ledger, size, args.out_dir)
        doc = {k: v for k, v in out.items() if k != "timings"}
        doc.update(ranks=size, ok=status == 0, model=os.path.join(args.out_dir, "MODEL.json"),
                   plot=os.path.join(args.out_dir, "speedup.png"), ledger=args.ledger)
        print(json.dumps(doc))
        return status
    status = report(out, ledger, size, args.out_dir)
    if args.ledger:
        print(f"ledger written to {args.ledger}")
    return status

if __name__ == "__main__":
    sys.exit(main())
