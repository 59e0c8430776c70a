"""The exchange that delivers a superstep's communication at ``sync``.

Every put, get request and queue record issued during a superstep waits in the *outbox*
(:mod:`.outbox`), a byte buffer of headers and payloads per destination rank.  At ``sync`` one
``Alltoall`` of byte counts is followed by
point-to-point ``Isend``/``Irecv`` of the non-empty buffers only (a sparse exchange: a rank
talks only to ranks it has data for), and a second, count-free round returns the data of gets.

Large puts (at least ``$HPCBSP_LARGE_PUT_BYTES``), and large packed batches of element puts
(``put_elements``), travel on their own, after their headers: in rounds of one ``Alltoallv``
(round k carries each rank's k-th large payload for each other rank; the count exchange tells
every rank how many rounds), or, in a bounded exchange or for a payload over 2 GiB, as messages of
their own.  Some MPI libraries move large blocks much faster in ``Alltoallv`` than as messages
(Intel MPI on one node, docs/performance.md).  A batch is sent from
the buffer it was packed into and received into a pooled buffer (no copy through the outbox);
a large batch for this rank itself is applied from the buffer it was packed into.  Where every
rank is on one node, batches are packed into a shared-memory window instead (:mod:`.arena`),
and a destination is sent only a header with the batch's place there: it applies the batch
from the sender's memory, and the bytes are not copied at all.  The count exchange carries each
rank's vote on the window's size, and the window grows at the end of an exchange.  For puts,
the receiver posts the receive straight into the target array, so the payload is copied once on
each side, as in a hand-written ``Alltoallv``.  That is done only when no other put of the
superstep overlaps the same elements; otherwise it is received into a temporary and applied in
order like the rest.

Each round's regions are passed as one buffer spanning them with their displacements (no copy),
or, where they lie more than 2 GiB apart, copied through one staging buffer; a side with one
region (every round at two ranks) passes that array itself.

A superstep in which no rank has a record for another (the control step reports what each rank
has: :class:`~.outbox.Data`, :class:`~.outbox.Extra`) needs no message: each rank applies its own
records, in the same order (``local=True``), so its cost is the control step's, as the BSP
model's l for h = 0 says.  A superstep in which every record of every rank is a large put to
another rank, at most one per destination (halo exchanges, transposes), takes the *bulk
exchange* (:func:`bulk_exchange`): one ``Alltoall`` of what comes from whom, one ``Alltoallv``
of the payloads, none of the counts, headers and parsing above (about 14 µs less per superstep
at two ranks, docs/performance.md).  Where every rank's puts go where they went in the last bulk
exchange (an iterative program's halo exchange, superstep after superstep), the control step
says so (:attr:`~.outbox.Data.REPEAT`, granted only where every rank offers it) and the
``Alltoallv`` alone moves the superstep: what came from whom is what came then.

A bounded exchange (``deadline`` given: the context or the sync has a timeout) trades the
``Alltoall`` of counts for point-to-point messages and waits for every message by polling, so
that a peer that stopped inside the exchange (its node died or its link went down, which MPI
alone may wait for forever) is named within the deadline (:class:`ExchangeTimeout`).

Order of effects, as BSPlib prescribes: every get reads its source before any put of the same
superstep is applied; puts are then applied in ascending source rank and, from one source, in
program order, so the last writer is well defined and results are deterministic.
"""
from __future__ import annotations

from itertools import accumulate
from typing import Any, Collection, Protocol, Sequence, cast

import numpy as np
from mpi4py import MPI

from ...util.waiting import poll, yield_core
from .arena import NEVER, Arena
from .ledger import Traffic
from .outbox import GET, HEADER, PLACE, PUT, PUT_ELEMENTS, PUT_ELEMENTS_LARGE, PUT_ELEMENTS_SHARED, PUT_LARGE, Outbox

_TAG_DATA = 101
_TAG_REPLY = 102
_TAG_LARGE = 103
_TAG_COUNT = 104


class ExchangeTimeout(Exception):
    """A bounded exchange passed its deadline; ``rank`` is a peer a message from or to which had
    not completed (the lowest such rank).  The superstep turns it into a
    :class:`~.errors.SyncTimeout` that names the rank and its host."""

    def __init__(self, rank: int, waiting: int):
        super().__init__(f"rank {rank} (and {waiting - 1} more messages)" if waiting > 1 else f"rank {rank}")
        self.rank = rank
        self.waiting = waiting


