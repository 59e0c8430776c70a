"""Sparse matrix-vector product y = A x with a 2-D partitioning (Bisseling, *Parallel Scientific
Computation*, ch. 4; new code, the book is the reference for the algorithm only).

    mpiexec -n P python -m hpcbsp.apps.spmv [--n ROWS] [--cols COLS] [--density D]
                                            [--partition block|cyclic] [--grid MxN]
                                            [--repeats R] [--seed S] [--ledger PATH]
                                            [--json] [--quiet]

Distribution (a Cartesian 2-D partitioning, :func:`hpcbsp.runtime.api.partition.grid`): the nonzero
a_ij lives on the rank at grid coordinates ``(phi_r(i), phi_c(j))`` of an M x N processor grid,
with phi_r, phi_c block or cyclic.  The vectors are spread over all ranks, each entry in the
processor column (x) or row (y) that uses it: x_j on ``(local_c(j) mod M, phi_c(j))`` and y_i on
``(phi_r(i), local_r(i) mod N)`` (local_c, local_r: the 1-D partitionings' local indices), as
:class:`~hpcbsp.runtime.api.partition.Explicit` partitionings.

Supersteps:

``spmv:setup`` (once; work: building the local CSR matrix, compiling the kernel)
    Every rank sends each owner of an x_j it needs one request record (the owner's local index of
    x_j, the slot in the requester's receive buffer, the requester's rank: 24 bytes), and each
    owner of a y_i it holds partial sums for the owner's local index of y_i (8 bytes).
    h-relation: 24 bytes per (rank, needed column owned elsewhere) and 8 per (rank, row with
    nonzeros whose y is elsewhere), out of the requester and into the owner.
``spmv:fan-out`` (per product)
    Owners put the requested x_j into the requesters' buffers, one put per requester.
    h-relation: 8 bytes per needed column owned by another rank, out of its owner, into the user.
``spmv:fan-in`` (per product; work: the local product u = A_local x_needed with
:func:`hpcbsp.kernels.csr_matvec`)
    Every rank sends its partial sums u_i to the owners of y_i (queue records in the order the
    setup announced them); after the sync each owner adds what it received (``np.bincount``, in
    source order, so the bits do not depend on timing).  h-relation: 8 bytes per row with
    nonzeros on a rank other than the owner of y_i.

A rank with no nonzeros takes part in every superstep with nothing to move.  The oracle is
``scipy.sparse`` (A @ x).  ``--repeats R`` runs R products after one setup, for the cost model:
``--ledger run.json``, then ``hpcbsp-cost ledger run.json --profile PROFILE.json``.  ``--json``
prints one JSON object (``rows``, ``cols``, ``nonzeros``, ``partition``, ``grid``, ``ranks``,
``products``, ``max_error``, ``ok``) instead of the ledger and the check; a long run prints
progress lines on stderr (``--quiet``: none).
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass

import numpy as np

from .. import kernels
from ..runtime import BSP
from ..runtime.superstep.ledgersummary import gather_summary
from ..runtime.api.partition import Explicit, Grid, dims_create, grid
from ..util.args.checks import check_memory, check_outputs, ledger_output
from ..util.args.parser import OneLineParser
from ..util.args.types import fraction, positive_int
from ..util.args.vocabulary import add_common_options, add_n, add_repeats
from ..util.progress import Progress
from .algorithms_common import add_grid_option, grid_dims

#: A request for x_j: the owner's local index, the slot in the requester's buffer, the requester.
REQUEST = np.dtype([("local", np.int64), ("slot", np.int64), ("src", np.int64)])


@dataclass
class Layout:
    """Where the matrix's nonzeros and the vectors' entries live."""

    matrix: Grid       #: a_ij on rank matrix.owner((i, j))
    x: Explicit        #: x_j on rank x.owner(j)
    y: Explicit        #: y_i on rank y.owner(i)


def cartesian_layout(shape: tuple[int, int], nprocs: int, kind: str = "block",
                     dims: tuple[int, int] | None = None) -> Layout:
    """The M x N Cartesian layout described in the module docstring."""
    mat = grid(shape, nprocs, kind, dims=dims or dims_create(nprocs, 2))
    big_m, big_n = mat.dims
    rowpart, colpart = mat.parts
    j = np.arange(shape[1])
    i = np.arange(shape[0])
    x_owner = mat.rank_of((colpart.local_index(j) % big_m, colpart.owner(j)))
    y_owner = mat.rank_of((rowpart.owner(i), rowpart.local_index(i) % big_n))
    return Layout(mat, Explicit(np.asarray(x_owner), nprocs), Explicit(np.asarray(y_owner), nprocs))


class SpMV:
    """y = A x for this rank's nonzeros of A (global indices); the setup superstep runs here.

    Parameters
    ----------
    bsp : BSP
        The context (collective).
    layout : Layout
        The distribution; ``layout.matrix.p == bsp.nprocs``.
    rows, cols, vals : ndarray
        This rank's nonzeros of A (global row and column indices; duplicates add).
    """

    def __init__(self, bsp: BSP, layout: Layout, rows: np.ndarray, cols: np.ndarray, vals: np.ndarray):
        me = bsp.pid
        if layout.matrix.p != bsp.nprocs:
            raise ValueError(f"rank {me}: layout for {layout.matrix.p} ranks on {bsp.nprocs}")
        rows, cols = np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)
        vals = np.asarray(vals, dtype=np.float64)
        if not rows.shape == cols.shape == vals.shape or rows.ndim != 1:
            raise ValueError(f"rank {me}: rows, cols and vals must be 1-D of one length, got "
                             f"{rows.shape}, {cols.shape}, {vals.shape}")
        if rows.size and np.any(layout.matrix.owner((rows, cols)) != me):
            raise ValueError(f"rank {me}: some nonzeros given to this rank belong to another "
                             "rank of the layout")
        self.bsp, self.layout = bsp, layout
        # Needed columns, grouped by the owner of x_j (so each owner fills one contiguous slice).
        ucols, col_inv = np.unique(cols, return_inverse=True)
        x_owner, x_local = layout.x.locate(ucols)
        order = np.lexsort((ucols, x_owner))
        slot = np.empty(ucols.size, dtype=np.int64)
        slot[order] = np.arange(ucols.size)
        # Rows with nonzeros: partial sums, in increasing row order.
        urows, row_inv = np.unique(rows, return_inverse=True)
        self.y_owner = np.asarray(layout.y.owner(urows))
        # The local matrix in CSR form over (partial-sum row, buffer slot).
        by_row = np.argsort(row_inv, kind="stable")
        self.indptr = np.concatenate([[0], np.cumsum(np.bincount(row_inv, minlength=urows.size))]).astype(np.int64)
        self.indices = slot[col_inv][by_row]
        self.data = vals[by_row]
        # Compile the kernel now (Numba, on first use), so that its compile time is setup work and
        # not the first product's.
        kernels.csr_matvec(self.indptr, self.indices, self.data, np.zeros(ucols.size), check=True)
        self.xbuf = bsp.coarray(ucols.size, np.float64, name="spmv:x-needed", scratch=True)
        requests = bsp.queue(REQUEST, name="spmv:x-requests")
        announce = bsp.queue(np.int64, name="spmv:y-rows")
        self.sums = bsp.queue(np.float64, name="spmv:partial-sums")
        req = np.zeros(ucols.size, REQUEST)
        req["local"], req["slot"], req["src"] = x_local[order], np.arange(ucols.size), me
        requests.send(np.asarray(x_owner)[order], req)
        announce.send(self.y_owner, np.asarray(layout.y.local_index(urows)))
        bsp.sync("spmv:setup")
        got = requests.received()
        self.fan_out = []   # (requester, my local indices of x, first slot there)
        for q in np.unique(got["src"]).tolist():
            mine = got[got["src"] == q]
            self.fan_out.append((q, mine["local"].copy(), int(mine["slot"].min())))
        self.y_map = announce.received().copy()   # my local y index of every partial sum, in order
        self.ny = layout.y.local_size(me)
        self.nx = layout.x.local_size(me)

    def __call__(self, x_local: np.ndarray) -> np.ndarray:
        """This rank's entries of y = A x, given its entries of x (two supersteps)."""
        bsp = self.bsp
        if x_local.shape != (self.nx,):
            raise ValueError(f"rank {bsp.pid}: x part of shape {x_local.shape}, expected ({self.nx},)")
        for q, idx, first in self.fan_out:
            self.xbuf.put(q, x_local[idx], offset=first)
        bsp.sync("spmv:fan-out")
        u = kernels.csr_matvec(self.indptr, self.indices, self.data, self.xbuf.local, check=False)
        self.sums.send(self.y_owner, u)
        bsp.sync("spmv:fan-in")
        return np.bincount(self.y_map, weights=self.sums.received(), minlength=self.ny).astype(np.float64)


