"""bfs: breadth-first search levels on a random graph; in FA-BSP the handlers generate the work.

    mpiexec -n P python -m hpcbsp.apps.irregular.bfs [--n VERTICES] [--degree D] [--mode fabsp|bsp|naive]

Vertices are distributed cyclically (v on rank v % P); every rank keeps the neighbour lists of
its vertices.  The result is every vertex's hop distance from vertex 0.  Modes:

  fabsp  one superstep for the whole search: a mailbox of (vertex, distance) records whose
         handler lowers the vertices' levels and, for every vertex it improved, sends
         (neighbour, level + 1) to the neighbours' owners: the handlers keep generating work
         until none is left, and the sync ends when that traffic, of depth up to the graph's
         diameter, is quiescent everywhere (asynchronous label correcting: a vertex may be
         improved more than once);
  bsp    level-synchronous BFS: one superstep per level (queue send of the frontier's
         neighbours, sync, keep the unvisited ones) and an allreduce to stop;
  naive  level-synchronous, one MPI message per record (use a small graph).

Prints relaxation records per second per rank, how many supersteps it took, and the
ledger; checks the levels against a serial queue-based BFS.  Exit status 1 if the check fails.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np
from mpi4py import MPI

from ...runtime import BSP
from ...util.args.checks import check_memory
from ...util.args.types import nonnegative_int, positive_float
from ...util.args.vocabulary import add_n
from .cli import app_parser, check_app_outputs, mailbox_options, run_app
from .naive import naive_exchange, timed_naive
from .report import Outcome, report, timed
from .graphs import bfs_levels, erdos_renyi, local_rows, ragged_arange

UNSEEN = np.iinfo(np.int64).max
RELAX = np.dtype([("vertex", np.int64), ("level", np.int64)])


class Part:
    """This rank's vertices: neighbour lists (CSR) and levels."""

    def __init__(self, edges: np.ndarray, n: int, pid: int, nprocs: int):
        self.pid, self.nprocs = pid, nprocs
        self.indptr, self.indices = local_rows(edges, n, pid, nprocs, symmetric=True)
        self.level = np.full(self.indptr.size - 1, UNSEEN, dtype=np.int64)

    def neighbours(self, local: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The neighbours of local vertices ``local`` and, for each, the index into ``local``."""
        starts = self.indptr[local]
        degree = self.indptr[local + 1] - starts
        return self.indices[ragged_arange(starts, degree)], np.repeat(np.arange(local.size), degree)

    def global_levels(self) -> np.ndarray:
        """This rank's levels with -1 for unreachable (the oracle's convention)."""
        return np.where(self.level == UNSEEN, -1, self.level)


def bfs_fabsp(bsp: BSP, part: Part, source: int, **mailbox_kw: Any) -> tuple[int, float]:
    """Asynchronous BFS in one superstep; returns records sent by this rank and its time."""
    p = bsp.nprocs
    sent = [0]

    def relax(recs: np.ndarray) -> None:
        local = recs["vertex"] // p
        better = recs["level"] < part.level[local]
        if not better.any():
            return
        local, level = local[better], recs["level"][better]
        np.minimum.at(part.level, local, level)
        improved = np.unique(local)
        nbrs, which = part.neighbours(improved)
        if nbrs.size:
            out = np.empty(nbrs.size, dtype=RELAX)
            out["vertex"] = nbrs
            out["level"] = part.level[improved][which] + 1
            box.send(nbrs % p, out)
            sent[0] += nbrs.size

    box = bsp.mailbox(relax, RELAX, name="relax", **mailbox_kw)

    def body() -> None:
        if bsp.pid == source % p:
            start = np.zeros(1, dtype=RELAX)
            start["vertex"] = source
            box.send(bsp.pid, start)
        bsp.sync("bfs")

    seconds, _ = timed(bsp, body)
    return sent[0], seconds


def bfs_levelwise(bsp: BSP, part: Part, source: int, exchange: str) -> tuple[int, float]:
    """Level-synchronous BFS with a queue (``exchange="bsp"``) or one message per record."""
    p = bsp.nprocs
    queue = bsp.queue(np.int64, name="frontier")
    sent = [0]

    def body(comm: MPI.Comm | None) -> None:
        frontier = np.array([source // p], dtype=np.int64) if bsp.pid == source % p \
            else np.empty(0, dtype=np.int64)
        part.level[frontier] = 0
        depth = 0
        while bsp.allreduce(frontier.size, op="sum") > 0:
            nbrs, _ = part.neighbours(frontier)
            sent[0] += nbrs.size
            if comm is None:
                queue.send(nbrs % p, nbrs)
                bsp.sync(f"level {depth}")
                arrived = queue.received() // p
            else:
                arrived = naive_exchange(comm, nbrs % p, nbrs) // p
                bsp.sync(f"level {depth}")
            depth += 1
            fresh = np.unique(arrived[part.level[arrived] == UNSEEN])
            part.level[fresh] = depth
            frontier = fresh

    if exchange == "naive":
        seconds, _ = timed_naive(bsp, body)
    else:
        seconds, _ = timed(bsp, lambda: body(None))
    return sent[0], seconds


def run_bfs(bsp: BSP, mode: str, edges: np.ndarray, n: int, source: int = 0, check: bool = True,
            **mailbox_kw: Any) -> Outcome:
    """Search on every rank; the tests and the command line call this."""
    part = Part(edges, n, bsp.pid, bsp.nprocs)
    steps0 = bsp.superstep
    if mode == "fabsp":
        sent, seconds = bfs_fabsp(bsp, part, source, **mailbox_kw)
    elif mode in ("bsp", "naive"):
        sent, seconds = bfs_levelwise(bsp, part, source, mode)
    else:
        raise ValueError(f"unknown mode {mode!r}")
    steps = bsp.superstep - steps0
    levels = part.global_levels()
    ok = None
    if check:
        ok = bool(np.array_equal(levels, bfs_levels(edges, n, source)[bsp.pid::bsp.nprocs]))
    depth = int(bsp.allreduce(int(levels.max(initial=-1)), op="max"))
    reached = int(bsp.allreduce(int(np.count_nonzero(levels >= 0)), op="sum"))
    detail = (f"{n:,} vertices, {edges.shape[0]:,} edges: {reached:,} reached from vertex "
              f"{source}, depth {depth}, {steps} supersteps")
    return Outcome(sent, seconds, ok, detail)


def _app(bsp: BSP, args: argparse.Namespace) -> int:
    n = args.n or (200 if args.mode == "naive" else 20_000) * bsp.nprocs
    if not 0 <= args.source < n:
        if bsp.pid == 0:
            sys.stderr.write(f"python -m hpcbsp.apps.irregular.bfs: error: --source must be in [0, {n})\n")
        return 2
    edges = erdos_renyi(n, args.degree, args.seed)
    out = run_bfs(bsp, args.mode, edges, n, args.source, not args.no_check,
                  **(mailbox_options(args) if args.mode == "fabsp" else {}))
    return report(bsp, "bfs", args.mode, out, args, unit="records")


def main(argv: list[str] | None = None) -> int:
    parser = app_parser("bfs", __doc__)
    add_n(parser, "vertices", per="in total", default=None,
          shown_default="20,000 times the number of ranks; 200 times with --mode naive")
    parser.add_argument("--degree", type=positive_float, default=8.0, help="average degree (default 8)")
    parser.add_argument("--source", type=nonnegative_int, default=0, help="start vertex (default 0)")
    args = parser.parse_args(argv)
    if args.n is not None and args.source >= args.n:
        parser.error(f"--source must be a vertex in [0, {args.n})")
    check_app_outputs(parser, args)
    # Every rank holds the whole edge list (16 bytes per edge, a few copies) and the oracle's
    # neighbour lists (Python lists: about 100 bytes per edge end).
    if args.n is not None:
        edges = float(args.n) * args.degree / 2
        check_memory(parser, (6 * 16.0 + 200.0) * edges, f"--n {args.n} --degree {args.degree:g} ({edges:,.0f} edges)",
                     "use a smaller --n or --degree")
    return run_app(_app, args)


if __name__ == "__main__":
    sys.exit(main())
