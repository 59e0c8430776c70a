"""Classic small BSP programs (Bisseling's BSPedupack style): inner product, prefix sum, matvec.

    mpiexec -n P python -m hpcbsp.apps.classic [--n N] [--seed S] [--ledger PATH] [--json]

Each is a function of a :class:`~hpcbsp.BSP` context and this rank's block of the data; the tests
check them against numpy at several rank counts.  Run as a program, it runs all three on random
block-distributed data of length N and checks each against numpy (exit status 1 if one fails).
"""
from __future__ import annotations

import json
import sys

import numpy as np

from .. import kernels
from ..runtime import BSP
from ..runtime.api.distribution import block_range
from ..util.args.checks import check_memory, check_outputs, ledger_output
from ..util.args.parser import OneLineParser
from ..util.args.vocabulary import add_common_options, add_n
from ..util.text import plural


def inner_product(bsp: BSP, x_block: np.ndarray, y_block: np.ndarray) -> float:
    """Dot product of two block-distributed vectors (one superstep: each rank puts its partial
    sum into every rank's slot, then all ranks add the p partials in the same order, so every
    rank returns bit-identical results)."""
    partial = bsp.coarray(bsp.nprocs, dtype=np.float64, name="partial")
    local = kernels.dot(x_block, y_block)
    for q in range(bsp.nprocs):
        partial.put(q, [local], offset=bsp.pid)
    bsp.sync("inprod")
    return float(kernels.sum(partial.local))


def prefix_sum(bsp: BSP, x_block: np.ndarray) -> np.ndarray:
    """Inclusive prefix sum of a block-distributed vector: local scan, exchange of block totals,
    offset by the totals of lower ranks."""
    scan = np.cumsum(x_block)
    totals = bsp.coarray(bsp.nprocs, dtype=scan.dtype if scan.size else np.float64, name="totals")
    mine = scan[-1] if scan.size else 0
    for q in range(bsp.pid + 1, bsp.nprocs):
        totals.put(q, [mine], offset=bsp.pid)
    bsp.sync("prefix")
    return scan + totals.local[: bsp.pid].sum()


def matvec(bsp: BSP, a_rows: np.ndarray, x_block: np.ndarray, n: int) -> np.ndarray:
    """``y = A x`` with A distributed by blocks of rows and x, y by blocks of entries.

    Every rank gets the whole of x with one ``get`` per rank (superstep 1: fan-out of x), then
    multiplies its rows locally.  h-relation: each rank receives n - n/p values of x.
    """
    x = bsp.coarray(x_block.size, dtype=np.float64, name="x")
    x.local[:] = x_block  # registration is immediate: gets of this superstep see it
    parts = [x.get(q) for q in range(bsp.nprocs)]
    bsp.sync("fan-out x")
    x_full = np.concatenate([f.value for f in parts])
    assert x_full.size == n
    return a_rows @ x_full


def random_system(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A reproducible random matrix and vector (the same on every rank)."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, n)), rng.standard_normal(n)


def distributed_matvec(bsp: BSP, n: int, seed: int = 0) -> tuple[np.ndarray, float]:
    """Run :func:`matvec` on a random n x n system; return this rank's y block and the max
    error against numpy's ``A @ x`` (computed serially on every rank as the oracle)."""
    a, xv = random_system(n, seed)
    lo, hi = block_range(n, bsp.nprocs, bsp.pid)
    y_block = matvec(bsp, a[lo:hi], xv[lo:hi], n)
    err = float(np.max(np.abs(y_block - (a @ xv)[lo:hi]), initial=0.0))
    return y_block, err


def check_all(bsp: BSP, n: int, seed: int = 0) -> dict[str, float]:
    """Run the three programs on random data of length ``n``; every rank returns the largest
    error of each against numpy (the oracle: ``np.dot``, ``np.cumsum``, ``A @ x`` serially)."""
    rng = np.random.default_rng(seed)
    x, y = rng.standard_normal(n), rng.standard_normal(n)
    lo, hi = block_range(n, bsp.nprocs, bsp.pid)
    dot = inner_product(bsp, x[lo:hi], y[lo:hi])
    scan = prefix_sum(bsp, x[lo:hi])
    scan_err = float(np.max(np.abs(scan - np.cumsum(x)[lo:hi]), initial=0.0))
    _, mv_err = distributed_matvec(bsp, n, seed)
    return {"inner_product": abs(dot - float(np.dot(x, y))),
            "prefix_sum": float(bsp.allreduce(scan_err, op="max")),
            "matvec": float(bsp.allreduce(mv_err, op="max"))}


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="mpiexec -n P python -m hpcbsp.apps.classic",
                           description="Inner product, prefix sum and matvec as BSP programs on random "
                                       "block-distributed data, each checked against numpy.")
    add_n(parser, "vector length", per="in total", default=1000)
    add_common_options(parser, quiet=False, seed_help="seed of the random data")
    args = parser.parse_args(argv)
    check_memory(parser, 3 * 8.0 * args.n * args.n, f"--n {args.n} (the matvec's dense {args.n} x {args.n} matrix)",
                 "use a smaller --n")
    check_outputs(parser, [ledger_output(args.ledger)])
    tolerance = 1e-9 * max(1, args.n)
    with BSP() as bsp:
        if args.ledger:  # every superstep's record, in files as the run goes (save merges them)
            bsp.ledger.stream_for(args.ledger)
        errors = check_all(bsp, args.n, args.seed)
        if args.ledger:
            bsp.ledger.save(args.ledger)
        ok = all(e <= tolerance for e in errors.values())
        if bsp.pid == 0:
            if args.json:
                print(json.dumps({"n": args.n, "ranks": bsp.nprocs, "errors": errors, "tolerance": tolerance,
                                  "ok": ok}))
            else:
                print(f"classic BSP programs, n = {args.n:,} on {plural(bsp.nprocs, 'rank')}:")
                for name, err in errors.items():
                    print(f"  {name:14s} max |error| vs numpy = {err:.1e}  {'OK' if err <= tolerance else 'FAILED'}")
                if args.ledger:
                    print(f"ledger written to {args.ledger}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
