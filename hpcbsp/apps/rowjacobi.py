"""Jacobi on block rows, the classic BSP way: each rank owns a block of rows of ``A x = b`` (dense
or CSR) and the matching block of x; one superstep per sweep.

    mpiexec -n P python -m hpcbsp.apps.rowjacobi [--n N] [--format dense|csr] [--per-row K]
                                                 [--eps E] [--max-iter M] [--seed S]

Superstep of sweep k: sweep the local rows with x^k (the Numba kernels
:func:`~hpcbsp.kernels.jacobi_sweep_dense` / :func:`~hpcbsp.kernels.jacobi_sweep_csr`), then put
the new block into every rank's copy of x and this rank's ``||x^{k+1} - x^k||²`` share
(:func:`~hpcbsp.kernels.sqnorm`) into every rank's slot of a small coarray.  After the sync every
rank holds all of x^{k+1} and adds the p shares in the same order, so all ranks take the same
stop decision.  h-relation per sweep: ``(n/p + 1)(p - 1)`` values out of each rank.  The final
residual ``||b - A x||`` uses :func:`~hpcbsp.kernels.csr_matvec` for CSR rows.

(The BSF Jacobi of :mod:`hpcbsp.apps.bsf.jacobi` is the master/worker farm formulation of the same
iteration; this one is the SPMD one, without a master.)
"""
from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .. import kernels
from ..kernels.reference import csr_to_dense
from ..runtime import BSP
from ..runtime.api.distribution import block_range
from ..util.args.checks import check_memory, check_outputs, ledger_output
from ..util.args.parser import OneLineParser
from ..util.args.types import nonnegative_int, positive_float, positive_int
from ..util.args.vocabulary import add_common_options, add_n
from ..util.text import plural
from ..util.progress import Progress


@dataclass
class CSRRows:
    """A block of rows in CSR form with global column numbers (as ``scipy.sparse`` holds them)."""

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray

    def matvec(self, x: np.ndarray) -> np.ndarray:
        return kernels.csr_matvec(self.indptr, self.indices, self.data, x, check=False)

    def rows(self, lo: int, hi: int) -> "CSRRows":
        """Rows lo..hi-1 as a block of their own."""
        start, stop = int(self.indptr[lo]), int(self.indptr[hi])
        return CSRRows(self.indptr[lo:hi + 1] - start, self.indices[start:stop],
                       self.data[start:stop])

    def to_dense(self, ncols: int) -> np.ndarray:
        return csr_to_dense(self.indptr, self.indices, self.data, ncols)


@dataclass
class JacobiResult:
    x_block: np.ndarray    # this rank's block of the solution
    sweeps: int            # sweeps done (supersteps of iteration)
    converged: bool        # ||x^{k+1} - x^k|| < eps reached within max_iter
    step_norm: float       # the last ||x^{k+1} - x^k||
    residual: float        # ||b - A x|| of the result, over all ranks


def dominant_system(n: int, fmt: str = "dense", per_row: int = 5, dominance: float = 1.5,
                    seed: int = 0) -> tuple["np.ndarray | CSRRows", np.ndarray]:
    """A reproducible strictly diagonally dominant system (the same on every rank).

    ``per_row`` off-diagonal entries per row in random columns for ``"csr"`` (duplicates add);
    ``"dense"`` fills every entry.  The diagonal is ``dominance`` times the row's off-diagonal
    magnitude plus one, so Jacobi converges.
    """
    if n < 1:
        raise ValueError(f"the system needs at least one row, got n = {n}")
    rng = np.random.default_rng(seed)
    b = rng.uniform(-1.0, 1.0, n)
    if fmt == "dense":
        a = rng.uniform(-1.0, 1.0, (n, n))
        np.fill_diagonal(a, 0.0)
        np.fill_diagonal(a, dominance * np.abs(a).sum(axis=1) + 1.0)
        return a, b
    if fmt != "csr":
        raise ValueError(f"unknown format {fmt!r}; choose dense or csr")
    k = min(per_row, n - 1)
    cols = rng.integers(0, n - 1, (n, k))
    cols += cols >= np.arange(n)[:, None]          # skip the diagonal
    vals = rng.uniform(-1.0, 1.0, (n, k))
    diag = dominance * np.abs(vals).sum(axis=1) + 1.0
    indices = np.concatenate([np.arange(n)[:, None], cols], axis=1).ravel()
    data = np.concatenate([diag[:, None], vals], axis=1).ravel()
    indptr = np.arange(0, n * (k + 1) + 1, k + 1, dtype=np.int64)
    return CSRRows(indptr, indices.astype(np.int64), data), b