class Registered(Protocol):
    """What the exchange needs of every registered object (a coarray or a queue)."""

    itemsize: int
    dtype: np.dtype


class Target(Registered, Protocol):
    """The target of puts and the source of gets (a coarray)."""

    def _read(self, offset: int, count: int) -> np.ndarray:
        """The elements a get reads (before any put of the superstep lands)."""

    def _write(self, offset: int, data: np.ndarray) -> None:
        """Apply a put."""

    def _view(self, offset: int, count: int) -> np.ndarray:
        """Writable memory of the elements, for a large put received in place."""

    def _write_elements(self, record: np.ndarray, count: int) -> None:
        """Apply a packed batch of ``count`` element puts (offsets, then values), in order."""


class Sink(Registered, Protocol):
    """The receiver of queue records (a queue)."""

    def _deliver(self, batches: list[np.ndarray], tags: list[int]) -> None:
        """This superstep's batches for this rank, in source rank and send order, with the tag
        of each (views of the receive buffer, valid during the call)."""


def _complete(reqs: list[MPI.Request], peers: list[int], deadline: float | None) -> None:
    """Wait for ``reqs`` (``peers[i]`` is the rank at the other end of ``reqs[i]``); with a
    ``deadline`` (``time.monotonic()``), poll and raise :class:`ExchangeTimeout` on expiry."""
    if deadline is None:
        MPI.Request.Waitall(reqs)
        return

    def expired() -> ExchangeTimeout:
        stuck = [peer for req, peer in zip(reqs, peers) if not req.Test()]
        return ExchangeTimeout(min(stuck) if stuck else -1, len(stuck))

    poll(lambda: True if MPI.Request.Testall(reqs) else None, deadline=deadline, expired=expired,
         pause=yield_core, patience=64)


def _exchange_counts(comm: MPI.Comm, send_counts: np.ndarray, recv_counts: np.ndarray,
                     deadline: float | None) -> None:
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
    reqs = [comm.Irecv([recv_counts[q], MPI.INT64_T], q, _TAG_COUNT) for q in others]
    reqs += [comm.Isend([send_counts[q], MPI.INT64_T], q, _TAG_COUNT) for q in others]
    _complete(reqs, others + others, deadline)


