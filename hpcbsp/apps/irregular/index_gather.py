"""index_gather (bale): N random reads per rank from a distributed table.

    mpiexec -n P python -m hpcbsp.apps.irregular.index_gather [--n READS] [-T TABLE] [--mode fabsp|bsp|naive|rma]

Every rank draws N (--n, per rank) uniform global indices into a table of T*P int64 values laid out cyclically
(index g on rank g % P at offset g // P) and gathers ``tgt[i] = table[g_i]``.  Modes:

  fabsp  two mailboxes: a request mailbox whose handler looks the offsets up and sends the
         values back through a reply mailbox, whose handler stores them.  Replies carry no
         index: a mailbox delivers records from one rank to another in order, so the replies
         from rank d match this rank's requests to d in the order they were made;
  bsp    requests by one queue send and one sync, replies by a second queue send and sync
         (both in request order, as bale's exstack version);
  naive  one MPI message per request and one per reply (use a much smaller N);
  rma    one passive-target MPI_Get per read from the owner's window (the one-sided baseline,
         like bale's AGP; use a much smaller N).

Prints reads per second per rank and the superstep ledger, and checks ``tgt`` against a serial
numpy oracle (the whole table built on every rank from the seed, indexed by the regenerated
indices).  Exit status 1 if the check fails.
"""
from __future__ import annotations

import sys
from typing import Any

import numpy as np
from mpi4py import MPI

from ...kernels import gather, group_by_dest
from ...runtime import BSP
from ...runtime.api.records import destination_slices
from .rma import gather_rma
from .cli import run_mode, table_app_main
from .layout import cyclic_owner
from .naive import naive_exchange, timed_naive
from .report import Outcome, timed

DEFAULT_READS = 5_000_000
DEFAULT_TABLE = 10_000
DEFAULT_NAIVE_READS = 20_000


def global_table(nprocs: int, table: int, seed: int) -> np.ndarray:
    """The whole table (every rank can build it: it is the oracle's and the owners' source)."""
    return np.random.default_rng([seed, 1 << 20]).integers(-(1 << 40), 1 << 40, table * nprocs)


def reads_of(rank: int, nprocs: int, n: int, table: int, seed: int) -> np.ndarray:
    """Rank ``rank``'s global indices (reproducible from the seed)."""
    return np.random.default_rng([seed, rank]).integers(0, table * nprocs, n)


def gather_fabsp(bsp: BSP, owner: np.ndarray, off: np.ndarray, local: np.ndarray, chunk: int,
                 **mailbox_kw: Any) -> tuple[np.ndarray, float]:
    """FA-BSP index-gather with a request and a reply mailbox; returns ``tgt`` and the time."""
    tgt = np.empty(owner.size, dtype=local.dtype)
    cursor = [0] * bsp.nprocs
    slots: list[np.ndarray] = []

    def answer(offsets: np.ndarray, source: int) -> None:
        reply.send(source, gather(local, offsets))

    def store(values: np.ndarray, source: int) -> None:
        start = cursor[source]
        tgt[slots[source][start:start + values.size]] = values
        cursor[source] = start + values.size

    request = bsp.mailbox(answer, np.int64, with_source=True, name="request", **mailbox_kw)
    reply = bsp.mailbox(store, local.dtype, with_source=True, name="reply", **mailbox_kw)

    def body() -> None:
        # The slots of the requests to each rank, in the order they are sent (stable grouping).
        perm, counts = group_by_dest(owner, bsp.nprocs)
        ends = np.cumsum(counts)
        slots.extend(perm[e - c:e] for e, c in zip(ends.tolist(), counts.tolist()))
        for start in range(0, owner.size, chunk):
            request.send(owner[start:start + chunk], off[start:start + chunk])
        bsp.sync("index-gather")

    seconds, _ = timed(bsp, body)
    return tgt, seconds


def gather_bsp(bsp: BSP, owner: np.ndarray, off: np.ndarray, local: np.ndarray
               ) -> tuple[np.ndarray, float]:
    """Plain-BSP index-gather: requests in one superstep, replies in request order in the next."""
    tgt = np.empty(owner.size, dtype=local.dtype)
    requests = bsp.queue(np.int64, name="requests")
    replies = bsp.queue(local.dtype, name="replies")
    asked = bsp.coarray(bsp.nprocs, np.int64, name="asked")  # asked[s]: requests from rank s

    def body() -> None:
        # Grouped once: the same permutation sends the requests and places the replies.
        perm, counts = group_by_dest(owner, bsp.nprocs)
        grouped = off[perm]
        for dest, start, stop in destination_slices(counts):
            requests.send(dest, grouped[start:stop])
            asked.put(dest, counts[dest:dest + 1], offset=bsp.pid)
        bsp.sync("requests")
        sources = np.repeat(np.arange(bsp.nprocs), asked.local)
        replies.send(sources, gather(local, requests.received()))
        asked.local[:] = 0
        bsp.sync("replies")
        tgt[perm] = replies.received()  # by source rank, each in request order

    seconds, _ = timed(bsp, body)
    return tgt, seconds


_NAIVE_REQUEST = np.dtype([("source", np.int64), ("slot", np.int64), ("offset", np.int64)])
_NAIVE_REPLY = np.dtype([("slot", np.int64), ("value", np.int64)])


def gather_naive(bsp: BSP, owner: np.ndarray, off: np.ndarray, local: np.ndarray
                 ) -> tuple[np.ndarray, float]:
    """One MPI message per request and per reply."""
    tgt = np.empty(owner.size, dtype=local.dtype)

    def body(comm: MPI.Comm) -> None:
        req = np.empty(owner.size, dtype=_NAIVE_REQUEST)
        req["source"], req["slot"], req["offset"] = bsp.pid, np.arange(owner.size), off
        got = naive_exchange(comm, owner, req)
        rep = np.empty(got.size, dtype=_NAIVE_REPLY)
        rep["slot"], rep["value"] = got["slot"], local[got["offset"]]
        back = naive_exchange(comm, got["source"], rep)
        tgt[back["slot"]] = back["value"]
        bsp.sync("index-gather")

    seconds, _ = timed_naive(bsp, body)
    return tgt, seconds


def run_index_gather(bsp: BSP, mode: str, n: int, table: int, seed: int = 1, chunk: int = 1 << 16,
                     check: bool = True, **mailbox_kw: Any) -> Outcome:
    """Run one mode on every rank; the benchmark calls this too."""
    whole = global_table(bsp.nprocs, table, seed)
    local = np.ascontiguousarray(whole[bsp.pid::bsp.nprocs])
    g = reads_of(bsp.pid, bsp.nprocs, n, table, seed)
    owner, off = cyclic_owner(g, bsp.nprocs)
    tgt, seconds = run_mode(mode, {"fabsp": gather_fabsp, "bsp": gather_bsp, "naive": gather_naive, "rma": gather_rma},
                            bsp, owner, off, local, chunk=chunk, **mailbox_kw)
    ok = bool(np.array_equal(tgt, whole[g])) if check else None
    return Outcome(n, seconds, ok, f"table: {table:,} values per rank; request and reply "
                                   f"{2 * 8 * n:,} bytes per rank")


def main(argv: list[str] | None = None) -> int:
    return table_app_main(argv, "index_gather", __doc__, "reads",
                          (DEFAULT_READS, DEFAULT_NAIVE_READS, DEFAULT_TABLE), run_index_gather)


if __name__ == "__main__":
    sys.exit(main())
