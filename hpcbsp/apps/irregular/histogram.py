"""histogram (bale): N random increments per rank into a distributed table of counters.

    mpiexec -n P python -m hpcbsp.apps.irregular.histogram [--n UPDATES] [-T TABLE] [--mode fabsp|bsp|naive|rma]

Each rank draws N (--n, per rank) uniform global indices into a table of T*P int64 counters laid out cyclically
(index g on rank g % P at offset g // P) and increments table[g] once for each.  Modes:

  fabsp  one mailbox whose handler adds a batch of offsets into the local counters; the rank
         sends its indices in chunks while handlers run as batches arrive; one sync;
  bsp    one queue send of all offsets and one sync, then the owner adds them (bulk exchange);
  naive  one MPI message per update (for the baseline; use a much smaller N);
  rma    one passive-target MPI_Accumulate(+1) per update into the owner's window (the one-sided
         baseline, like bale's AGP; use a much smaller N).

Prints updates per second per rank (timed: from a sync after the indices exist to the end of the
last sync) and the superstep ledger, and checks the table against a serial numpy oracle
(``np.bincount`` of every rank's regenerated indices).  Exit status 1 if the check fails.

``--combine`` (fabsp): the records are (key, count) pairs, one count per update, in a mailbox
declared ``combine="sum"`` (:mod:`hpcbsp.fabsp.combining`): the updates of one counter merge into
one record in the sender's buffers and at every rank they pass through, so fewer records cross
(most where keys repeat).  ``--skew S`` (S > 1) draws Zipf-distributed keys instead of uniform
ones: key rank z (1, 2, ...) has probability proportional to z^-S, and rank z is the global
index (z - 1) * 2654435761 mod T*P, so the hot keys are spread over the ranks.

With ``--rounds R`` the updates are applied in R supersteps (round r draws its own updates from
the seed, the rank and r), and ``--checkpoint DIR --every K`` saves the counters every K rounds;
``--restart`` resumes from there and ends with exactly the counters of an uninterrupted run
(counts are integers, so the order of increments cannot matter).  A restart needs the same
number of ranks: each rank's share of the updates depends on it.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Any, Callable

import numpy as np
from mpi4py import MPI

from ...kernels import scatter_add
from ...runtime import BSP, BadInput, BSPError
from ...runtime.api.checkpoint import check_target, exists as checkpoint_exists
from ...util.args.checks import check_checkpoint
from ...util.args.types import positive_int
from ...util.args.vocabulary import add_checkpoint, add_skew
from .rma import histogram_rma
from .cli import run_mode, table_app_main
from .layout import cyclic_owner
from .naive import naive_exchange, timed_naive
from .report import Outcome, timed

#: bale's defaults, per rank.
DEFAULT_UPDATES = 5_000_000
DEFAULT_TABLE = 10_000
DEFAULT_NAIVE_UPDATES = 50_000
PROGRAM = "hpcbsp.apps.irregular.histogram"  #: the tag of its checkpoints


#: The multiplier that spreads Zipf key ranks over the table (a prime: a bijection mod T*P
#: unless T*P is a multiple of it).
SPREAD = 2654435761
#: (key, count) records of the combining histogram.
KEY_COUNT = np.dtype([("key", np.int64), ("value", np.int64)])


def keys_of(rank: int, nprocs: int, n: int, table: int, seed: int, skew: float = 0.0) -> np.ndarray:
    """Rank ``rank``'s global indices: uniform, or Zipf with exponent ``skew`` (> 1; the module
    notes), reproducible from the seed."""
    rng = np.random.default_rng([seed, rank])
    size = table * nprocs
    if not skew:
        return rng.integers(0, size, n)
    if skew <= 1:
        raise ValueError(f"a Zipf skew must be > 1, got {skew}")
    z = rng.zipf(skew, n)
    return ((z - 1) % size) * SPREAD % size


def updates_of(rank: int, nprocs: int, n: int, table: int, seed: int, skew: float = 0.0
               ) -> tuple[np.ndarray, np.ndarray]:
    """Rank ``rank``'s updates as ``(owner rank, offset)`` arrays (reproducible from the seed)."""
    return cyclic_owner(keys_of(rank, nprocs, n, table, seed, skew), nprocs)


def oracle(pid: int, nprocs: int, n: int, table: int, seed: int, skew: float = 0.0) -> np.ndarray:
    """This rank's part of the table, counted serially from every rank's regenerated updates."""
    expected = np.zeros(table, dtype=np.int64)
    for rank in range(nprocs):
        owner, off = updates_of(rank, nprocs, n, table, seed, skew)
        expected += np.bincount(off[owner == pid], minlength=table)
    return expected