def random_sparse(shape: tuple[int, int], density: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A reproducible random sparse matrix as sorted COO (rows, cols, vals), no duplicates."""
    m, n = shape
    rng = np.random.default_rng(seed)
    nnz = int(round(density * m * n))
    flat = np.sort(rng.choice(m * n, size=nnz, replace=False))
    return flat // n, flat % n, rng.uniform(-1.0, 1.0, nnz)


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="python -m hpcbsp.apps.spmv",
                      description="Sparse matrix-vector product with a 2-D (Cartesian) partitioning: "
                                  "fan-out of x, local product, fan-in of partial sums; checks against "
                                  "scipy.sparse and prints the superstep ledger.")
    add_n(p, "rows of A", per="in total", default=600, old=("--rows",))
    p.add_argument("--cols", type=positive_int, default=451, help="columns of A (default 451)")
    p.add_argument("--density", type=fraction, default=0.01, help="fraction of nonzeros, in (0, 1] (default 0.01)")
    p.add_argument("--partition", choices=("block", "cyclic"), default="block",
                   help="how rows and columns are split over the grid (default block)")
    add_grid_option(p)
    add_repeats(p, "products after the setup", default=1, old=("--repeat",))
    add_common_options(p, seed_help="seed of the random matrix and vector")
    args = p.parse_args(argv)
    if args.density == 0:
        p.error("--density must be in (0, 1], got 0")
    check_outputs(p, [ledger_output(args.ledger)])
    dims = grid_dims(p, args.grid)
    # Every rank draws the whole matrix: the positions (a choice among n x cols) and the values.
    check_memory(p, 8.0 * args.n * args.cols + 40.0 * args.density * args.n * args.cols,
                 f"--n {args.n} --cols {args.cols} --density {args.density}", "use a smaller --n or --cols")
    try:
        import scipy.sparse as sparse
    except ImportError:
        p.error("the check needs scipy (pip install scipy)")
    shape = (args.n, args.cols)
    with BSP() as bsp:
        if args.ledger:  # every superstep's record, in files as the run goes (save merges them)
            bsp.ledger.stream_for(args.ledger)
        layout = cartesian_layout(shape, bsp.nprocs, args.partition, dims)
        rows, cols, vals = random_sparse(shape, args.density, args.seed)
        mine = layout.matrix.owner((rows, cols)) == bsp.pid
        product = SpMV(bsp, layout, rows[mine], cols[mine], vals[mine])
        x = np.random.default_rng(args.seed + 1).uniform(-1.0, 1.0, args.cols)
        x_local = x[layout.x.global_indices(bsp.pid)]
        show = Progress("spmv", args.repeats, enabled=not args.quiet and bsp.pid == 0, unit="product")
        for done in range(args.repeats):
            y_local = product(x_local)
            show(done + 1)
        summary = gather_summary(bsp.ledger)  # (the window, and totals of every superstep)
        if args.ledger:
            bsp.ledger.save(args.ledger)
        expect = sparse.coo_matrix((vals, (rows, cols)), shape=shape).tocsr() @ x
        err = float(np.max(np.abs(y_local - expect[layout.y.global_indices(bsp.pid)]), initial=0.0))
        err = float(bsp.allreduce(err, op="max"))
        ok = err <= 1e-12 * max(1.0, float(np.max(np.abs(expect), initial=0.0)))
        if bsp.pid == 0 and args.json:
            print(json.dumps({"rows": args.n, "cols": args.cols, "nonzeros": int(rows.size),
                              "partition": args.partition, "grid": list(dims), "ranks": bsp.nprocs,
                              "products": args.repeats, "max_error": err, "ok": ok, "ledger": args.ledger}))
        elif bsp.pid == 0:
            print(summary.text() if summary is not None else "")
            print(f"spmv: {args.n} x {args.cols}, {rows.size:,} nonzeros, {args.partition} on a "
                  f"{dims[0]}x{dims[1]} grid ({bsp.nprocs} rank(s)), {args.repeats} product(s); "
                  f"max |y - scipy.sparse A @ x| = {err:.2e}  {'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
