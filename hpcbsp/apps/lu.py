"""LU decomposition with partial pivoting on a 2-D cyclic distribution (Bisseling, *Parallel
Scientific Computation*, ch. 2; new code, the book is the reference for the algorithm only).

    mpiexec -n P python -m hpcbsp.apps.lu [--n N] [--grid MxN] [--seed S] [--ledger PATH]
                                          [--json] [--quiet]

The n x n matrix is distributed M x N cyclically (:func:`hpcbsp.runtime.api.partition.grid`): element
``(i, j)`` lives on the rank at grid coordinates ``(i mod M, j mod N)``, rank ``s*N + t``.  The
result overwrites A with L (unit lower, below the diagonal) and U, in LAPACK's packed form, with
the row interchanges of LAPACK's ``ipiv`` (row k swapped with row ``piv[k]``, whole rows), so
that ``P A = L U``.

Stage k (k = 0..n-1) is at most four supersteps; ``t_k = k mod N``, ``s_k = k mod M``:

``lu:pivot-search``
    (work: the rank-1 update ``a_ij -= l_ik u_kj`` of stage k-1 on the local rows i > k-1 and
    columns j > k-1.)  Every rank of processor column t_k finds its local candidate
    ``argmax |a_ik|, i >= k`` and puts (value, row) to every rank of that processor column.
    h-relation: 16(M-1) bytes out of and into each rank of processor column t_k.
``lu:pivot-broadcast``
    The ranks of processor column t_k choose the pivot row r (largest |value|, the smallest row
    on a tie, as LAPACK's ``idamax``) and put r to every rank of their processor row.
    h-relation: 8(N-1) bytes out of each rank of processor column t_k, 8 into every other rank.
``lu:row-swap`` (only when r != k)
    The ranks of processor rows s_k and r mod M exchange their parts of rows k and r (nothing
    moves when both rows are in the same processor row).  h-relation: 8 * (local columns)
    bytes out of and into each of those ranks.
``lu:broadcast``
    The ranks of processor column t_k divide their a_ik, i > k, by the pivot (known from the
    candidates) and put these multipliers to every rank of their processor row; the ranks of
    processor row s_k put a_kj, j > k, to every rank of their processor column.  h-relation:
    8 (N-1) (local rows > k) + 8 (M-1) (local columns > k) bytes out of the rank at (s_k, t_k),
    and one row or column part into each other rank.

With the replicated pivot vector every rank knows r and whether the swap superstep is needed.
The run prints the ledger (``hpcbsp.runtime.superstep.ledgersummary``: the last
``$HPCBSP_LEDGER_WINDOW`` supersteps, and the totals of all where it holds fewer) and the check, or with ``--json``
one JSON object (``n``, ``grid``, ``ranks``, ``pivots_equal``, ``max_error``, ``residual``,
``ok``); a long run prints a progress line per two seconds on stderr (``--quiet``: none).
``--ledger run.json`` saves the ledger for ``hpcbsp-cost ledger run.json --profile PROFILE.json``.
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..runtime import BSP
from ..runtime.superstep.ledgersummary import gather_summary
from ..runtime.api.partition import Grid, dims_create, grid
from ..util.args.checks import check_memory, check_outputs, ledger_output
from ..util.args.parser import OneLineParser
from ..util.args.vocabulary import add_common_options, add_n
from ..util.progress import Progress
from .algorithms_common import add_grid_option, grid_dims

#: A pivot candidate: the signed value and its global row (-1: this rank has no row >= k).
CANDIDATE = np.dtype([("value", np.float64), ("row", np.int64)])


@dataclass
class LUResult:
    """One rank's share of the factorisation."""

    local: np.ndarray      #: this rank's part of the packed L\\U, rows ``rows`` x columns ``cols``
    rows: np.ndarray       #: global row indices of ``local``
    cols: np.ndarray       #: global column indices of ``local``
    piv: np.ndarray        #: LAPACK ipiv (0-based), the same on every rank
    singular: bool         #: a pivot was exactly zero (as LAPACK's info > 0)


def cyclic_grid(n: int, nprocs: int, dims: tuple[int, int] | None = None) -> Grid:
    """The M x N cyclic distribution of an n x n matrix (grid from :func:`dims_create` by default)."""
    return grid((n, n), nprocs, "cyclic", dims=dims or dims_create(nprocs, 2))


def _after(part_rows: np.ndarray, k: int) -> int:
    """First local position whose global index is > k (global order is local order)."""
    return int(np.searchsorted(part_rows, k, side="right"))


def _from(part_rows: np.ndarray, k: int) -> int:
    """First local position whose global index is >= k."""
    return int(np.searchsorted(part_rows, k, side="left"))