def exchange(comm: MPI.Comm, outbox: Outbox, registry: Sequence[Registered], any_gets: bool,
             deadline: float | None = None, local: bool = False) -> Traffic:
    """Deliver everything in ``outbox`` (collective over ``comm``); return this rank's traffic.

    ``registry[i]`` is the object with id ``i``: a :class:`Target` for puts and gets, a
    :class:`Sink` for queue records (the records' codes say which).  ``deadline`` (a
    ``time.monotonic()`` value) bounds every wait: past it, :class:`ExchangeTimeout` names a
    peer that did not take part (the exchange is then abandoned half done: the context failed).
    ``local``: no rank has a record for another (the control step said so): this rank applies
    its own records, in the same order, without any MPI call (not collective).
    """
    p, me = outbox.nprocs, outbox.me
    traffic = outbox.traffic
    traffic.records = outbox.nrecords
    arena = outbox.arena
    votes = None
    # The bookkeeping is in Python ints: a small superstep's cost is mostly this function's own.
    rounds = 0  # > 0: the large payloads travel in this many Alltoallv calls, not as messages
    if local:
        recv = [0] * p
    else:
        # Three int64 per rank: the bytes for it, this rank's vote on the arena (.arena), and
        # the rounds of one Alltoallv its large payloads need (the same to every rank).
        vote = NEVER if arena is None or deadline is not None else arena.vote()
        triples = [0, vote, _large_rounds(outbox, deadline)] * p
        triples[0::3] = [len(b) if d != me else 0 for d, b in enumerate(outbox.bufs)]
        send_counts = np.array(triples, dtype=np.int64).reshape(p, 3)
        recv_counts = np.empty((p, 3), dtype=np.int64)
        _exchange_counts(comm, send_counts, recv_counts, deadline)
        triples = recv_counts.ravel().tolist()
        recv, votes, asked = triples[0::3], triples[1::3], triples[2::3]
        rounds = max(asked) if min(asked) >= 0 else 0
        if arena is not None:
            arena.sync()  # this rank's records in the arena are written before their headers go
    displs = list(accumulate(recv, initial=0))
    recvbuf = np.empty(displs[-1], dtype=np.uint8)
    sources = [s for s in range(p) if recv[s]]
    dests = [d for d, b in enumerate(outbox.bufs) if b and d != me]
    reqs = [comm.Irecv([recvbuf[displs[s]:displs[s + 1]], MPI.BYTE], s, _TAG_DATA) for s in sources]
    reqs += [comm.Isend([np.frombuffer(outbox.bufs[d], np.uint8), MPI.BYTE], d, _TAG_DATA) for d in dests]
    # As messages, large payloads follow their headers; they complete once the receiver has parsed
    # the headers and posted receives (MPI keeps the order of messages with one source, tag and
    # communicator).  In rounds of Alltoallv, they are sent once the headers were parsed.
    large_dests = [d for d, arrs in enumerate(outbox.large) if d != me for _ in arrs] if not rounds else []
    large_sends = [comm.Isend([arr, MPI.BYTE], d, _TAG_LARGE)
                   for d, arrs in enumerate(outbox.large) if d != me for arr in arrs] if not rounds else []
    own_large = iter(outbox.large[me])  # this rank's large element records, in program order
    if reqs:
        _complete(reqs, sources + dests, deadline)
    del reqs
    if arena is not None and not local:
        arena.sync()  # and the senders' records are read after their headers came

    # Parse every source's records, in ascending source order (this rank's own among them).
    gets: list[tuple[int, int, int, int]] = []
    # (source, code, object id, offset, payload bytes), or for a large put (..., element count)
    # until it is received; None once it was received in place.
    data: list[tuple[int, int, int, int, Any] | None] = []
    large_headers = False
    for src in sorted(sources + [me]) if outbox.bufs[me] else sources:
        buf = (np.frombuffer(outbox.bufs[me], np.uint8) if src == me
               else recvbuf[displs[src]:displs[src + 1]])
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
                data.append((src, code, obj, off, cnt))  # payload arrives in a message of its own
                traffic.bytes_in += cnt * registry[obj].itemsize
                large_headers = True
                continue
            if code == PUT_ELEMENTS_LARGE:  # offset field: the record's bytes, in a message of its own
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

    # 1. Gets read their source before any put lands.
    replies: dict[int, bytearray] = {}
    for src, obj, off, cnt in gets:
        if src not in replies:
            replies[src] = bytearray()
        part = np.ascontiguousarray(cast(Target, registry[obj])._read(off, cnt))
        replies[src] += part.reshape(-1).view(np.uint8).data
        if src != me:
            traffic.bytes_out += part.nbytes
    # 2. Large payloads: straight into the target where nothing else writes those elements.
    incoming: list[tuple[int, np.ndarray]] = []  # (source, where its next large payload goes)
    if large_headers:
        alone = _isolated_large_puts(data, registry)
        for i, rec in enumerate(data):
            if rec is None or rec[1] not in (PUT_LARGE, PUT_ELEMENTS_LARGE):
                continue
            if rec[1] == PUT_ELEMENTS_LARGE:  # into a pooled buffer, applied in order below
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
        _alltoallv_rounds(comm, rounds, outbox, incoming)
    elif incoming or large_sends:
        large_recvs = [comm.Irecv([into, MPI.BYTE], src, _TAG_LARGE) for src, into in incoming]
        _complete(large_recvs + large_sends, [src for src, _ in incoming] + large_dests, deadline)
    # 3. Puts and queue records, in ascending source rank and program order.
    batches: dict[int, tuple[list[np.ndarray], list[int]]] = {}
    for rec in data:
        if rec is None:
            continue
        _, code, obj, off, raw = rec
        if code == PUT_ELEMENTS:
            cast(Target, registry[obj])._write_elements(raw, off)  # off: the element count
            continue
        values = raw.view(registry[obj].dtype)
        if code == PUT:
            cast(Target, registry[obj])._write(off, values)
        else:
            parts, tags = batches.setdefault(obj, ([], []))
            parts.append(values)
            tags.append(off)  # a queue record's offset field carries its tag
    for obj, (parts, tags) in batches.items():
        cast(Sink, registry[obj])._deliver(parts, tags)
    del data, recvbuf

    if any_gets:
        _return_gets(comm, outbox, replies, traffic, deadline)
    if arena is not None and votes is not None:
        arena.settle(votes, collective=deadline is None)
    return traffic


