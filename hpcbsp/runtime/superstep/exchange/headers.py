"""The header round of a superstep's exchange, and reading what it brought.

:func:`send`: each rank's outbox buffer for another rank (the headers of its records, with the
payloads of small puts, packed element batches and queue records behind them, :mod:`..outbox`)
travels in one ``Isend``/``Irecv`` pair, only between ranks that have bytes for each other (the
dense count exchange, :mod:`.counts`, said how many; the sparse consensus, :mod:`.consensus`,
carries the buffers itself).  Where the large payloads travel as messages they are sent right
behind their headers (:mod:`.large`).

:func:`read`: every source's buffer parsed in ascending source rank (this rank's own among
them), into the gets to answer and the writes to apply in order (:mod:`.apply`); a large put's
or a large batch's payload is still to come (:mod:`.large`), a batch announced in the shared
arena is read from its sender's segment (:mod:`..arena`).

h-relation: the outbox buffers' bytes out of and into every rank (one message per pair of
ranks with bytes for each other).
"""
from __future__ import annotations

from itertools import accumulate
from typing import Any, Sequence, cast

import numpy as np
from mpi4py import MPI

from ..arena import Arena
from ..outbox import GET, HEADER, PLACE, PUT_ELEMENTS, PUT_ELEMENTS_LARGE, PUT_ELEMENTS_SHARED, PUT_LARGE, Outbox
from .completion import TAG_DATA, complete
from .large import send_as_messages
from .targets import Registered

#: A record to apply, as :func:`read` lists them: (source, code, object id, offset, payload
#: bytes), or for a large put still to come (..., element count); None once it was received in
#: place (:mod:`.large`).
Record = tuple[int, int, int, int, Any]


def send(comm: MPI.Comm, outbox: Outbox, recv: list[int], rounds: int, deadline: float | None, wait: str,
         local: bool) -> tuple[dict[int, np.ndarray], list[MPI.Request], list[int]]:
    """The header round: send each other rank its outbox buffer and receive ``recv[s]`` bytes
    from each rank ``s``; where ``rounds`` is 0, send the large payloads as messages too.
    Returns ``(received, large_sends, large_dests)``: what came from each rank that sent any
    (by rank), the large messages' requests (still in flight) and their destinations.  ``local``: no rank has a
    record for another (no message at all).  ``deadline`` and ``wait``: as
    :func:`.completion.complete` takes them."""
    p, me = outbox.nprocs, outbox.me
    displs = list(accumulate(recv, initial=0))
    recvbuf = np.empty(displs[-1], dtype=np.uint8)
    sources = [s for s in range(p) if recv[s]]
    dests = [d for d in outbox.bufs if d != me]
    reqs = [comm.Irecv([recvbuf[displs[s]:displs[s + 1]], MPI.BYTE], s, TAG_DATA) for s in sources]
    reqs += [comm.Isend([np.frombuffer(outbox.bufs[d], np.uint8), MPI.BYTE], d, TAG_DATA) for d in dests]
    large_sends, large_dests = send_as_messages(comm, outbox) if not rounds else ([], [])
    if reqs:
        complete(reqs, sources + dests, deadline, wait)
    del reqs
    if outbox.arena is not None and not local:
        outbox.arena.sync()  # and the senders' records are read after their headers came
    return {s: recvbuf[displs[s]:displs[s + 1]] for s in sources}, large_sends, large_dests


def read(outbox: Outbox, registry: Sequence[Registered], received: dict[int, np.ndarray]
         ) -> tuple[list[tuple[int, int, int, int]], list[Record | None], bool]:
    """Parse every source's records (``received``: its bytes by source rank), in ascending
    source order (this rank's own among them).
    Returns ``(gets, data, large_headers)``: the gets as (source, object id, offset, count),
    the writes as :data:`Record` in the order they apply, and whether a large payload is still
    to come.  Counts the records and bytes that came in into the outbox's traffic."""
    me = outbox.me
    traffic = outbox.traffic
    arena = outbox.arena
    own_large = iter(outbox.large.get(me, ()))  # this rank's large element records, in program order
    own = outbox.bufs.get(me)
    gets: list[tuple[int, int, int, int]] = []
    data: list[Record | None] = []
    large_headers = False
    for src in sorted([*received, me] if own else received):
        buf = np.frombuffer(own, np.uint8) if own is not None and src == me else received[src]
        pos, end = 0, buf.size
        while pos < end:
            code, obj, off, cnt = HEADER.unpack_from(buf, pos)  # type: ignore[arg-type]  # numpy buffer
            pos += HEADER.size
            if src != me:
                traffic.msgs_in += 1  # a request: a put, a get, or one batch of queue records
            if code == GET:
                gets.append((src, obj, off, cnt))
                continue
            if code == PUT_LARGE:
                data.append((src, code, obj, off, cnt))  # payload arrives on its own (.large)
                traffic.bytes_in += cnt * registry[obj].itemsize
                large_headers = True
                continue
            if code == PUT_ELEMENTS_LARGE:  # offset field: the record's bytes, on its own (.large)
                if src == me:  # never sent: applied from the buffer it was packed into
                    data.append((src, PUT_ELEMENTS, obj, cnt, next(own_large)))
                    continue
                data.append((src, code, obj, cnt, off))
                traffic.bytes_in += off
                large_headers = True
                continue
            if code == PUT_ELEMENTS_SHARED:  # offset field: the record's bytes; then its place
                (place,) = PLACE.unpack_from(buf, pos)  # type: ignore[arg-type]  # numpy buffer
                pos += PLACE.size
                data.append((src, PUT_ELEMENTS, obj, cnt, cast(Arena, arena).record(src, place, off)))
                traffic.bytes_in += off
                continue
            if code == PUT_ELEMENTS:  # offset field: the record's bytes (offsets and values, padded)
                data.append((src, code, obj, cnt, buf[pos:pos + off]))
                pos += off
                if src != me:
                    traffic.bytes_in += off
                continue
            nbytes = cnt * registry[obj].itemsize
            data.append((src, code, obj, off, buf[pos:pos + nbytes]))
            pos += nbytes + (-nbytes % 8)
            if src != me:
                traffic.bytes_in += nbytes
    return gets, data, large_headers
