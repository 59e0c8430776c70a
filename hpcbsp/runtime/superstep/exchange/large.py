"""The large-put transfer: payloads that travel on their own, after their headers.

Large puts (at least ``$HPCBSP_LARGE_PUT_BYTES``) and large packed batches of element puts
(``put_elements``) are kept aside by the outbox (:attr:`~..outbox.Outbox.large`) and move after
the header round (:mod:`.headers`), in one of two ways, which the count exchange settles for
every rank (:mod:`.counts`, :func:`rounds_needed`):

* in rounds of one ``Alltoallv`` (:func:`alltoallv_rounds`): round k carries each rank's k-th
  large payload for each other rank, as many rounds as the most any rank has for one other.
  Some MPI libraries move large blocks much faster in ``Alltoallv`` than as messages (Intel MPI
  on one node: docs/notes/performance-journal.md, "Per MPI");
* as messages of their own (:func:`send_as_messages`), in a bounded exchange (whose waits must
  poll) or where a payload is over 2 GiB (:data:`.regions.COUNT_MAX`).  They follow their
  headers and complete once the receiver has parsed those and posted receives (MPI keeps the
  order of messages with one source, tag and communicator).

Where a payload lands (:func:`receive`): a large put goes straight into the target array when
no other put of the superstep overlaps the same elements (:func:`isolated_large_puts`), so it is
copied once on each side, as in a hand-written ``Alltoallv``; otherwise into a temporary,
applied in order with the rest (:mod:`.apply`).  A batch of element puts is received into a
pooled buffer; one for this rank itself is applied from the buffer it was packed into.

h-relation: the large payloads' bytes out of and into every rank.
"""
from __future__ import annotations

from typing import Sequence, cast

import numpy as np
from mpi4py import MPI

from ..outbox import PUT, PUT_ELEMENTS, PUT_ELEMENTS_LARGE, PUT_LARGE, Outbox
from .completion import TAG_LARGE, complete
from .regions import COUNT_MAX, alltoallv
from .targets import Registered, Target


def rounds_needed(outbox: Outbox, deadline: float | None) -> int:
    """How many rounds of one ``Alltoallv`` this rank's large payloads need: the most it has for
    one other rank (round k carries the k-th payload for each).  -1 asks every rank to send them
    as messages instead: a bounded exchange (its waits must poll), or a payload larger than one
    region of an ``Alltoallv`` may be."""
    if deadline is not None:
        return -1
    me = outbox.me
    sizes = [arr.nbytes for d, arrs in outbox.large.items() if d != me for arr in arrs]
    if sizes and max(sizes) > COUNT_MAX:
        return -1
    return max((len(arrs) for d, arrs in outbox.large.items() if d != me), default=0)


def send_as_messages(comm: MPI.Comm, outbox: Outbox) -> tuple[list[MPI.Request], list[int]]:
    """Send every large payload for another rank as a message of its own (right after the
    headers); returns the requests and the destination of each."""
    me = outbox.me
    dests = [d for d, arrs in outbox.large.items() if d != me for _ in arrs]
    sends = [comm.Isend([arr, MPI.BYTE], d, TAG_LARGE)
             for d, arrs in outbox.large.items() if d != me for arr in arrs]
    return sends, dests


def receive(comm: MPI.Comm, outbox: Outbox, registry: Sequence[Registered], data: list, rounds: int,
            large_headers: bool, sends: list[MPI.Request], dests: list[int], deadline: float | None,
            wait: str) -> None:
    """Move the large payloads (collective where ``rounds``: every rank makes the same
    ``Alltoallv`` calls).  ``data`` is the superstep's records as :func:`.headers.read` listed
    them; a large one becomes the record to apply with its payload, or None where it was
    received in place.  ``sends``/``dests``: the payloads sent as messages (``rounds`` 0).
    ``deadline`` and ``wait``: as :func:`.completion.complete` takes them."""
    incoming: list[tuple[int, np.ndarray]] = []  # (source, where its next large payload goes)
    if large_headers:
        alone = isolated_large_puts(data, registry)
        for i, rec in enumerate(data):
            if rec is None or rec[1] not in (PUT_LARGE, PUT_ELEMENTS_LARGE):
                continue
            if rec[1] == PUT_ELEMENTS_LARGE:  # into a pooled buffer, applied in order later
                src, _, obj, cnt, nbytes = rec
                record = outbox.pool.take(nbytes)
                outbox.keep_until_sent(record)
                data[i] = (src, PUT_ELEMENTS, obj, cnt, record)
                incoming.append((src, record))
                continue
            src, _, obj, off, cnt = rec
            target = cast(Target, registry[obj])
            if i in alone:
                dest = target._view(off, cnt)
                data[i] = None  # delivered in place
            else:
                dest = np.empty(cnt, dtype=target.dtype)
                data[i] = (src, PUT, obj, off, dest.view(np.uint8))
            incoming.append((src, dest.view(np.uint8)))
    if rounds:
        alltoallv_rounds(comm, rounds, outbox, incoming)
    elif incoming or sends:
        recvs = [comm.Irecv([into, MPI.BYTE], src, TAG_LARGE) for src, into in incoming]
        complete(recvs + sends, [src for src, _ in incoming] + dests, deadline, wait)


def alltoallv_rounds(comm: MPI.Comm, rounds: int, outbox: Outbox, incoming: list[tuple[int, np.ndarray]]) -> None:
    """The large payloads in ``rounds`` calls of ``Alltoallv`` (collective: every rank makes the
    same number of calls): call k sends this rank's k-th large payload for each other rank and
    receives the k-th from each source into the place its header named (``incoming``, in header
    order).  One collective instead of a message per payload: some MPI libraries move large
    blocks faster in ``Alltoallv`` than as point-to-point messages (docs/notes/performance-journal.md,
    "Per MPI")."""
    p, me = outbox.nprocs, outbox.me
    into: list[list[np.ndarray]] = [[] for _ in range(p)]
    for src, where in incoming:
        into[src].append(where)
    large = [outbox.large.get(d, ()) for d in range(p)]
    for k in range(rounds):
        alltoallv(comm, [arrs[k] if d != me and k < len(arrs) else None for d, arrs in enumerate(large)],
                  [dests[k] if k < len(dests) else None for dests in into])


def isolated_large_puts(data: list, registry: Sequence[Registered]) -> set[int]:
    """Indices of large puts whose target elements no other put of this superstep touches."""
    spans: dict[int, list[tuple[int, int, int]]] = {}
    for i, rec in enumerate(data):
        code = rec[1]
        if code == PUT_LARGE:
            spans.setdefault(rec[2], []).append((rec[3], rec[3] + rec[4], i))
        elif code == PUT:
            n = rec[4].size // registry[rec[2]].itemsize
            spans.setdefault(rec[2], []).append((rec[3], rec[3] + n, i))
        elif code in (PUT_ELEMENTS, PUT_ELEMENTS_LARGE):  # may touch any element: no large put is alone
            spans.setdefault(rec[2], []).append((0, 2**62, i))
    return {i for i in unshared(spans) if data[i][1] == PUT_LARGE}


def unshared(spans: dict[int, list[tuple[int, int, int]]]) -> set[int]:
    """The keys of the spans ``(lo, hi, key)`` (per object) that overlap no other span of theirs."""
    alone = set()
    for items in spans.values():
        items.sort()
        reach = -1  # the furthest end of the spans sorted before this one
        for j, (lo, hi, i) in enumerate(items):
            if reach <= lo and (j + 1 == len(items) or items[j + 1][0] >= hi):
                alone.add(i)
            reach = max(reach, hi)
    return alone