#: The most bytes one payload may have to travel in an Alltoallv (MPI's int counts) ...
_COUNT_MAX = 2**31 - 1
#: ... and the most bytes the regions of one side of one Alltoallv may span, from the lowest
#: address to the end of the highest (its int displacements); beyond it they are staged.
_SPAN = 2**31 - 1


def _large_rounds(outbox: Outbox, deadline: float | None) -> int:
    """How many rounds of one ``Alltoallv`` this rank's large payloads need: the most it has for
    one other rank (round k carries the k-th payload for each).  -1 asks every rank to send them
    as messages instead: a bounded exchange (its waits must poll), or a payload larger than one
    region of an ``Alltoallv`` may be."""
    if deadline is not None:
        return -1
    me = outbox.me
    sizes = [arr.nbytes for d, arrs in enumerate(outbox.large) if d != me for arr in arrs]
    if sizes and max(sizes) > _COUNT_MAX:
        return -1
    return max((len(arrs) for d, arrs in enumerate(outbox.large) if d != me), default=0)


def _regions(arrays: list[np.ndarray | None]) -> tuple[Any, list[int], list[int], np.ndarray | None]:
    """One ``Alltoallv`` side for ``arrays[r]`` (uint8 arrays, None for nothing) as ``(buffer,
    counts, displacements, staging)``: a lone region is the buffer itself (displacement 0: no
    address arithmetic, which cost about 7 us of a 35 us superstep under Intel MPI,
    docs/performance.md); several, a buffer spanning them where that fits MPI's int
    displacements (no copy); otherwise ``staging`` is one new buffer of them laid end to end,
    which the caller fills before a send or copies out after a receive."""
    p = len(arrays)
    counts = [0 if a is None else a.nbytes for a in arrays]
    used = [r for r in range(p) if counts[r]]
    if not used:
        return np.empty(0, np.uint8), counts, [0] * p, None
    if len(used) == 1:  # one region (two ranks, or one peer this round): the array itself
        return arrays[used[0]], counts, [0] * p, None
    addresses = [a.__array_interface__["data"][0] if a is not None and a.nbytes else 0 for a in arrays]
    base = min(addresses[r] for r in used)
    span = max(addresses[r] + counts[r] for r in used) - base
    if span <= _SPAN:
        return MPI.buffer.fromaddress(base, span), counts, [addresses[r] - base if counts[r] else 0 for r in range(p)], None
    staging = np.empty(sum(counts), np.uint8)
    displs = list(accumulate(counts, initial=0))[:-1]
    return staging, counts, displs, staging


def _alltoallv_rounds(comm: MPI.Comm, rounds: int, outbox: Outbox, incoming: list[tuple[int, np.ndarray]]) -> None:
    """The large payloads in ``rounds`` calls of ``Alltoallv`` (collective: every rank makes the
    same number of calls): call k sends this rank's k-th large payload for each other rank and
    receives the k-th from each source into the place its header named (``incoming``, in header
    order).  One collective instead of a message per payload: some MPI libraries move large
    blocks faster in ``Alltoallv`` than as point-to-point messages (docs/performance.md)."""
    p, me = outbox.nprocs, outbox.me
    into: list[list[np.ndarray]] = [[] for _ in range(p)]
    for src, where in incoming:
        into[src].append(where)
    for k in range(rounds):
        _alltoallv(comm, [arrs[k] if d != me and k < len(arrs) else None for d, arrs in enumerate(outbox.large)],
                   [dests[k] if k < len(dests) else None for dests in into])


def _alltoallv(comm: MPI.Comm, out: list[np.ndarray | None], back: list[np.ndarray | None]) -> None:
    """One ``Alltoallv`` (collective) that sends ``out[d]`` to rank ``d`` and receives from rank
    ``s`` into ``back[s]`` (uint8 arrays, None for nothing), each side as :func:`_regions` lays
    it out (staged through one buffer only where its regions lie too far apart)."""
    sbuf, scounts, sdispls, staged = _regions(out)
    if staged is not None:
        for a, at in zip(out, sdispls):
            if a is not None and a.nbytes:
                staged[at:at + a.nbytes] = a
    rbuf, rcounts, rdispls, landed = _regions(back)
    comm.Alltoallv([sbuf, (scounts, sdispls), MPI.BYTE], [rbuf, (rcounts, rdispls), MPI.BYTE])
    if landed is not None:
        for a, at in zip(back, rdispls):
            if a is not None and a.nbytes:
                a[...] = landed[at:at + a.nbytes]