def jacobi(bsp: BSP, rows: "np.ndarray | CSRRows", b_block: np.ndarray, n: int,
           eps: float = 1e-10, max_iter: int = 1000,
           progress: Callable[[int], None] | None = None) -> JacobiResult:
    """Solve ``A x = b`` by Jacobi sweeps; this rank holds rows ``block_range(n, p, pid)``.

    Parameters
    ----------
    bsp : BSP
        The context (collective: every rank calls this with its own block).
    rows : ndarray of shape (nb, n), or CSRRows
        This rank's rows of A, with global column numbers.
    b_block : ndarray of shape (nb,)
        This rank's block of b.
    n : int
        The order of the system.
    eps, max_iter : float, int
        Stop when ``||x^{k+1} - x^k||_2 < eps`` or after ``max_iter`` sweeps.
    progress : callable, optional
        Called as ``progress(sweeps)`` after every sweep (e.g. :class:`hpcbsp.util.progress.Progress`).
    """
    lo, hi = block_range(n, bsp.nprocs, bsp.pid)
    nb = hi - lo
    if b_block.shape != (nb,):
        raise ValueError(f"rank {bsp.pid}: b block of shape {b_block.shape}, expected ({nb},)")
    dense_rows = rows if isinstance(rows, np.ndarray) else None
    csr_rows = None if isinstance(rows, np.ndarray) else rows
    if dense_rows is not None and dense_rows.shape != (nb, n):
        raise ValueError(f"rank {bsp.pid}: rows of shape {dense_rows.shape}, expected ({nb}, {n})")
    x = bsp.coarray(n, dtype=np.float64, name="x")          # every rank: all of x
    shares = bsp.coarray(bsp.nprocs, dtype=np.float64, name="step shares")
    new = np.empty(nb)
    sweeps, step, converged = 0, math.inf, False
    while sweeps < max_iter and not converged:
        if dense_rows is not None:
            kernels.jacobi_sweep_dense(dense_rows, b_block, x.local, lo, out=new)
        else:
            assert csr_rows is not None
            kernels.jacobi_sweep_csr(csr_rows.indptr, csr_rows.indices, csr_rows.data, b_block, x.local, lo,
                                     out=new, check=sweeps == 0)
        share = kernels.sqnorm(new - x.local[lo:hi])
        for q in range(bsp.nprocs):
            if q != bsp.pid:
                x.put(q, new, offset=lo)
            shares.put(q, [share], offset=bsp.pid)
        x.local[lo:hi] = new                                 # own block: no message
        bsp.sync("jacobi sweep")
        sweeps += 1
        step = math.sqrt(kernels.sum(shares.local))          # same order on every rank
        converged = step < eps
        if progress is not None:
            progress(sweeps)
    if dense_rows is not None:
        ax = dense_rows @ x.local
    else:
        assert csr_rows is not None
        ax = csr_rows.matvec(x.local)
    residual = math.sqrt(bsp.allreduce(kernels.sqnorm(b_block - ax)))
    return JacobiResult(x.local[lo:hi].copy(), sweeps, converged, step, residual)


#: Largest order checked against ``numpy.linalg.solve`` (a dense copy of A on every rank).
CHECK_LIMIT = 5000


