"""The count exchange, the first step of a superstep's exchange (collective): every rank learns
what each other rank sends it.

Per pair of ranks three int64 travel: the bytes of the sender's outbox buffer for the receiver
(its headers and small payloads, :mod:`.headers`), the sender's vote on the shared arena's size
(:mod:`..arena`; the same to every rank), and the rounds of one ``Alltoallv`` its large payloads
need (:mod:`.large`; the same to every rank).  One ``Alltoall``; in a bounded exchange the same by
``p - 1`` point-to-point messages each way, polled up to the deadline (:mod:`.completion`).

h-relation: ``3 (p - 1)`` words out of and into every rank.
"""
from __future__ import annotations

import numpy as np
from mpi4py import MPI

from ..arena import NEVER
from ..outbox import Outbox
from .completion import TAG_COUNT, complete
from .large import rounds_needed


def agree(comm: MPI.Comm, outbox: Outbox, deadline: float | None, wait: str) -> tuple[list[int], list[int], int]:
    """Collective: the count exchange of ``outbox``'s superstep.  Returns ``(recv, votes,
    rounds)``: the bytes that come from each rank, every rank's vote on the arena, and how many
    rounds of ``Alltoallv`` carry the large payloads (0: they travel as messages, as some rank
    asked).  Orders this rank's stores into the arena before its headers go.  ``deadline``
    and ``wait``: as :func:`.completion.complete` takes them."""
    p, me = outbox.nprocs, outbox.me
    arena = outbox.arena
    # The bookkeeping is in Python ints: a small superstep's cost is mostly the exchange's own.
    vote = NEVER if arena is None or deadline is not None else arena.vote()
    triples = [0, vote, rounds_needed(outbox, deadline)] * p
    for d, buf in outbox.bufs.items():
        if d != me:
            triples[3 * d] = len(buf)
    send_counts = np.array(triples, dtype=np.int64).reshape(p, 3)
    recv_counts = np.empty((p, 3), dtype=np.int64)
    exchange_counts(comm, send_counts, recv_counts, deadline, wait)
    triples = recv_counts.ravel().tolist()
    recv, votes, asked = triples[0::3], triples[1::3], triples[2::3]
    if arena is not None:
        arena.sync()  # this rank's records in the arena are written before their headers go
    return recv, votes, max(asked) if min(asked) >= 0 else 0


def exchange_counts(comm: MPI.Comm, send_counts: np.ndarray, recv_counts: np.ndarray,
                    deadline: float | None, wait: str) -> None:
    """Every rank learns what each other rank sends it: row ``q`` of ``send_counts`` (p rows of
    int64, the same number of columns on every rank) goes to rank ``q``, and row ``s`` of
    ``recv_counts`` comes from rank ``s``.  One ``Alltoall``, or with a ``deadline`` the same by
    ``p - 1`` point-to-point messages each way, bounded."""
    if deadline is None:
        comm.Alltoall(send_counts, recv_counts)
        return
    me, p = comm.Get_rank(), comm.Get_size()
    recv_counts[me] = send_counts[me]
    others = [q for q in range(p) if q != me]
    reqs = [comm.Irecv([recv_counts[q], MPI.INT64_T], q, TAG_COUNT) for q in others]
    reqs += [comm.Isend([send_counts[q], MPI.INT64_T], q, TAG_COUNT) for q in others]
    complete(reqs, others + others, deadline, wait)