def _isolated_large_puts(data: list, registry: Sequence[Registered]) -> set[int]:
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
    return {i for i in _unshared(spans) if data[i][1] == PUT_LARGE}


def _unshared(spans: dict[int, list[tuple[int, int, int]]]) -> set[int]:
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


def bulk_exchange(comm: MPI.Comm, outbox: Outbox, registry: Sequence[Registered], repeat: bool = False) -> Traffic:
    """Deliver a superstep in which every rank's records are large puts to other ranks, at most
    one per destination (the control step agreed on :attr:`~.outbox.Data.BULK` and no rank has
    anything else; collective over ``comm``); return this rank's traffic.

    One ``Alltoall`` of :attr:`Outbox.heads` tells every rank what comes from whom (object,
    offset, element count), and one ``Alltoallv`` moves the payloads, each received straight into
    its target where no other source's put overlaps it: the count exchange, the header round and
    the parsing of the general exchange are not needed.  Puts that overlap are received into
    temporaries and applied in ascending source rank, as BSPlib prescribes.  With ``repeat``
    (every rank offered :attr:`~.outbox.Data.REPEAT`: its puts go where they went in the last
    bulk exchange), what came from whom then (:attr:`Outbox.received`) stands for the
    ``Alltoall``: the superstep costs the control step and the ``Alltoallv`` alone.
    """
    p, me = outbox.nprocs, outbox.me
    traffic = outbox.traffic
    traffic.records = outbox.nrecords
    if repeat:
        rows = outbox.received
    else:
        got = np.empty((p, 3), dtype=np.int64)
        comm.Alltoall(outbox.heads, got)
        # (Python lists from here: at a few ranks, numpy's per-call cost would be most of the work.)
        rows = got.tolist()
        outbox.remember(rows)
    sources = [s for s in range(p) if rows[s][0]]
    alone: Collection[int] = sources
    if len(sources) > 1:  # which puts overlap another source's (per object: its id + 1)
        spans: dict[int, list[tuple[int, int, int]]] = {}
        for s in sources:
            obj, off, cnt = rows[s]
            spans.setdefault(obj, []).append((off, off + cnt, s))
        alone = _unshared(spans)
    back: list[np.ndarray | None] = [None] * p
    later: list[tuple[Target, int, np.ndarray]] = []  # (target, offset, received), by source rank
    for s in sources:
        obj, off, cnt = rows[s]
        target = cast(Target, registry[obj - 1])
        if s in alone:
            back[s] = target._view(off, cnt).view(np.uint8)
        else:
            tmp = np.empty(cnt, dtype=target.dtype)
            later.append((target, off, tmp))
            back[s] = tmp.view(np.uint8)
        traffic.bytes_in += cnt * target.itemsize
    traffic.msgs_in += len(sources)
    _alltoallv(comm, [arrs[0] if arrs and d != me else None for d, arrs in enumerate(outbox.large)], back)
    for target, off, values in later:
        target._write(off, values)
    return traffic


def _return_gets(comm: MPI.Comm, outbox: Outbox, replies: dict[int, bytearray], traffic: Traffic,
                 deadline: float | None) -> None:
    """Second round: send get data back; both sides know every size, so no count exchange.
    ``replies[s]``: the data this rank owes rank ``s`` (only ranks that asked are keys)."""
    p, me = outbox.nprocs, outbox.me
    expected = [sum(f.nbytes for f in outbox.gets[d]) for d in range(p)]
    inbox = [np.empty(expected[d], np.uint8) if d != me else np.frombuffer(replies.get(me, b""), np.uint8)
             for d in range(p)]
    owners = [d for d in range(p) if d != me and expected[d]]
    askers = [s for s in sorted(replies) if s != me and replies[s]]
    reqs = [comm.Irecv([inbox[d], MPI.BYTE], d, _TAG_REPLY) for d in owners]
    reqs += [comm.Isend([np.frombuffer(replies[s], np.uint8), MPI.BYTE], s, _TAG_REPLY) for s in askers]
    _complete(reqs, owners + askers, deadline)
    for d in range(p):
        pos = 0
        for fut in outbox.gets[d]:
            fut._fulfil(inbox[d][pos:pos + fut.nbytes])
            pos += fut.nbytes
        if d != me:
            traffic.bytes_in += pos