def solve(bsp: BSP, n: int, fmt: str, per_row: int, eps: float, max_iter: int,
          seed: int, progress: Callable[[int], None] | None = None) -> tuple[JacobiResult, float | None]:
    """Build the system (the same on every rank), solve it, and compare the result with
    ``numpy.linalg.solve`` of the dense matrix (the oracle): returns the max error over all
    ranks, or None above :data:`CHECK_LIMIT` rows."""
    a, b = dominant_system(n, fmt, per_row, seed=seed)
    lo, hi = block_range(n, bsp.nprocs, bsp.pid)
    mine = a[lo:hi] if isinstance(a, np.ndarray) else a.rows(lo, hi)
    res = jacobi(bsp, mine, b[lo:hi], n, eps, max_iter, progress)
    if n > CHECK_LIMIT:
        return res, None
    dense = a if isinstance(a, np.ndarray) else a.to_dense(n)
    exact = np.linalg.solve(dense, b)[lo:hi]
    err = float(np.max(np.abs(res.x_block - exact), initial=0.0))
    return res, float(bsp.allreduce(err, op="max"))


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="python -m hpcbsp.apps.rowjacobi",
                      description="Jacobi on block rows of a random diagonally dominant system, one "
                                  "BSP superstep per sweep; checks the answer against numpy.")
    add_n(p, "order of the system", per="in total", default=2000)
    p.add_argument("--format", choices=("dense", "csr"), default="csr",
                   help="how the rows are stored (default csr)")
    p.add_argument("--per-row", type=nonnegative_int, default=5,
                   help="off-diagonal entries per row for csr, at most n - 1 (default 5)")
    p.add_argument("--eps", type=positive_float, default=1e-10, help="stop when ||x' - x|| < eps (default 1e-10)")
    p.add_argument("--max-iter", type=positive_int, default=1000, help="at most this many sweeps (default 1000)")
    add_common_options(p, seed_help="seed of the random system")
    args = p.parse_args(argv)
    # Every rank builds the whole system; the oracle (n <= CHECK_LIMIT) a dense copy of it.
    dense_bytes = 8.0 * args.n * args.n if args.format == "dense" or args.n <= CHECK_LIMIT else 0.0
    check_memory(p, 2 * dense_bytes + 32.0 * args.n * (args.per_row + 1), f"--n {args.n} --format {args.format}",
                 "use a smaller --n (or --format csr)")
    check_outputs(p, [ledger_output(args.ledger)])
    with BSP() as bsp:
        if args.ledger:  # every superstep's record, in files as the run goes (save merges them)
            bsp.ledger.stream_for(args.ledger)
        show = Progress("rowjacobi", args.max_iter, enabled=not args.quiet and bsp.pid == 0, unit="sweep",
                        limit=True)
        res, err = solve(bsp, args.n, args.format, args.per_row, args.eps, args.max_iter, args.seed, show)
        if args.ledger:
            bsp.ledger.save(args.ledger)
        if bsp.pid == 0:
            if args.json:
                print(json.dumps({"n": args.n, "format": args.format, "ranks": bsp.nprocs,
                                  "converged": res.converged, "sweeps": res.sweeps, "step_norm": res.step_norm,
                                  "residual": res.residual, "max_error": err}))
            else:
                state = "converged" if res.converged else "did NOT converge"
                check = (f"max error vs numpy.linalg.solve = {err:.2e}" if err is not None else
                         f"not checked against numpy (n > {CHECK_LIMIT:,})")
                print(f"rowjacobi: n = {args.n:,} ({args.format}) on {plural(bsp.nprocs, 'rank')}: {state} in "
                      f"{plural(res.sweeps, 'sweep')}; ||x' - x|| = {res.step_norm:.2e}, ||b - Ax|| = "
                      f"{res.residual:.2e}, {check}")
    return 0 if res.converged else 1

if __name__ == "__main__":
    sys.exit(main())
