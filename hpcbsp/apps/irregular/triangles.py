"""triangles (bale): count the triangles of a random graph (Erdős–Rényi or R-MAT).

    mpiexec -n P python -m hpcbsp.apps.irregular.triangles [--graph er|rmat] [--mode fabsp|bsp|naive]

The graph's strictly lower triangle L is distributed by rows, cyclically.  bale's push algorithm:
for every nonzero (i, j) of L on this rank and every w < j in row i, ask the owner of row j
whether (j, w) is an edge; each yes is one triangle i > j > w, counted once.  A query is one
int64 (row j's local index times n, plus w); the owner answers by a binary search in its sorted
row keys.  Modes:

  fabsp  a mailbox whose handler counts the hits of a batch of queries; the rank generates the
         queries of a chunk of its rows, sends them and goes on with the next chunk; one sync;
  bsp    all queries in one queue send and one sync, then the owners count (bulk exchange);
  naive  one MPI message per query (use a small graph).

Prints queries per second per rank and the ledger, and checks the total against a
serial count of trace(A^3)/6 (dense numpy for small graphs, scipy.sparse for larger ones).
Exit status 1 if the check fails.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np
from mpi4py import MPI

from ...runtime import BSP
from ...util.args.checks import check_memory
from ...util.args.types import positive_float, positive_int
from ...util.args.vocabulary import add_n
from .cli import app_parser, check_app_outputs, mailbox_options, run_app
from .naive import naive_exchange, timed_naive
from .report import Outcome, report, timed
from .graphs import erdos_renyi, local_rows, ragged_arange, rmat, triangles_dense, \
    triangles_sparse

#: Largest graph checked with the dense oracle.
DENSE_ORACLE_MAX_N = 3000


class Graph:
    """This rank's part of the lower triangle and the sorted keys its handler searches."""

    def __init__(self, edges: np.ndarray, n: int, pid: int, nprocs: int):
        self.n = n
        self.nprocs = nprocs
        self.indptr, self.indices = local_rows(edges, n, pid, nprocs, symmetric=False)
        rows = np.repeat(np.arange(self.indptr.size - 1), np.diff(self.indptr))
        self.keys = rows * n + self.indices  # sorted: rows ascending, columns sorted within

    def queries(self, row_lo: int, row_hi: int) -> tuple[np.ndarray, np.ndarray]:
        """The queries of local rows [row_lo, row_hi): ``(owner of row j, key of (j, w))``."""
        ptr, ind = self.indptr, self.indices
        lo, hi = int(ptr[row_lo]), int(ptr[row_hi])
        nz = np.arange(lo, hi)
        row_start = np.repeat(ptr[row_lo:row_hi], np.diff(ptr[row_lo:row_hi + 1]))
        k = nz - row_start                       # nonzero (i, j) pairs with the k columns w < j
        j = np.repeat(ind[lo:hi], k)
        w = ind[ragged_arange(row_start, k)]
        return j % self.nprocs, (j // self.nprocs) * self.n + w

    def hits(self, keys: np.ndarray) -> int:
        """How many of the queried (j, w) are edges of this rank's rows."""
        if keys.size == 0 or self.keys.size == 0:
            return 0
        pos = np.searchsorted(self.keys, keys)
        np.minimum(pos, self.keys.size - 1, out=pos)
        return int(np.count_nonzero(self.keys[pos] == keys))


def count_fabsp(bsp: BSP, graph: Graph, chunk_rows: int, **mailbox_kw: Any) -> tuple[int, int, float]:
    """FA-BSP triangle count: returns (triangles found on this rank, queries sent, seconds)."""
    found = [0]

    def check(keys: np.ndarray) -> None:
        found[0] += graph.hits(keys)

    box = bsp.mailbox(check, np.int64, name="wedge", **mailbox_kw)
    sent = [0]

    def body() -> None:
        nrows = graph.indptr.size - 1
        for lo in range(0, nrows, chunk_rows):
            owner, keys = graph.queries(lo, min(nrows, lo + chunk_rows))
            box.send(owner, keys)
            sent[0] += keys.size
        bsp.sync("triangles")

    seconds, _ = timed(bsp, body)
    return found[0], sent[0], seconds


def count_bsp(bsp: BSP, graph: Graph) -> tuple[int, int, float]:
    """Plain-BSP count: every query in one bulk exchange."""
    queue = bsp.queue(np.int64, name="wedges")
    result = [0, 0]

    def body() -> None:
        owner, keys = graph.queries(0, graph.indptr.size - 1)
        queue.send(owner, keys)
        bsp.sync("triangles")
        result[0], result[1] = graph.hits(queue.received()), keys.size

    seconds, _ = timed(bsp, body)
    return result[0], result[1], seconds


def count_naive(bsp: BSP, graph: Graph) -> tuple[int, int, float]:
    """One MPI message per query."""
    result = [0, 0]

    def body(comm: MPI.Comm) -> None:
        owner, keys = graph.queries(0, graph.indptr.size - 1)
        result[0], result[1] = graph.hits(naive_exchange(comm, owner, keys)), keys.size
        bsp.sync("triangles")

    seconds, _ = timed_naive(bsp, body)
    return result[0], result[1], seconds


def make_graph(kind: str, n: int, degree: float, scale: int, edge_factor: int, seed: int
               ) -> tuple[np.ndarray, int]:
    """The global edge list and vertex count for ``--graph``."""
    if kind == "er":
        return erdos_renyi(n, degree, seed), n
    return rmat(scale, edge_factor, seed), 1 << scale


def serial_count(edges: np.ndarray, n: int) -> int | None:
    """The oracle: dense numpy up to ``DENSE_ORACLE_MAX_N`` vertices, else scipy.sparse."""
    return triangles_dense(edges, n) if n <= DENSE_ORACLE_MAX_N else triangles_sparse(edges, n)


def run_triangles(bsp: BSP, mode: str, edges: np.ndarray, n: int, chunk_rows: int = 1024,
                  check: bool = True, **mailbox_kw: Any) -> Outcome:
    """Count on every rank; the tests and the command line call this."""
    graph = Graph(edges, n, bsp.pid, bsp.nprocs)
    if mode == "fabsp":
        found, sent, seconds = count_fabsp(bsp, graph, chunk_rows, **mailbox_kw)
    elif mode == "bsp":
        found, sent, seconds = count_bsp(bsp, graph)
    elif mode == "naive":
        found, sent, seconds = count_naive(bsp, graph)
    else:
        raise ValueError(f"unknown mode {mode!r}")
    total = int(bsp.allreduce(found, op="sum"))
    expected = serial_count(edges, n) if check else None
    ok = None if expected is None else total == expected
    detail = f"{n:,} vertices, {edges.shape[0]:,} edges: {total:,} triangles" + (
        "" if expected is None else f" (serial count {expected:,})")
    return Outcome(sent, seconds, ok, detail)


def _app(bsp: BSP, args: argparse.Namespace) -> int:
    n = args.n or (300 if args.mode == "naive" else 10_000) * bsp.nprocs
    if bsp.pid == 0 and not args.quiet:
        print(f"triangles: generating the {args.graph} graph ...", file=sys.stderr, flush=True)
    edges, n = make_graph(args.graph, n, args.degree, args.scale, args.edge_factor, args.seed)
    out = run_triangles(bsp, args.mode, edges, n, args.chunk_rows, not args.no_check,
                        **(mailbox_options(args) if args.mode == "fabsp" else {}))
    if out.ok is None and not args.no_check and bsp.pid == 0:
        print("no oracle for a graph this large without scipy: check skipped", file=sys.stderr)
    return report(bsp, "triangles", args.mode, out, args, unit="queries")


def main(argv: list[str] | None = None) -> int:
    parser = app_parser("triangles", __doc__)
    parser.add_argument("--graph", choices=("er", "rmat"), default="er",
                        help="er: Erdős–Rényi (flat); rmat: R-MAT, skewed degrees (default er)")
    add_n(parser, "er: vertices (rmat: --scale)", per="in total", default=None,
          shown_default="10,000 times the number of ranks; 300 times with --mode naive")
    parser.add_argument("--degree", type=positive_float, default=20.0, help="er: average degree (default 20)")
    parser.add_argument("--scale", type=positive_int, default=14,
                        help="rmat: 2**SCALE vertices in total (default 14)")
    parser.add_argument("--edge-factor", type=positive_int, default=8,
                        help="rmat: edges drawn per vertex (default 8)")
    parser.add_argument("--chunk-rows", type=positive_int, default=1024,
                        help="fabsp: rows whose queries are generated per step (default 1024)")
    args = parser.parse_args(argv)
    if not args.degree < (args.n or 1 << 62):
        parser.error("--degree must be below the number of vertices")
    check_app_outputs(parser, args)
    # Every rank draws the whole edge list: about 16 bytes per edge, several copies while it is
    # made canonical (np.unique), and the oracle's adjacency on rank 0.
    if args.graph == "rmat":
        edges = float(args.edge_factor) * 2.0 ** args.scale
        what = f"--scale {args.scale} --edge-factor {args.edge_factor} ({edges:,.0f} edges)"
        hint = "use a smaller --scale or --edge-factor"
        check_memory(parser, 6 * 16.0 * edges, what, hint)
    elif args.n is not None:
        edges = float(args.n) * args.degree / 2
        check_memory(parser, 6 * 16.0 * edges, f"--n {args.n} --degree {args.degree:g} ({edges:,.0f} edges)",
                     "use a smaller --n or --degree")
    return run_app(_app, args)


if __name__ == "__main__":
    sys.exit(main())
