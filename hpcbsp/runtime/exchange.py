"""Staging of a superstep's communication and the exchange that delivers it at ``sync``.

Every put, get request and queue record issued during a superstep is appended, as a 32-byte
header and an 8-byte-aligned payload, to a byte buffer per destination rank (the *outbox*).  The
copy into the outbox is the only copy on the sending side (BSPlib's buffered put: the source may
change right after the call).  At ``sync`` one ``Alltoall`` of byte counts is followed by
point-to-point ``Isend``/``Irecv`` of the non-empty buffers only (a sparse exchange: a rank
talks only to ranks it has data for), and a second, count-free round returns the data of gets.

Order of effects, as BSPlib prescribes: every get reads its source before any put of the same
superstep is applied; puts are then applied in ascending source rank and, from one source, in
program order, so the last writer is well defined and results are deterministic.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np
from mpi4py import MPI

if TYPE_CHECKING:
    from .coarray import GetFuture

PUT, GET, SEND = 1, 2, 3
HEADER = struct.Struct("<4q")  # code, object id, offset, element count
_TAG_DATA = 101
_TAG_REPLY = 102


class Registered(Protocol):
    """What the exchange needs of a coarray or queue."""

    itemsize: int
    dtype: np.dtype

    def _read(self, offset: int, count: int) -> np.ndarray: ...
    def _write(self, offset: int, data: np.ndarray) -> None: ...
    def _deliver(self, batches: list[np.ndarray]) -> None: ...


@dataclass
class Traffic:
    """Counts of one superstep on this rank (payload bytes between different ranks)."""

    bytes_out: int = 0
    bytes_in: int = 0
    msgs_out: int = 0
    msgs_in: int = 0

    def add(self, other: "Traffic") -> None:
        self.bytes_out += other.bytes_out
        self.bytes_in += other.bytes_in
        self.msgs_out += other.msgs_out
        self.msgs_in += other.msgs_in


@dataclass
class Outbox:
    """This superstep's outgoing records, one byte buffer per destination rank."""

    nprocs: int
    me: int
    bufs: list[bytearray] = field(init=False)
    gets: list[list["GetFuture"]] = field(init=False)
    traffic: Traffic = field(init=False)
    nrecords: int = field(init=False)

    def __post_init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.bufs = [bytearray() for _ in range(self.nprocs)]
        self.gets = [[] for _ in range(self.nprocs)]
        self.traffic = Traffic()
        self.nrecords = 0

    @property
    def has_gets(self) -> bool:
        return any(self.gets)

    def add(self, dest: int, code: int, obj_id: int, offset: int, count: int,
            payload: np.ndarray | None, msgs: int = 1) -> None:
        """Append one record; ``payload`` must be C-contiguous (it is copied here)."""
        buf = self.bufs[dest]
        buf += HEADER.pack(code, obj_id, offset, count)
        if payload is not None and payload.size:
            raw = payload.reshape(-1).view(np.uint8)
            buf += raw.data
            pad = -raw.size % 8
            if pad:
                buf += bytes(pad)
            if dest != self.me:
                self.traffic.bytes_out += raw.size
        if dest != self.me:
            self.traffic.msgs_out += msgs
        self.nrecords += 1

    def add_get(self, dest: int, obj_id: int, offset: int, count: int, future: "GetFuture") -> None:
        self.add(dest, GET, obj_id, offset, count, None)
        self.gets[dest].append(future)


def exchange(comm: MPI.Comm, outbox: Outbox, registry: list[Registered], any_gets: bool) -> Traffic:
    """Deliver everything in ``outbox`` (collective over ``comm``); return this rank's traffic."""
    p, me = outbox.nprocs, outbox.me
    traffic = outbox.traffic
    send_counts = np.fromiter((len(b) if d != me else 0 for d, b in enumerate(outbox.bufs)),
                              dtype=np.int64, count=p)
    recv_counts = np.empty(p, dtype=np.int64)
    comm.Alltoall(send_counts, recv_counts)
    displs = np.zeros(p + 1, dtype=np.int64)
    np.cumsum(recv_counts, out=displs[1:])
    recvbuf = np.empty(int(displs[-1]), dtype=np.uint8)
    reqs = [comm.Irecv([recvbuf[displs[s]:displs[s + 1]], MPI.BYTE], s, _TAG_DATA)
            for s in range(p) if recv_counts[s]]
    reqs += [comm.Isend([np.frombuffer(outbox.bufs[d], np.uint8), MPI.BYTE], d, _TAG_DATA)
             for d in range(p) if send_counts[d]]
    MPI.Request.Waitall(reqs)
    del reqs

    # Parse every source's records, in ascending source order.
    gets: list[tuple[int, int, int, int]] = []
    data: list[tuple[int, int, int, int, np.ndarray]] = []
    for src in range(p):
        buf = (np.frombuffer(outbox.bufs[me], np.uint8) if src == me
               else recvbuf[displs[src]:displs[src + 1]])
        pos, end = 0, buf.size
        while pos < end:
            code, obj, off, cnt = HEADER.unpack_from(buf, pos)
            pos += HEADER.size
            if src != me:
                traffic.msgs_in += cnt if code == SEND else 1
            if code == GET:
                gets.append((src, obj, off, cnt))
                continue
            nbytes = cnt * registry[obj].itemsize
            data.append((src, code, obj, off, buf[pos:pos + nbytes]))
            pos += nbytes + (-nbytes % 8)
            if src != me:
                traffic.bytes_in += nbytes

    # 1. Gets read their source before any put lands.
    replies = [bytearray() for _ in range(p)]
    for src, obj, off, cnt in gets:
        part = np.ascontiguousarray(registry[obj]._read(off, cnt))
        replies[src] += part.reshape(-1).view(np.uint8).data
        if src != me:
            traffic.bytes_out += part.nbytes
    # 2. Puts and queue records, in ascending source rank and program order.
    batches: dict[int, list[np.ndarray]] = {}
    for _, code, obj, off, raw in data:
        target = registry[obj]
        values = raw.view(target.dtype)
        if code == PUT:
            target._write(off, values)
        else:
            batches.setdefault(obj, []).append(values)
    for obj, parts in batches.items():
        registry[obj]._deliver(parts)
    del data, recvbuf

    if any_gets:
        _return_gets(comm, outbox, replies, traffic)
    return traffic


def _return_gets(comm: MPI.Comm, outbox: Outbox, replies: list[bytearray], traffic: Traffic) -> None:
    """Second round: send get data back; both sides know every size, so no count exchange."""
    p, me = outbox.nprocs, outbox.me
    expected = [sum(f.nbytes for f in outbox.gets[d]) for d in range(p)]
    inbox = [np.empty(expected[d], np.uint8) if d != me else np.frombuffer(replies[me], np.uint8)
             for d in range(p)]
    reqs = [comm.Irecv([inbox[d], MPI.BYTE], d, _TAG_REPLY) for d in range(p) if d != me and expected[d]]
    reqs += [comm.Isend([np.frombuffer(replies[s], np.uint8), MPI.BYTE], s, _TAG_REPLY)
             for s in range(p) if s != me and replies[s]]
    MPI.Request.Waitall(reqs)
    for d in range(p):
        pos = 0
        for fut in outbox.gets[d]:
            fut._fulfil(inbox[d][pos:pos + fut.nbytes])
            pos += fut.nbytes
        if d != me:
            traffic.bytes_in += pos
