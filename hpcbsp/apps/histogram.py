"""histogram (bale): N random increments per rank into a distributed table of counters.

    mpiexec -n P python -m hpcbsp.apps.histogram [-n UPDATES] [-T TABLE] [--mode fabsp|bsp|naive]

Each rank draws N uniform global indices into a table of T*P int64 counters laid out cyclically
(index g on rank g % P at offset g // P) and increments table[g] once for each.  Modes:

  fabsp  one mailbox whose handler adds a batch of offsets into the local counters; the rank
         sends its indices in chunks while handlers run as batches arrive; one sync;
  bsp    one queue send of all offsets and one sync, then the owner adds them (bulk exchange);
  naive  one MPI message per update (for the baseline; use a much smaller N).

Prints updates per second per rank (timed: from a sync after the indices exist to the end of the
last sync) and the superstep ledger, and checks the table against a serial numpy oracle
(``np.bincount`` of every rank's regenerated indices).  Exit status 1 if the check fails.
"""
from __future__ import annotations

import sys

import numpy as np
from mpi4py import MPI

from ..kernels import scatter_add
from ..runtime import BSP
from .irregular_common import Outcome, cyclic_owner, naive_exchange, table_app_main, timed, \
    timed_naive

#: bale's defaults, per rank.
DEFAULT_UPDATES = 5_000_000
DEFAULT_TABLE = 10_000
DEFAULT_NAIVE_UPDATES = 50_000


def updates_of(rank: int, nprocs: int, n: int, table: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Rank ``rank``'s updates as ``(owner rank, offset)`` arrays (reproducible from the seed)."""
    g = np.random.default_rng([seed, rank]).integers(0, table * nprocs, n)
    return cyclic_owner(g, nprocs)


def oracle(pid: int, nprocs: int, n: int, table: int, seed: int) -> np.ndarray:
    """This rank's part of the table, counted serially from every rank's regenerated updates."""
    expected = np.zeros(table, dtype=np.int64)
    for rank in range(nprocs):
        owner, off = updates_of(rank, nprocs, n, table, seed)
        expected += np.bincount(off[owner == pid], minlength=table)
    return expected


def histogram_fabsp(bsp: BSP, owner: np.ndarray, off: np.ndarray, table: int, chunk: int,
                    **mailbox_kw: int) -> tuple[np.ndarray, float]:
    """FA-BSP histogram; returns this rank's counters and its time."""
    counts = np.zeros(table, dtype=np.int64)

    def add(offsets: np.ndarray) -> None:
        scatter_add(counts, offsets, 1)

    box = bsp.mailbox(add, np.int64, name="histogram", **mailbox_kw)

    def body() -> None:
        for start in range(0, owner.size, chunk):
            box.send(owner[start:start + chunk], off[start:start + chunk])
        bsp.sync("histogram")

    seconds, _ = timed(bsp, body)
    return counts, seconds


def histogram_bsp(bsp: BSP, owner: np.ndarray, off: np.ndarray, table: int
                  ) -> tuple[np.ndarray, float]:
    """Plain-BSP histogram: one bulk exchange of all offsets, then local increments."""
    counts = np.zeros(table, dtype=np.int64)
    queue = bsp.queue(np.int64, name="histogram")

    def body() -> None:
        queue.send(owner, off)
        bsp.sync("histogram")
        scatter_add(counts, queue.received(), 1)

    seconds, _ = timed(bsp, body)
    return counts, seconds


def histogram_naive(bsp: BSP, owner: np.ndarray, off: np.ndarray, table: int
                    ) -> tuple[np.ndarray, float]:
    """One MPI message per update."""
    counts = np.zeros(table, dtype=np.int64)

    def body(comm: MPI.Comm) -> None:
        scatter_add(counts, naive_exchange(comm, owner, off), 1)
        bsp.sync("histogram")

    seconds, _ = timed_naive(bsp, body)
    return counts, seconds


def run_histogram(bsp: BSP, mode: str, n: int, table: int, seed: int = 1, chunk: int = 1 << 16,
                  check: bool = True, **mailbox_kw: int) -> Outcome:
    """Run one mode on every rank; the benchmark calls this too."""
    owner, off = updates_of(bsp.pid, bsp.nprocs, n, table, seed)
    if mode == "fabsp":
        counts, seconds = histogram_fabsp(bsp, owner, off, table, chunk, **mailbox_kw)
    elif mode == "bsp":
        counts, seconds = histogram_bsp(bsp, owner, off, table)
    elif mode == "naive":
        counts, seconds = histogram_naive(bsp, owner, off, table)
    else:
        raise ValueError(f"unknown mode {mode!r}")
    ok = bool(np.array_equal(counts, oracle(bsp.pid, bsp.nprocs, n, table, seed))) if check else None
    return Outcome(n, seconds, ok, f"table: {table:,} counters per rank, "
                                   f"{int(counts.sum()):,} increments landed on rank {bsp.pid}")


def main(argv: list[str] | None = None) -> int:
    return table_app_main(argv, "histogram", __doc__, "updates",
                          (DEFAULT_UPDATES, DEFAULT_NAIVE_UPDATES, DEFAULT_TABLE), run_histogram)


if __name__ == "__main__":
    sys.exit(main())