def histogram_fabsp(bsp: BSP, owner: np.ndarray, off: np.ndarray, table: int, chunk: int,
                    combine: bool = False, **mailbox_kw: Any) -> tuple[np.ndarray, float]:
    """FA-BSP histogram; returns this rank's counters and its time.  ``combine``: (key, count)
    records in a mailbox that sums the counts of one key on the way (the module notes)."""
    counts = np.zeros(table, dtype=np.int64)
    if combine:
        records = np.empty(off.size, dtype=KEY_COUNT)
        records["key"] = off
        records["value"] = 1

        def add_counts(recs: np.ndarray) -> None:
            scatter_add(counts, recs["key"], recs["value"])

        box = bsp.mailbox(add_counts, KEY_COUNT, name="histogram", combine="sum", **mailbox_kw)
    else:
        records = off

        def add(offsets: np.ndarray) -> None:
            scatter_add(counts, offsets, 1)

        box = bsp.mailbox(add, np.int64, name="histogram", **mailbox_kw)

    def body() -> None:
        for start in range(0, owner.size, chunk):
            box.send(owner[start:start + chunk], records[start:start + chunk])
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
                  check: bool = True, skew: float = 0.0, combine: bool = False, **mailbox_kw: Any) -> Outcome:
    """Run one mode on every rank; the benchmark calls this too (``skew``: Zipf keys;
    ``combine``: fabsp only, the module notes)."""
    owner, off = updates_of(bsp.pid, bsp.nprocs, n, table, seed, skew)
    if combine and mode != "fabsp":
        raise ValueError(f"combining is for the fabsp mode, not {mode!r}")
    counts, seconds = run_mode(mode, {"fabsp": histogram_fabsp, "bsp": histogram_bsp, "naive": histogram_naive,
                                      "rma": histogram_rma}, bsp, owner, off, table, chunk=chunk, combine=combine,
                               **mailbox_kw)
    ok = bool(np.array_equal(counts, oracle(bsp.pid, bsp.nprocs, n, table, seed, skew))) if check else None
    return Outcome(n, seconds, ok, f"table: {table:,} counters per rank, "
                                   f"{int(counts.sum()):,} increments landed on rank {bsp.pid}")


def round_sizes(n: int, rounds: int) -> list[int]:
    """Updates per round: ``n`` split as evenly as possible (the first rounds get one more)."""
    base, extra = divmod(n, rounds)
    return [base + (1 if r < extra else 0) for r in range(rounds)]


