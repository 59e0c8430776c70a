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

  fabsp  two mailboxes.  ``transpose`` first sends every nonzero to its column's owner,
         and ``transpose.done()`` ends that phase (the column lists must be complete before
         any column is removed), without a sync; then a row with one nonzero left tells the
         column's owner (*pivot*), which *shrinks* every other row of that column; a row left
         with one nonzero pivots in turn (both through the mailbox ``eliminate``, keyed by
         their owner's index).  Each record carries a level: a row's level is one
         more than the highest of the pivots that freed it (0 if it was ready at the start).
         A handler does all it can on its own rank before it returns: pivots of its own columns
         and shrinks of its own rows that a batch causes are handled at once, record by record
         in compiled code (``hpcbsp.kernels.toposort``), and only records for other ranks are
         sent (so a dependency chain makes messages only where it changes rank, and each
         message carries a whole wave of the chain's work; issue 33).
         The sync ends the elimination by quiescence; then positions go by level (level 0
         takes the last ones), a prefix sum over the ranks' counts per level, and one more
         superstep (a queue) tells each column's owner where its column goes;
  bsp    Kahn's algorithm by levels: every row with one nonzero left at the start of a level is
         placed in that level (positions by a prefix sum of the ranks' counts), two supersteps
         per level (the pivots to the column owners, then the shrinks to the row owners, applied
         by the same compiled code).

Prints rows per second per rank and the ledger, and checks the permutations independently:
both are permutations of 0..n-1 and every nonzero of the whole matrix lands on or above the
diagonal.  Exit status 1 if the check fails.
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Callable

import numpy as np

from ...kernels import group_by_dest
from ...kernels.toposort import ROW_FIELDS, Elimination
from ...kernels.toposort import pivots as pivot_records
from ...runtime import BSP
from ...util.args.checks import check_memory
from ...util.args.types import positive_float
from ...util.args.vocabulary import add_n
from ...util.launcher import launcher_size
from .cli import app_parser, check_app_outputs, mailbox_options, run_app
from .graphs import ragged_arange
from .report import Outcome, report, timed

MODES = ("fabsp", "bsp")
PAIR = np.dtype([("a", np.int64), ("b", np.int64)])
TRIPLE = np.dtype([("col", np.int64), ("pos", np.int64), ("row", np.int64)])
SHRINK = np.dtype([("a", np.int64), ("b", np.int64), ("level", np.int64)])
#: fabsp: a shrink (row, col, level) or a pivot (col, level, -1 - row), by the owner's key first
ELIM = np.dtype([("key", np.int64), ("x", np.int64), ("y", np.int64)])
#: The phases of a run, as ``run_toposort(..., phases=...)`` reports them.
PHASES = ("transpose", "columns", "eliminate", "place")


def _stopwatch(phases: dict[str, float] | None) -> Callable[[str], None]:
    """``lap(name)``: this rank's seconds since the previous lap (or since now) go to
    ``phases[name]``; nothing is timed without ``phases``."""
    last = [time.perf_counter()]

    def lap(name: str) -> None:
        if phases is not None:
            now = time.perf_counter()
            phases[name] = phases.get(name, 0.0) + now - last[0]
            last[0] = now
    return lap


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
        # Per row, kept together for the compiled elimination (hpcbsp.kernels.toposort): the sum
        # of the columns of its nonzeros left, their count, its level (fabsp: 1 + its pivots'
        # levels), the column it takes; the names below are views of its columns.
        self.state = np.zeros((self.nlocal, len(ROW_FIELDS)), dtype=np.int64)
        self.colsum, self.count, self.level, self.pivot_col = (self.state[:, i] for i in range(len(ROW_FIELDS)))
        self.count[:] = np.bincount(local, minlength=self.nlocal)
        np.add.at(self.colsum, local, self.cols)
        self.pivot_col[:] = -1
        self.claimed = np.zeros(self.nlocal, dtype=bool)
        self._slot = np.zeros(self.nlocal, dtype=np.int64)      # scratch of ``ready``
        self.rperm = np.full(self.nlocal, -1, dtype=np.int64)   # of rows pid, pid + P, ...
        self.cperm = np.full(self.nlocal, -1, dtype=np.int64)   # of columns pid, pid + P, ...
        # The rows of this rank's columns (CSR by local column), filled by the transpose.
        self.col_ptr = np.zeros(self.nlocal + 1, dtype=np.int64)
        self.col_rows = np.zeros(0, dtype=np.int64)
        self.elim: Elimination | None = None  # the compiled elimination, once the lists exist

    def set_columns(self, cols: np.ndarray, rows: np.ndarray) -> Elimination:
        """The nonzeros ``(rows, cols)`` of this rank's columns: build the column lists (a
        counting sort by local column) and the elimination on them."""
        order, counts = group_by_dest(cols // self.nprocs, self.nlocal)
        self.col_rows = rows[order]
        self.col_ptr[1:] = np.cumsum(counts)
        self.elim = Elimination(self.state, self.claimed, self.col_ptr, self.col_rows, self.nprocs, self.pid)
        return self.elim

    def ready(self, local_rows: np.ndarray) -> np.ndarray:
        """Of ``local_rows``, those with one nonzero left and not claimed yet (now claimed)."""
        rows = local_rows[(self.count[local_rows] == 1) & ~self.claimed[local_rows]]
        if rows.size > 1:  # each once, in O(k): of a repeated row, the index whose write
            index = np.arange(rows.size)   # to its slot survived (whichever that is)
            self._slot[rows] = index
            rows = rows[self._slot[rows] == index]
        self.claimed[rows] = True
        return rows

    def shrinks(self, cols: np.ndarray, rows: np.ndarray, levels: np.ndarray | int = 0) -> np.ndarray:
        """For pivots (column ``cols[k]`` of this rank taken by row ``rows[k]``), the nonzeros
        to take out: (other row, column, ``levels[k]``) for every other row with a nonzero in
        the column."""
        c = cols // self.nprocs
        starts, lens = self.col_ptr[c], self.col_ptr[c + 1] - self.col_ptr[c]
        others = self.col_rows[ragged_arange(starts, lens)]
        keep = others != np.repeat(rows, lens)
        out = np.empty(int(np.count_nonzero(keep)), dtype=SHRINK)
        out["a"], out["b"] = others[keep], np.repeat(cols, lens)[keep]
        out["level"] = np.repeat(np.broadcast_to(levels, cols.shape), lens)[keep]
        return out

    def place_by_level(self, bsp: BSP) -> None:
        """``rperm`` from every row's level: level 0 takes the last positions, then level 1
        below them, ...; within a level, rank by rank, rows in local order (collective)."""
        top = int(bsp.allreduce(int(self.level.max()) if self.nlocal else -1, op="max"))
        order, hist = group_by_dest(self.level, top + 1)                  # rows by level
        every = np.array(bsp.gather_all(hist)).reshape(self.nprocs, top + 1)
        below = np.concatenate([[0], np.cumsum(every.sum(axis=0))[:-1]])   # rows of lower levels
        earlier = every[:self.pid].sum(axis=0)                             # of lower ranks
        starts = np.concatenate([[0], np.cumsum(hist)[:-1]])
        within = np.empty(self.nlocal, dtype=np.int64)
        within[order] = np.arange(self.nlocal) - np.repeat(starts, hist)
        self.rperm[:] = self.n - 1 - below[self.level] - earlier[self.level] - within

    def gather(self, bsp: BSP) -> tuple[np.ndarray, np.ndarray]:
        """The whole ``rperm`` and ``cperm`` on every rank (for the check)."""
        rperm = np.empty(self.n, dtype=np.int64)
        cperm = np.empty(self.n, dtype=np.int64)
        for r, (rp, cp) in enumerate(bsp.gather_all((self.rperm, self.cperm))):
            rperm[r::self.nprocs], cperm[r::self.nprocs] = rp, cp
        return rperm, cperm


def toposort_fabsp(bsp: BSP, part: Part, phases: dict[str, float] | None = None,
                   **mailbox_kw: Any) -> tuple[float, int]:
    """The FA-BSP toposort (module notes); returns (this rank's seconds, levels); ``phases``
    gets this rank's seconds per phase (:data:`PHASES`)."""
    p, me = bsp.nprocs, bsp.pid
    received: list[np.ndarray] = []
    columns_built = [False]

    def transposed(recs: np.ndarray) -> None:          # on the column's owner
        received.append(recs)                          # (the handler owns the batch)

    def build_columns() -> None:
        both = np.concatenate(received) if received else np.empty(0, dtype=PAIR)
        part.set_columns(both["a"], both["b"])
        columns_built[0] = True

    def eliminated(recs: np.ndarray) -> None:          # on the row's or the column's owner
        settle(recs, in_handler=True)

    def settle(recs: np.ndarray, in_handler: bool) -> None:
        """Handle pivots of this rank's columns and shrinks of its rows, and everything they
        cause on this rank (compiled, record by record); send the other ranks' records."""
        if not columns_built[0]:
            # The first pivot can arrive while this rank is still inside transpose.done() (the
            # rank that sent it had left it): the transpose is over everywhere by then, but
            # the code after done() has not run here.  So the lists are built on first use.
            build_columns()
        assert part.elim is not None
        out = part.elim.settle(recs)
        if not in_handler:  # a send from user code may run handlers, which settle again
            out = out.copy()
        if out.size:
            box.send(out[:, 0] % p, out.view(ELIM).reshape(-1))

    transpose = bsp.mailbox(transposed, PAIR, name="transpose", **mailbox_kw)
    box = bsp.mailbox(eliminated, ELIM, name="eliminate", **mailbox_kw)
    # (column, position): 4-byte numbers where they fit, the only records FA-BSP sends that
    # BSP does not (its pivots carry the position), so fewer bytes cross the network
    narrow = np.dtype([("a", np.int32), ("b", np.int32)])
    placed = bsp.queue(narrow if part.n <= np.iinfo(np.int32).max else PAIR, name="placed")

    def body() -> None:
        lap = _stopwatch(phases)
        nz = np.empty(part.rows.size, dtype=PAIR)
        nz["a"], nz["b"] = part.cols, part.rows
        transpose.send(part.cols % p, nz)
        transpose.done()                                   # every column list is complete
        lap("transpose")
        if not columns_built[0]:
            build_columns()
        lap("columns")
        ready = part.ready(np.arange(part.nlocal))         # rows with one nonzero: level 0
        part.pivot_col[ready] = part.colsum[ready]
        settle(pivot_records(part.colsum[ready], part.level[ready], ready * p + me), in_handler=False)
        bsp.sync("toposort")                               # every row has its level
        lap("eliminate")
        part.place_by_level(bsp)
        out = np.empty(part.nlocal, dtype=placed.dtype)    # column of row r goes where r goes
        out["a"], out["b"] = part.pivot_col, part.rperm
        placed.send(out["a"] % p, out)
        bsp.sync("columns")
        got = placed.received()
        part.cperm[got["a"] // p] = got["b"]
        lap("place")

    seconds, _ = timed(bsp, body)
    return seconds, int(bsp.allreduce(int(part.level.max()) if part.nlocal else -1, op="max")) + 1


def toposort_bsp(bsp: BSP, part: Part, phases: dict[str, float] | None = None) -> tuple[float, int]:
    """Kahn's algorithm by levels in plain BSP; returns (seconds, levels); ``phases`` gets this
    rank's seconds per phase (:data:`PHASES`; placing is part of every level)."""
    p, me = bsp.nprocs, bsp.pid
    transpose = bsp.queue(PAIR, name="transpose")
    pivots = bsp.queue(TRIPLE, name="pivot")
    shrinks = bsp.queue(SHRINK, name="shrink")
    levels = [0]

    def body() -> None:
        lap = _stopwatch(phases)
        nz = np.empty(part.rows.size, dtype=PAIR)
        nz["a"], nz["b"] = part.cols, part.rows
        transpose.send(part.cols % p, nz)
        bsp.sync("transpose")
        lap("transpose")
        got = transpose.received()
        elim = part.set_columns(got["a"], got["b"])
        lap("columns")
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
            ready = elim.shrink(shrinks.received()).copy()
            levels[0] += 1
        lap("eliminate")

    seconds, _ = timed(bsp, body)
    return seconds, levels[0]


def run_toposort(bsp: BSP, mode: str, n: int, degree: float, seed: int = 1, check: bool = True,
                 phases: dict[str, float] | None = None, **mailbox_kw: Any) -> Outcome:
    """Sort on every rank; the tests, the command line and ``bench toposort`` call this
    (``phases``: this rank's seconds per phase, :data:`PHASES`)."""
    rows, cols = scrambled_triangle(n, degree, seed)
    part = Part(rows, cols, n, bsp.pid, bsp.nprocs)
    if mode == "fabsp":
        seconds, levels = toposort_fabsp(bsp, part, phases, **mailbox_kw)
        extra = f"; {levels} levels (3 supersteps)"
    elif mode == "bsp":
        seconds, levels = toposort_bsp(bsp, part, phases)
        extra = f"; {levels} levels ({2 * levels + 1} supersteps)"
    else:
        raise ValueError(f"unknown mode {mode!r}")
    rperm, cperm = part.gather(bsp)
    ok = is_triangular(rows, cols, rperm, cperm) if check else None
    detail = f"{n:,} x {n:,} matrix, {rows.size:,} nonzeros{extra}"
    return Outcome(part.nlocal, seconds, ok, detail)


def _app(bsp: BSP, args: argparse.Namespace) -> int:
    n = args.n or 20_000 * bsp.nprocs
    mailbox: dict[str, Any] = mailbox_options(args) if args.mode == "fabsp" else {}
    out = run_toposort(bsp, args.mode, n, args.degree, args.seed, not args.no_check, **mailbox)
    return report(bsp, "toposort", args.mode, out, args, unit="rows")


def main(argv: list[str] | None = None) -> int:
    parser = app_parser("toposort", __doc__, MODES)
    add_n(parser, "rows (and columns)", per="in total", default=None,
          shown_default="20,000 times the number of ranks")
    parser.add_argument("--degree", type=positive_float, default=8.0,
                        help="nonzeros per row above the diagonal, times two (default 8)")
    args = parser.parse_args(argv)
    check_app_outputs(parser, args)
    n = args.n or 20_000 * launcher_size()
    nnz = n * (1 + args.degree / 2)
    # Every rank draws the whole matrix (a few int64 copies) and gathers both permutations.
    check_memory(parser, 6 * 8.0 * nnz + 4 * 8.0 * n, f"--n {n} --degree {args.degree:g}",
                 "use a smaller --n or --degree")
    return run_app(_app, args)


if __name__ == "__main__":
    sys.exit(main())