def lu(bsp: BSP, local: np.ndarray, layout: Grid, progress: Callable[[int], object] | None = None) -> LUResult:
    """Factorise ``P A = L U`` in place; ``local`` is this rank's part of A under ``layout``.

    Parameters
    ----------
    bsp : BSP
        The context (collective: every rank calls this with its own part).
    local : ndarray of float64, shape ``layout.local_shape(bsp.pid)``
        This rank's part of A; overwritten with its part of the packed L\\U.
    layout : Grid
        A 2-D cyclic grid partitioning of an n x n matrix over ``bsp.nprocs`` ranks
        (:func:`cyclic_grid`).
    progress : callable, optional
        Called with the number of finished stages after each stage (a
        :class:`~hpcbsp.util.progress.Progress`).

    Returns
    -------
    LUResult
    """
    n = layout.shape[0]
    big_m, big_n = layout.dims
    if layout.ndim != 2 or layout.shape != (n, n) or layout.p != bsp.nprocs:
        raise ValueError(f"rank {bsp.pid}: lu needs a square matrix on a 2-D grid of {bsp.nprocs} "
                         f"ranks, got {layout!r}")
    if local.shape != layout.local_shape(bsp.pid) or local.dtype != np.float64:
        raise ValueError(f"rank {bsp.pid}: local part of shape {local.shape} ({local.dtype}), "
                         f"expected {layout.local_shape(bsp.pid)} (float64)")
    s, t = layout.coords_of(bsp.pid)
    rows, cols = layout.global_indices(bsp.pid)
    nr, nc = local.shape
    col_peers = [layout.rank_of((q, t)) for q in range(big_m)]   # my processor column
    row_peers = [layout.rank_of((s, q)) for q in range(big_n)]   # my processor row
    cand = bsp.coarray(big_m, CANDIDATE, name="lu:candidates", scratch=True)
    pivot = bsp.coarray(1, np.int64, name="lu:pivot", scratch=True)
    swap = bsp.coarray(nc, np.float64, name="lu:swap", scratch=True)
    lcol = bsp.coarray(nr, np.float64, name="lu:multipliers", scratch=True)
    urow = bsp.coarray(nc, np.float64, name="lu:pivot-row", scratch=True)
    piv = np.empty(n, dtype=np.int64)
    singular = False
    pending: tuple[int, int] | None = None   # (first row, first column) of the rank-1 update

    for k in range(n):
        tk, sk = k % big_n, k % big_m
        # ---- superstep: pivot search (work: last stage's rank-1 update)
        if pending is not None:
            r0, c0 = pending
            if r0 < nr and c0 < nc:
                local[r0:, c0:] -= np.outer(lcol.local[r0:], urow.local[c0:])
        in_column = t == tk
        if in_column:
            lc = k // big_n                       # local column of global column k
            first = _from(rows, k)
            mine = np.zeros(1, CANDIDATE)
            if first < nr:
                j = int(np.argmax(np.abs(local[first:, lc])))   # first maximum, like idamax
                mine[0] = (local[first + j, lc], rows[first + j])
            else:
                mine[0] = (0.0, -1)
            for q in col_peers:
                cand.put(q, mine, offset=s)
        bsp.sync("lu:pivot-search")

        # ---- superstep: pivot broadcast along processor rows
        pivot_value = 0.0
        if in_column:
            c = cand.local[cand.local["row"] >= 0]
            mag = np.abs(c["value"])
            best = c[mag == mag.max()]
            choice = best[np.argmin(best["row"])]
            r, pivot_value = int(choice["row"]), float(choice["value"])
            for q in row_peers:
                pivot.put(q, np.array([r]))
        bsp.sync("lu:pivot-broadcast")
        r = int(pivot.local[0])
        piv[k] = r

        # ---- superstep: row swap (skipped by every rank alike when r == k)
        if r != k:
            sr = r % big_m
            if s == sk and s == sr:
                a, b = k // big_m, r // big_m
                local[[a, b]] = local[[b, a]]
            elif s == sk:
                swap.put(layout.rank_of((sr, t)), local[k // big_m])
            elif s == sr:
                swap.put(layout.rank_of((sk, t)), local[r // big_m])
            bsp.sync("lu:row-swap")
            if sk != sr:
                if s == sk:
                    local[k // big_m] = swap.local
                elif s == sr:
                    local[r // big_m] = swap.local

        # ---- superstep: broadcast of the multipliers (along rows) and the pivot row (along columns)
        r1, c1 = _after(rows, k), _after(cols, k)
        if in_column:
            lc = k // big_n
            if pivot_value == 0.0:
                singular = True   # the column is zero from k down: nothing to divide, l = 0
            elif r1 < nr:
                local[r1:, lc] /= pivot_value
            if r1 < nr:
                for q in row_peers:
                    lcol.put(q, local[r1:, lc], offset=r1)
        if s == sk and c1 < nc:
            for q in col_peers:
                urow.put(q, local[k // big_m, c1:], offset=c1)
        bsp.sync("lu:broadcast")
        pending = (r1, c1)
        if progress is not None:
            progress(k + 1)
    singular = bool(bsp.allreduce(int(singular), op="max")) if bsp.nprocs > 1 else singular
    return LUResult(local, rows, cols, piv, singular)


def random_matrix(n: int, seed: int = 0) -> np.ndarray:
    """A reproducible random n x n matrix (the same on every rank)."""
    return np.random.default_rng(seed).standard_normal((n, n))


def reference_lu(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The oracle: ``scipy.linalg.lu_factor`` (LAPACK getrf) as (packed L\\U, 0-based ipiv)."""
    from scipy.linalg import lu_factor

    packed, piv = lu_factor(a)
    return packed, piv.astype(np.int64)


def apply_pivots(a: np.ndarray, piv: np.ndarray) -> np.ndarray:
    """``P A``: the rows of ``a`` swapped as LAPACK's ipiv says (row k with row piv[k], in order)."""
    pa = a.copy()
    for k, r in enumerate(piv):
        if r != k:
            pa[[k, r]] = pa[[r, k]]
    return pa


def check(bsp: BSP, a: np.ndarray, res: LUResult, layout: Grid) -> tuple[float, float, bool]:
    """Compare with the oracles on every rank: returns (max |LU - scipy's LU|, max |P A - L U| /
    max |A| from the gathered factors, pivots equal to scipy's), the same on every rank.

    Rank 0 collects the factors with one ``get`` per rank (a superstep after the factorisation).
    """
    packed, piv = reference_lu(a)
    err = float(np.max(np.abs(res.local - packed[np.ix_(res.rows, res.cols)]), initial=0.0))
    err = float(bsp.allreduce(err, op="max"))
    same_piv = bool(np.array_equal(res.piv, piv))
    part = bsp.coarray(res.local.size, np.float64, name="lu:result", scratch=True)
    part.local[:] = res.local.ravel()
    futures = [part.get(q) for q in range(bsp.nprocs)] if bsp.pid == 0 else []
    bsp.sync("lu:collect")
    resid = 0.0
    if bsp.pid == 0:
        n = a.shape[0]
        full = np.zeros((n, n))
        for q, fut in enumerate(futures):
            rr, cc = layout.global_indices(q)
            full[np.ix_(rr, cc)] = fut.value.reshape(rr.size, cc.size)
        low = np.tril(full, -1) + np.eye(n)
        up = np.triu(full)
        resid = float(np.max(np.abs(apply_pivots(a, res.piv) - low @ up)) / max(np.max(np.abs(a)), 1e-300))
    resid = float(bsp.broadcast(resid))
    return err, resid, same_piv


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="python -m hpcbsp.apps.lu",
                      description="LU decomposition with partial pivoting of a random matrix on a 2-D "
                                  "cyclic distribution; checks P A = L U and the pivots against "
                                  "scipy.linalg.lu_factor and prints the superstep ledger.")
    add_n(p, "order of the matrix", per="in total", default=60)
    add_grid_option(p)
    add_common_options(p, seed_help="seed of the random matrix")
    args = p.parse_args(argv)
    check_outputs(p, [ledger_output(args.ledger)])
    dims = grid_dims(p, args.grid)
    # Every rank draws the whole matrix; the check holds scipy's factors and the gathered ones.
    check_memory(p, 4 * 8.0 * args.n * args.n, f"--n {args.n} (a dense {args.n} x {args.n} matrix)",
                 "use a smaller --n")
    try:
        import scipy.linalg  # noqa: F401
    except ImportError:
        p.error("the check needs scipy (pip install scipy)")
    with BSP() as bsp:
        if args.ledger:  # every superstep's record, in files as the run goes (save merges them)
            bsp.ledger.stream_for(args.ledger)
        layout = cyclic_grid(args.n, bsp.nprocs, dims)
        a = random_matrix(args.n, args.seed)
        rows, cols = layout.global_indices(bsp.pid)
        show = Progress("lu", args.n, enabled=not args.quiet and bsp.pid == 0, unit="stage")
        res = lu(bsp, a[np.ix_(rows, cols)].copy(), layout, progress=show)
        summary = gather_summary(bsp.ledger)  # (the window, and totals of every superstep)
        if args.ledger:
            bsp.ledger.save(args.ledger)
        err, resid, same_piv = check(bsp, a, res, layout)
        ok = same_piv and err <= 1e-8 * args.n and resid <= 1e-12 * args.n
        if bsp.pid == 0 and args.json:
            print(json.dumps({"n": args.n, "grid": list(dims), "ranks": bsp.nprocs, "pivots_equal": same_piv,
                              "max_error": err, "residual": resid, "ok": ok, "ledger": args.ledger}))
        elif bsp.pid == 0:
            print(summary.text() if summary is not None else "")
            print(f"lu: n = {args.n} on a {dims[0]}x{dims[1]} cyclic grid ({bsp.nprocs} rank(s)); "
                  f"pivots {'equal' if same_piv else 'DIFFER from'} scipy.linalg.lu_factor's; "
                  f"max |LU - scipy| = {err:.2e}; max |PA - LU| / max |A| = {resid:.2e}  "
                  f"{'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
