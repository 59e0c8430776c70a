"""The sparse consensus: who sends to whom, learnt without an all-to-all (collective).

A superstep in which every rank's records go to few ranks (at most
:attr:`~..outbox.Outbox.sparse_max`, none in the shared arena: the control step agreed on no
:attr:`~..outbox.Extra.DENSE`) delivers its outbox buffers by the non-blocking consensus of
Hoefler, Siebert and Lumsdaine (NBX, PPoPP 2010) instead of the dense count exchange
(:mod:`.counts`) and header round (:mod:`.headers`):

1. each rank sends each destination its buffer by a synchronous ``Issend`` (complete only once
   received), and keeps one receive of any source posted;
2. it takes what arrives until all its own sends are complete, then enters an ``Ibarrier``;
3. it goes on taking what arrives until the barrier completes: then every rank's sends were
   received, so nothing of this superstep is left in flight.

A buffer of at most :data:`INLINE` bytes travels as that message; a longer one is announced by
an 8-byte message with its length (a buffer has at least one 32-byte header, so the two never
mix) and follows as a message of its own, received once announced.  Every wait is for the
first of the posted receive, the sends and the barrier: in the ``spin`` wait mode a blocking
``Waitany``, so that a rank's Python work is one pass per message it sends or receives plus
the barrier's, whatever P and however loaded the machine; in the ``yield`` mode ``Testany``
polled with the mode's naps (:class:`..waiting.Naps`: MPICH's ``Waitany`` never gives the core
away, which made the barrier ten times slower than ``Wait`` with more ranks than cores).  The
last posted receive is cancelled (no message of this superstep can match it; the next one's
cannot be sent before the next control step).

Large payloads travel as messages of their own, sent before the consensus starts (they move
while the ranks agree) and received once their headers are read (:mod:`.large`); there are no
arena votes to exchange (a rank that used the arena asks for the dense exchange).

h-relation: the outbox buffers' bytes out of and into every rank, one message per destination
(two for a buffer over :data:`INLINE` bytes), plus the barrier's ``O(log p)`` empty messages.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
from mpi4py import MPI

from ....util.waiting import poll
from ..outbox import Outbox
from ..waiting import Naps
from .completion import TAG_DATA, TAG_SPARSE

#: The most bytes of an outbox buffer that travel in the consensus's own message (the receive
#: posted for any source has this size); a longer buffer is announced and follows.
INLINE = 1 << 14
_ANNOUNCE = 8


def discover(comm: MPI.Comm, outbox: Outbox, wait: str = "spin") -> dict[int, np.ndarray]:
    """Send every other rank with records its outbox buffer and receive those sent to this rank
    (collective over ``comm``: every rank calls it in the same superstep, with or without
    records).  ``wait``: the context's wait mode.  Returns the bytes that came, by source rank."""
    me = outbox.me
    box = np.empty(INLINE, np.uint8)
    status = MPI.Status()
    listen = comm.Irecv([box, MPI.BYTE], MPI.ANY_SOURCE, TAG_SPARSE)
    reqs = [listen]
    follow: list[MPI.Request] = []  # the long buffers' messages, sent and received
    for d, buf in outbox.bufs.items():
        if d == me:
            continue
        if len(buf) <= INLINE:
            reqs.append(comm.Issend([buf, MPI.BYTE], d, TAG_SPARSE))
        else:
            reqs.append(comm.Issend([np.array([len(buf)], np.int64), MPI.INT64_T], d, TAG_SPARSE))
            follow.append(comm.Isend([buf, MPI.BYTE], d, TAG_DATA))
    received: dict[int, np.ndarray] = {}
    sending = len(reqs) - 1
    barrier = None
    if not sending:
        barrier = comm.Ibarrier()
        reqs = [listen, barrier]
    first = MPI.Request.Waitany if wait == "spin" else _polled(wait)
    while True:
        i = first(reqs, status)
        if i == 0:  # a buffer (or an announcement) came: take it, listen again
            _take(comm, box, status, received, follow)
            reqs[0] = listen = comm.Irecv([box, MPI.BYTE], MPI.ANY_SOURCE, TAG_SPARSE)
        elif barrier is None:  # one of this rank's sends was received
            sending -= 1
            if not sending:
                barrier = comm.Ibarrier()
                reqs = [listen, barrier]
        else:  # the barrier: every rank's sends were received
            break
    listen.Cancel()
    listen.Wait(status)
    if not status.Is_cancelled():  # (cannot happen, as the module says; taken all the same)
        _take(comm, box, status, received, follow)
    if follow:
        MPI.Request.Waitall(follow)
    return received


def _polled(wait: str) -> Callable[[list[MPI.Request], MPI.Status], int]:
    """``Waitany`` as ``Testany`` polled, pausing as the wait mode ``wait`` says."""
    def first(reqs: list[MPI.Request], status: MPI.Status) -> int:
        def test() -> int | None:
            i, done = MPI.Request.Testany(reqs, status)
            return i if done else None
        return int(poll(test, pause=Naps(wait), patience=64))  # type: ignore[arg-type]  # (never None: unbounded)
    return first


def _take(comm: MPI.Comm, box: np.ndarray, status: MPI.Status, received: dict[int, np.ndarray],
          follow: list[MPI.Request]) -> None:
    """Keep what ``status`` says came into ``box``: a buffer (copied), or the announcement of a
    long one, whose receive is posted into a buffer of its own."""
    src, nbytes = status.Get_source(), status.Get_count(MPI.BYTE)
    if nbytes == _ANNOUNCE:
        whole = np.empty(int(box[:_ANNOUNCE].view(np.int64)[0]), np.uint8)
        follow.append(comm.Irecv([whole, MPI.BYTE], src, TAG_DATA))
        received[src] = whole
    else:
        received[src] = box[:nbytes].copy()
