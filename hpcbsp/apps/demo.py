"""``make run``: a short demonstration of hpcbsp on 2 ranks.

    mpiexec -n 2 python -m hpcbsp.apps.demo [--n N]

Runs a block-distributed matrix-vector product as a BSP program, checks it against numpy and
prints the superstep ledger.
"""
from __future__ import annotations

import argparse
import sys

import hpcbsp
from hpcbsp.apps.classic import distributed_matvec
from hpcbsp.runtime.ledger import summarize


def demo(bsp: "hpcbsp.BSP", n: int) -> int:
    if bsp.pid == 0:
        print(f"hpcbsp demo: y = A x with A {n}x{n} in row blocks on {bsp.nprocs} ranks")
    _, err = distributed_matvec(bsp, n)
    worst = bsp.allreduce(err, op="max")
    records = bsp.ledger.gather()
    if bsp.pid == 0:
        ok = worst < 1e-9 * n
        print(f"check against numpy A @ x: max |error| = {worst:.2e}  {'OK' if ok else 'FAILED'}")
        print(summarize(records))
        return 0 if ok else 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hpcbsp.apps.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2000, help="matrix order (default 2000)")
    args = parser.parse_args(argv)
    if args.n < 1:
        parser.error("--n must be at least 1")
    return hpcbsp.run(demo, args.n)


if __name__ == "__main__":
    sys.exit(main())
