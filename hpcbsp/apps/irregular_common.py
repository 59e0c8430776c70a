"""What the irregular apps (histogram, index_gather, triangles, bfs) share.

* the cyclic layout of bale (global index ``g`` lives on rank ``g % P`` at offset ``g // P``);
* the command line: ``--mode fabsp|bsp|naive`` and the mailbox tuning options, with argparse
  types that reject bad values with one line and exit status 2;
* the *naive* transport: one MPI message per record (the baseline FA-BSP must beat);
* timing and the report every app prints: updates per second per rank, the oracle check, the
  ledger summary.
"""
from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
from mpi4py import MPI

from ..runtime import BSP
from ..runtime import run as run_bsp
from ..runtime.ledger import summarize
from ..util.args import (LEDGER_SUFFIXES, OneLineParser, add_alias, add_common_options, check_memory, check_outputs,
                         launcher_size, plural, positive_int)

MODES = ("fabsp", "bsp", "naive")
#: The table apps (histogram, index_gather) also have the one-sided baseline (:mod:`.rma`).
TABLE_MODES = MODES + ("rma",)
_TAG_NAIVE = 7


def cyclic_owner(g: np.ndarray, nprocs: int) -> tuple[np.ndarray, np.ndarray]:
    """``(rank, offset)`` of global indices ``g`` in the cyclic layout."""
    if nprocs & (nprocs - 1) == 0:  # a power of two: shifts, not int64 division (much faster)
        shift = nprocs.bit_length() - 1
        return g & (nprocs - 1), g >> shift
    off, rank = np.divmod(g, nprocs)
    return rank, off