def round_updates(rank: int, nprocs: int, n: int, table: int, seed: int, rnd: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Rank ``rank``'s updates of round ``rnd``, as ``(owner rank, offset)`` arrays."""
    g = np.random.default_rng([seed, rank, rnd]).integers(0, table * nprocs, n)
    return cyclic_owner(g, nprocs)


def rounds_oracle(pid: int, nprocs: int, n: int, table: int, seed: int, rounds: int) -> np.ndarray:
    """This rank's counters after every round, counted serially (the test oracle)."""
    expected = np.zeros(table, dtype=np.int64)
    for rnd, size in enumerate(round_sizes(n, rounds)):
        for rank in range(nprocs):
            owner, off = round_updates(rank, nprocs, size, table, seed, rnd)
            expected += np.bincount(off[owner == pid], minlength=table)
    return expected


def run_histogram_rounds(bsp: BSP, mode: str, n: int, table: int, seed: int = 1, chunk: int = 1 << 16,
                         check: bool = True, *, rounds: int, checkpoint: str | None = None,
                         every: int = 0, restart: bool = False, die_at: int | None = None,
                         quiet: bool = True, **mailbox_kw: Any) -> Outcome:
    """The histogram in ``rounds`` supersteps, with checkpoints of the counters (fabsp or bsp)."""
    counts = bsp.coarray(table, dtype=np.int64, name="histogram:counts")
    program = PROGRAM
    run_id = np.array([n, table, seed, rounds, bsp.nprocs], dtype=np.int64)
    first = 0
    if restart and checkpoint and checkpoint_exists(checkpoint):
        ck = bsp.restore(checkpoint, program=program)
        if not np.array_equal(ck.state["run"], run_id):
            raise BadInput(f"checkpoint {ck.path} is of another histogram run (n, table, seed, "
                           f"rounds, ranks = {ck.state['run'].tolist()}, this run "
                           f"{run_id.tolist()})")
        first = int(ck.state["round"])
        if bsp.pid == 0:
            print(f"histogram: restarted from {ck.path} after round {first} of {rounds}", flush=True)
    local = counts.local
    if mode == "fabsp":
        box = bsp.mailbox(lambda offsets: scatter_add(local, offsets, 1), np.int64, name="histogram",
                          **mailbox_kw)
    elif mode == "bsp":
        queue = bsp.queue(np.int64, name="histogram")
    else:
        raise ValueError(f"--rounds and checkpoints support the fabsp and bsp modes, not {mode!r}")
    sizes = round_sizes(n, rounds)

    def body() -> None:
        for rnd in range(first, rounds):
            if rnd == die_at and bsp.pid == min(1, bsp.nprocs - 1):
                os.kill(os.getpid(), signal.SIGKILL)  # a test of fault tolerance: this rank dies
            owner, off = round_updates(bsp.pid, bsp.nprocs, sizes[rnd], table, seed, rnd)
            if mode == "fabsp":
                for start in range(0, owner.size, chunk):
                    box.send(owner[start:start + chunk], off[start:start + chunk])
                bsp.sync("histogram")
            else:
                queue.send(owner, off)
                bsp.sync("histogram")
                scatter_add(local, queue.received(), 1)
            if checkpoint and every and (rnd + 1) % every == 0:
                bsp.checkpoint(checkpoint, program=program, round=np.int64(rnd + 1), run=run_id)
                if bsp.pid == 0 and not quiet:
                    print(f"histogram: checkpoint written to {checkpoint} after round {rnd + 1}",
                          file=sys.stderr, flush=True)
        bsp.sync("histogram:end")

    seconds, _ = timed(bsp, body)
    ok = bool(np.array_equal(local, rounds_oracle(bsp.pid, bsp.nprocs, n, table, seed, rounds))) \
        if check else None
    return Outcome(sum(sizes[first:]), seconds, ok, f"table: {table:,} counters per rank, rounds "
                   f"{first + 1}..{rounds}, {int(local.sum()):,} increments on rank {bsp.pid}")


def _restart_options(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], dict]:
    parser.add_argument("--combine", action="store_true",
                        help="fabsp: (key, count) records summed on the way (combine='sum')")
    add_skew(parser, "Zipf-distributed keys with exponent S > 1")
    parser.add_argument("--rounds", type=positive_int, default=1, metavar="R",
                        help="apply the updates in R supersteps (default 1)")
    add_checkpoint(parser, "rounds (the counters are saved)")
    parser.add_argument("--die-at", type=int, metavar="ROUND", help=argparse.SUPPRESS)

    def kwargs(args: argparse.Namespace) -> dict:
        if args.rounds < 1:  # (--every's type refuses a negative K)
            parser.error("--rounds must be >= 1")
        if (args.rounds > 1 or args.checkpoint) and args.mode in ("naive", "rma"):
            parser.error("--rounds and --checkpoint work with --mode fabsp or bsp")
        # never over a folder that is not a checkpoint of this program
        check_checkpoint(parser, args, lambda path: check_target(path, PROGRAM), (BSPError,),
                         exists=checkpoint_exists)
        if args.combine and args.mode != "fabsp":
            parser.error("--combine works with --mode fabsp")
        if args.rounds == 1 and not args.checkpoint:
            return {k: v for k, v in (("skew", args.skew), ("combine", args.combine)) if v}
        if args.skew or args.combine:
            parser.error("--skew and --combine work without --rounds and --checkpoint")
        return {"rounds": args.rounds, "checkpoint": args.checkpoint, "every": args.every,
                "restart": args.restart, "die_at": args.die_at, "quiet": args.quiet}
    return kwargs


def _run(bsp: BSP, mode: str, n: int, table: int, seed: int = 1, chunk: int = 1 << 16,
         check: bool = True, **kw: Any) -> Outcome:
    if "rounds" in kw:
        return run_histogram_rounds(bsp, mode, n, table, seed, chunk, check, **kw)
    return run_histogram(bsp, mode, n, table, seed, chunk, check, **kw)


def main(argv: list[str] | None = None) -> int:
    return table_app_main(argv, "histogram", __doc__, "updates",
                          (DEFAULT_UPDATES, DEFAULT_NAIVE_UPDATES, DEFAULT_TABLE), _run,
                          extra=_restart_options)


if __name__ == "__main__":
    sys.exit(main())
