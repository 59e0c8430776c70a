"""toposort (bale): find the row and column permutations that make a scrambled matrix triangular.

    mpiexec -n P python -m hpcbsp.apps.irregular.toposort [--n N] [--degree D] [--mode fabsp|bsp]

The input is an upper triangular n x n matrix with a full diagonal and about ``degree / 2``
random nonzeros per row above it, whose rows and columns were then randomly permuted.  The
task: permutations ``rperm``, ``cperm`` such that every nonzero (i, j) satisfies
``rperm[i] <= cperm[j]``.  bale's algorithm: a row with a single nonzero left, in column c, is
placed at the last free position, and so is column c; removing column c takes one nonzero from
every other row that has one in it.  Rows and columns are distributed cyclically (row i on rank
``i % P``); a row keeps its count of nonzeros left and the sum of their columns (so the column
of its last one is the sum).  Modes:

  fabsp  one superstep of five mailboxes.  ``transpose`` first sends every nonzero to its
         column's owner, and ``transpose.done()`` ends that phase (the column lists must be
         complete before any column is removed), without a sync; then a row with one nonzero
         left *claims* a position from rank 0 (a counter; rank 0 hands out n-1, n-2, ...),
         the answer is *placed* at the row's owner, which tells the column's owner (*pivot*),
         which *shrinks* every other row of that column; a row left with one nonzero claims in
         turn.  Causality orders the positions: a row can only claim after the row that freed
         it got its position.  The sync ends it by quiescence;
  bsp    Kahn's algorithm by levels: every row with one nonzero left at the start of a level is
         placed in that level (positions by a prefix sum of the ranks' counts), two supersteps
         per level (the pivots to the column owners, then the shrinks to the row owners).

Prints rows per second per rank and the ledger, and checks the permutations independently:
both are permutations of 0..n-1 and every nonzero of the whole matrix lands on or above the
diagonal.  Exit status 1 if the check fails.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

import hpcbsp
from ...runtime import BSP
from ...util.args import check_memory, positive_float, positive_int
from ...util.launcher import launcher_size
from .cli import app_parser, check_app_outputs, mailbox_options
from .graphs import ragged_arange
from .report import Outcome, report, timed

MODES = ("fabsp", "bsp")
PAIR = np.dtype([("a", np.int64), ("b", np.int64)])
TRIPLE = np.dtype([("col", np.int64), ("pos", np.int64), ("row", np.int64)])


def scrambled_triangle(n: int, degree: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The nonzeros ``(rows, cols)`` of a row- and column-permuted upper triangular matrix with a
    full diagonal and about ``n * degree / 2`` distinct nonzeros above it."""
    rng = np.random.default_rng([seed, 13])
    m = int(round(n * degree / 2))
    a, b = rng.integers(0, n, m), rng.integers(0, n, m)
    keep = a != b
    upper = np.unique(np.minimum(a[keep], b[keep]) * n + np.maximum(a[keep], b[keep]))
    rows = np.concatenate([np.arange(n), upper // n])
    cols = np.concatenate([np.arange(n), upper % n])
    rp, cp = rng.permutation(n), rng.permutation(n)
    return rp[rows], cp[cols]


def is_triangular(rows: np.ndarray, cols: np.ndarray, rperm: np.ndarray, cperm: np.ndarray) -> bool:
    """The oracle: both are permutations of 0..n-1 and every nonzero is on or above the diagonal."""
    n = rperm.size
    ident = np.arange(n)
    return (cperm.size == n and np.array_equal(np.sort(rperm), ident)
            and np.array_equal(np.sort(cperm), ident) and bool(np.all(rperm[rows] <= cperm[cols])))


class Part:
    """This rank's rows (nonzero counts and column sums) and the nonzeros it owns."""

    def __init__(self, rows: np.ndarray, cols: np.ndarray, n: int, pid: int, nprocs: int):
        self.n, self.pid, self.nprocs = n, pid, nprocs
        self.nlocal = len(range(pid, n, nprocs))
        mine = rows % nprocs == pid
        self.rows, self.cols = rows[mine], cols[mine]
        local = self.rows // nprocs
        self.count = np.bincount(local, minlength=self.nlocal).astype(np.int64)
        self.colsum = np.zeros(self.nlocal, dtype=np.int64)
        np.add.at(self.colsum, local, self.cols)
        self.claimed = np.zeros(self.nlocal, dtype=bool)
        self.rperm = np.full(self.nlocal, -1, dtype=np.int64)   # of rows pid, pid + P, ...
        self.cperm = np.full(self.nlocal, -1, dtype=np.int64)   # of columns pid, pid + P, ...
        # The rows of this rank's columns (CSR by local column), filled by the transpose.
        self.col_ptr = np.zeros(self.nlocal + 1, dtype=np.int64)
        self.col_rows = np.zeros(0, dtype=np.int64)

    def set_columns(self, cols: np.ndarray, rows: np.ndarray) -> None:
        """The nonzeros ``(rows, cols)`` of this rank's columns: build the column lists."""
        local = cols // self.nprocs
        order = np.argsort(local, kind="stable")
        self.col_rows = rows[order]
        self.col_ptr[1:] = np.cumsum(np.bincount(local, minlength=self.nlocal))

    def ready(self, local_rows: np.ndarray) -> np.ndarray:
        """Of ``local_rows``, those with one nonzero left and not claimed yet (now claimed)."""
        rows = np.unique(local_rows)
        rows = rows[(self.count[rows] == 1) & ~self.claimed[rows]]
        self.claimed[rows] = True
        return rows

    def shrink(self, rows: np.ndarray, cols: np.ndarray) -> None:
        """Take the nonzero (row, col) out of each (global) row of this rank."""
        local = rows // self.nprocs
        np.subtract.at(self.count, local, 1)
        np.subtract.at(self.colsum, local, cols)

    def shrinks(self, cols: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """For pivots (column ``cols[k]`` of this rank taken by row ``rows[k]``), the nonzeros
        to take out: (other row, column) for every other row with a nonzero in the column."""
        c = cols // self.nprocs
        starts, lens = self.col_ptr[c], self.col_ptr[c + 1] - self.col_ptr[c]
        others = self.col_rows[ragged_arange(starts, lens)]
        keep = others != np.repeat(rows, lens)
        out = np.empty(int(np.count_nonzero(keep)), dtype=PAIR)
        out["a"], out["b"] = others[keep], np.repeat(cols, lens)[keep]
        return out

    def gather(self, bsp: BSP) -> tuple[np.ndarray, np.ndarray]:
        """The whole ``rperm`` and ``cperm`` on every rank (for the check)."""
        rperm = np.empty(self.n, dtype=np.int64)
        cperm = np.empty(self.n, dtype=np.int64)
        for r, (rp, cp) in enumerate(bsp.gather_all((self.rperm, self.cperm))):
            rperm[r::self.nprocs], cperm[r::self.nprocs] = rp, cp
        return rperm, cperm


def toposort_fabsp(bsp: BSP, part: Part, **mailbox_kw: Any) -> float:
    """The FA-BSP toposort (module notes); returns this rank's seconds."""
    p, me = bsp.nprocs, bsp.pid
    next_pos = [part.n - 1]  # rank 0's counter
    received: list[np.ndarray] = []

    def transposed(recs: np.ndarray) -> None:          # on the column's owner
        received.append(recs.copy())

    def claim(rows: np.ndarray, src: int) -> None:      # on rank 0: hand out positions
        out = np.empty(rows.size, dtype=PAIR)
        out["a"] = rows
        out["b"] = next_pos[0] - np.arange(rows.size)
        next_pos[0] -= rows.size
        placed_box.send(src, out)

    def placed(recs: np.ndarray) -> None:              # on the row's owner: row a at position b
        local = recs["a"] // p
        part.rperm[local] = recs["b"]
        out = np.empty(recs.size, dtype=TRIPLE)
        out["col"], out["pos"], out["row"] = part.colsum[local], recs["b"], recs["a"]
        pivot_box.send(out["col"] % p, out)

    def pivot(recs: np.ndarray) -> None:               # on the column's owner
        if not columns_built[0]:
            # The first pivot can arrive while this rank is still inside transpose.done() (the
            # rank that sent it had left it): the transpose is over everywhere by then, but
            # the code after done() has not run here.  So the lists are built on first use.
            build_columns()
        part.cperm[recs["col"] // p] = recs["pos"]
        out = part.shrinks(recs["col"], recs["row"])
        if out.size:
            shrink_box.send(out["a"] % p, out)

    columns_built = [False]

    def build_columns() -> None:
        both = np.concatenate(received) if received else np.empty(0, dtype=PAIR)
        part.set_columns(both["a"], both["b"])
        columns_built[0] = True

    def shrunk(recs: np.ndarray) -> None:              # on the row's owner
        part.shrink(recs["a"], recs["b"])
        ready = part.ready(recs["a"] // p)
        if ready.size:
            claim_box.send(0, ready * p + me)

    transpose = bsp.mailbox(transposed, PAIR, name="transpose", **mailbox_kw)
    claim_box = bsp.mailbox(claim, np.int64, with_source=True, name="claim", **mailbox_kw)
    placed_box = bsp.mailbox(placed, PAIR, name="placed", **mailbox_kw)
    pivot_box = bsp.mailbox(pivot, TRIPLE, name="pivot", **mailbox_kw)
    shrink_box = bsp.mailbox(shrunk, PAIR, name="shrink", **mailbox_kw)

    def body() -> None:
        nz = np.empty(part.rows.size, dtype=PAIR)
        nz["a"], nz["b"] = part.cols, part.rows
        transpose.send(part.cols % p, nz)
        transpose.done()                                   # every column list is complete
        if not columns_built[0]:
            build_columns()
        ready = part.ready(np.arange(part.nlocal))
        claim_box.send(0, ready * p + me)
        bsp.sync("toposort")

    seconds, _ = timed(bsp, body)
    return seconds


def toposort_bsp(bsp: BSP, part: Part) -> tuple[float, int]:
    """Kahn's algorithm by levels in plain BSP; returns (seconds, levels)."""
    p, me = bsp.nprocs, bsp.pid
    transpose = bsp.queue(PAIR, name="transpose")
    pivots = bsp.queue(TRIPLE, name="pivot")
    shrinks = bsp.queue(PAIR, name="shrink")
    levels = [0]

    def body() -> None:
        nz = np.empty(part.rows.size, dtype=PAIR)
        nz["a"], nz["b"] = part.cols, part.rows
        transpose.send(part.cols % p, nz)
        bsp.sync("transpose")
        got = transpose.received()
        part.set_columns(got["a"], got["b"])
        placed = 0
        ready = part.ready(np.arange(part.nlocal))
        while True:
            counts = np.array(bsp.gather_all(int(ready.size)))
            if counts.sum() == 0:
                break
            first = part.n - 1 - placed - int(counts[:me].sum())
            pos = first - np.arange(ready.size)
            placed += int(counts.sum())
            part.rperm[ready] = pos
            out = np.empty(ready.size, dtype=TRIPLE)
            out["col"], out["pos"], out["row"] = part.colsum[ready], pos, ready * p + me
            pivots.send(out["col"] % p, out)
            bsp.sync("pivot")
            recs = pivots.received()
            part.cperm[recs["col"] // p] = recs["pos"]
            out = part.shrinks(recs["col"], recs["row"])
            shrinks.send(out["a"] % p, out)
            bsp.sync("shrink")
            recs = shrinks.received()
            part.shrink(recs["a"], recs["b"])
            ready = part.ready(recs["a"] // p)
            levels[0] += 1

    seconds, _ = timed(bsp, body)
    return seconds, levels[0]


def run_toposort(bsp: BSP, mode: str, n: int, degree: float, seed: int = 1, check: bool = True,
                 **mailbox_kw: Any) -> Outcome:
    """Sort on every rank; the tests and the command line call this."""
    rows, cols = scrambled_triangle(n, degree, seed)
    part = Part(rows, cols, n, bsp.pid, bsp.nprocs)
    extra = ""
    if mode == "fabsp":
        seconds = toposort_fabsp(bsp, part, **mailbox_kw)
    elif mode == "bsp":
        seconds, levels = toposort_bsp(bsp, part)
        extra = f"; {levels} levels ({2 * levels + 1} supersteps)"
    else:
        raise ValueError(f"unknown mode {mode!r}")
    rperm, cperm = part.gather(bsp)
    ok = is_triangular(rows, cols, rperm, cperm) if check else None
    detail = f"{n:,} x {n:,} matrix, {rows.size:,} nonzeros{extra}"
    return Outcome(part.nlocal, seconds, ok, detail)


def _app(bsp: BSP, args: argparse.Namespace) -> int:
    n = args.n or 20_000 * bsp.nprocs
    out = run_toposort(bsp, args.mode, n, args.degree, args.seed, not args.no_check,
                       **(mailbox_options(args) if args.mode == "fabsp" else {}))
    return report(bsp, "toposort", args.mode, out, args, unit="rows")


def main(argv: list[str] | None = None) -> int:
    parser = app_parser("toposort", __doc__, MODES)
    parser.add_argument("--n", type=positive_int, default=None,
                        help="rows (and columns) in total (default 20,000 times the number of ranks)")
    parser.add_argument("--degree", type=positive_float, default=8.0,
                        help="nonzeros per row above the diagonal, times two (default 8)")
    args = parser.parse_args(argv)
    check_app_outputs(parser, args)
    n = args.n or 20_000 * launcher_size()
    nnz = n * (1 + args.degree / 2)
    # Every rank draws the whole matrix (a few int64 copies) and gathers both permutations.
    check_memory(parser, 6 * 8.0 * nnz + 4 * 8.0 * n, f"--n {n} --degree {args.degree:g}",
                 "use a smaller --n or --degree")
    return hpcbsp.run(_app, args)


if __name__ == "__main__":
    sys.exit(main())