def app_parser(prog: str, doc: str, modes: tuple[str, ...] = MODES) -> argparse.ArgumentParser:
    """The options every irregular app has; the app adds its own."""
    parser = OneLineParser(
        prog=f"python -m hpcbsp.apps.{prog}", description=doc,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    rma = ("; rma: one passive-target MPI RMA operation (Accumulate or Get) per record, the "
           "one-sided baseline (use a much smaller size; raw MPI too)") if "rma" in modes else ""
    parser.add_argument("--mode", choices=modes, default="fabsp",
                        help="fabsp: mailboxes with handlers, aggregated and overlapped (default); "
                             "bsp: plain BSP, one bulk exchange per superstep; naive: one MPI "
                             "message per record (use a much smaller size; raw MPI, so the ledger does "
                             f"not count it){rma}")
    parser.add_argument("--buffer", type=positive_int, default=None,
                        help="fabsp: records per destination buffer (default: about 64 KiB)")
    parser.add_argument("--max-pending", type=positive_int, default=16,
                        help="fabsp: messages in flight per mailbox (default 16)")
    parser.add_argument("--chunk", type=positive_int, default=1 << 16,
                        help="fabsp: records generated and sent per step of local work, with "
                             "bsp.progress() in between (default 65536)")
    parser.add_argument("--no-check", action="store_true", help="skip the serial oracle check")
    add_common_options(parser)
    return parser


def check_app_outputs(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The output paths every irregular app has, checked before the run."""
    check_outputs(parser, [(args.ledger, "--ledger file", LEDGER_SUFFIXES)])


def mailbox_options(args: argparse.Namespace) -> dict[str, int]:
    """The ``bsp.mailbox`` keyword arguments the command line chose."""
    kw = {"max_pending": args.max_pending}
    if args.buffer is not None:
        kw["buffer"] = args.buffer
    return kw


def table_app_main(argv: list[str] | None, app: str, doc: str, unit: str,
                   defaults: tuple[int, int, int], run: Callable[..., "Outcome"],
                   extra: Callable[[argparse.ArgumentParser], Callable[[argparse.Namespace], dict]]
                   | None = None) -> int:
    """The command line of the table apps (histogram, index_gather): ``-n`` and ``-T``.

    ``defaults`` are (N per rank, N per rank in naive mode, table entries per rank); ``run`` is
    the app's ``run_*(bsp, mode, n, table, seed, chunk, check, **kw)``.  ``extra(parser)`` may
    add an app's own options and return a function that turns the parsed arguments into more
    keyword arguments for ``run`` (checking them with ``parser.error``).
    """
    n_default, n_naive, table_default = defaults
    parser = app_parser(app, doc, TABLE_MODES)
    parser.add_argument("--n", dest="n", metavar="N", type=positive_int, default=None,
                        help=f"{unit} per rank (default {n_default:,}; {n_naive:,} with --mode naive or rma)")
    add_alias(parser, "-n", f"--{unit}", dest="n", type=positive_int)  # the old spellings
    parser.add_argument("-T", "--table", type=positive_int, default=table_default,
                        help=f"table entries per rank (default {table_default:,})")
    extra_kw = extra(parser) if extra is not None else (lambda args: {})
    args = parser.parse_args(argv)
    app_kw = extra_kw(args)
    check_app_outputs(parser, args)
    n = args.n or (n_naive if args.mode in ("naive", "rma") else n_default)
    # Per rank: the indices and offsets drawn (int64, a few copies) and the table; the oracle
    # holds the whole table (T times the ranks: the launcher says how many).
    check_memory(parser, 6 * 8.0 * n + 8.0 * args.table * (2 + launcher_size()),
                 f"--n {n} -T {args.table}", "use a smaller --n or -T")

    def app_main(bsp: BSP) -> int:
        n = args.n or (n_naive if args.mode in ("naive", "rma") else n_default)
        kw = dict(mailbox_options(args) if args.mode == "fabsp" else {}, **app_kw)
        out = run(bsp, args.mode, n, args.table, args.seed, args.chunk, not args.no_check, **kw)
        return report(bsp, app, args.mode, out, args, unit=unit)

    return run_bsp(app_main)


def naive_exchange(comm: MPI.Comm, dests: np.ndarray, records: np.ndarray) -> np.ndarray:
    """Deliver record i to rank ``dests[i]`` with one MPI message per record (collective).

    The baseline of the benchmark: what a program that sends every update on its own costs.
    Counts go first with one ``Alltoall`` so receivers know how many messages to expect.
    Returns the records addressed to this rank (its own first, then in arrival order).
    h-relation: one message of ``itemsize`` bytes per record, out and in.
    """
    p, me = comm.Get_size(), comm.Get_rank()
    dests = np.asarray(dests, dtype=np.int64)
    counts = np.bincount(dests, minlength=p).astype(np.int64)
    incoming = np.empty(p, dtype=np.int64)
    comm.Alltoall(counts, incoming)
    raw = np.ascontiguousarray(records).view(np.uint8).reshape(records.shape[0], records.dtype.itemsize)
    n_in = int(incoming.sum() - incoming[me])
    out = np.empty(n_in, dtype=records.dtype)
    out_raw = out.view(np.uint8).reshape(n_in, records.dtype.itemsize)
    remote = np.flatnonzero(dests != me)
    reqs = []
    got = 0
    # Interleave sending and receiving so neither side's queues grow with the whole volume.
    for k, i in enumerate(remote.tolist()):
        reqs.append(comm.Isend([raw[i], MPI.BYTE], int(dests[i]), _TAG_NAIVE))
        if k % 64 == 63:
            while got < n_in and comm.Iprobe(MPI.ANY_SOURCE, _TAG_NAIVE):
                comm.Recv([out_raw[got], MPI.BYTE], MPI.ANY_SOURCE, _TAG_NAIVE)
                got += 1
            MPI.Request.Waitall(reqs)
            reqs.clear()
    while got < n_in:
        comm.Recv([out_raw[got], MPI.BYTE], MPI.ANY_SOURCE, _TAG_NAIVE)
        got += 1
    MPI.Request.Waitall(reqs)
    return np.concatenate([records[dests == me], out])


@dataclass
class Outcome:
    """One run of an app on this rank."""

    updates: int        #: records this rank sent (the app's unit of work)
    seconds: float      #: wall time of the timed part on this rank
    ok: bool | None     #: the oracle check on this rank (None: not checked)
    detail: str = ""    #: one line for the report (rank 0's is printed)


def timed(bsp: BSP, body: Callable[[], object]) -> tuple[float, object]:
    """Run ``body`` between two syncs; return this rank's seconds and ``body``'s result.

    ``body`` must end with a sync (so every rank's time covers the whole exchange).
    """
    bsp.sync("start")
    t0 = time.perf_counter()
    result = body()
    return time.perf_counter() - t0, result


def timed_naive(bsp: BSP, body: Callable[[MPI.Comm], object]) -> tuple[float, object]:
    """:func:`timed` for the naive mode: ``body(comm)`` gets its own duplicate of the context's
    communicator for :func:`naive_exchange` (freed afterwards)."""
    comm = bsp.comm.Dup()
    try:
        return timed(bsp, lambda: body(comm))
    finally:
        comm.Free()


def report(bsp: BSP, app: str, mode: str, out: Outcome, args: argparse.Namespace | None = None,
           unit: str = "updates") -> int:
    """Print the figures (rank 0), save the ledger if asked, return the exit status (the same on
    every rank).  ``unit`` names what ``out.updates`` counts (updates, reads, queries, ...)."""
    seconds = float(bsp.allreduce(out.seconds, op="max"))
    updates = int(bsp.allreduce(out.updates, op="sum"))
    checked = out.ok is not None
    ok = bool(bsp.allreduce(1 if (out.ok or not checked) else 0, op="min"))
    ledger = getattr(args, "ledger", None)
    if ledger:
        bsp.ledger.save(ledger)
    records = bsp.ledger.gather()
    if bsp.pid == 0:
        rate = updates / bsp.nprocs / seconds if seconds > 0 else float("inf")
        if getattr(args, "json", False):
            print(json.dumps({"app": app, "mode": mode, "ranks": bsp.nprocs, "unit": unit,
                              "per_rank": updates / bsp.nprocs, "seconds": seconds,
                              "rate_per_rank": rate if seconds > 0 else None,
                              "check": None if not checked else ok, "detail": out.detail}))
            return 0 if ok else 1
        check = ("check against the serial oracle: " + ("OK" if ok else "FAILED")) if checked \
            else "check skipped (--no-check)"
        print(f"{app} [{mode}] on {plural(bsp.nprocs, 'rank')}: {updates / bsp.nprocs:,.0f} {unit} per rank "
              f"in {seconds:.3f} s = {rate:,.0f} {unit}/s per rank; {check}")
        if out.detail:
            print(f"  {out.detail}")
        print(summarize(records))
        if ledger:
            print(f"ledger written to {ledger}")
    return 0 if ok else 1


if __name__ == "__main__":
    import sys

    from ..util.args import not_a_program

    sys.exit(not_a_program("hpcbsp.apps.irregular_common",
                           "run python -m hpcbsp.apps.histogram, index_gather, bfs or triangles (--help for options)"))
