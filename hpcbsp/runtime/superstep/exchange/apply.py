"""Applying what arrived in a superstep's exchange, in the order BSPlib prescribes.

1. :func:`read_gets`: every get reads its source before any put of the superstep is applied;
2. (the large payloads arrive, :mod:`.large`;)
3. :func:`deliver`: puts, packed element batches and queue records are applied in ascending
   source rank and, from one source, in program order, so the last writer is well defined and
   results are deterministic; a queue receives its batches in one call;
4. :func:`return_gets`: a second, count-free round sends the data of gets back (both sides
   know every size) and fulfils this rank's get futures.

h-relation: :func:`return_gets` moves the bytes of the gets, out of the ranks that own them
into the ranks that asked; the rest is local.
"""
from __future__ import annotations

from typing import Sequence, cast

import numpy as np
from mpi4py import MPI

from ..ledger import Traffic
from ..outbox import PUT, PUT_ELEMENTS, Outbox
from .completion import TAG_REPLY, complete
from .headers import Record
from .targets import Registered, Sink, Target


def read_gets(outbox: Outbox, registry: Sequence[Registered],
              gets: list[tuple[int, int, int, int]]) -> dict[int, bytearray]:
    """Read every get's elements (``(source, object id, offset, count)``, as they came) before any
    put lands; returns per asking rank the bytes this rank owes it, in the order asked."""
    me, traffic = outbox.me, outbox.traffic
    replies: dict[int, bytearray] = {}
    for src, obj, off, cnt in gets:
        if src not in replies:
            replies[src] = bytearray()
        part = np.ascontiguousarray(cast(Target, registry[obj])._read(off, cnt))
        replies[src] += part.reshape(-1).view(np.uint8).data
        if src != me:
            traffic.sent(src, part.nbytes)
    return replies


def deliver(data: list[Record | None], registry: Sequence[Registered]) -> None:
    """Apply the puts and queue records of ``data`` (in ascending source rank and program order,
    as :func:`.headers.read` listed them; None: a large put received in place)."""
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


def return_gets(comm: MPI.Comm, outbox: Outbox, replies: dict[int, bytearray], deadline: float | None,
                wait: str) -> None:
    """Second round: send get data back; both sides know every size, so no count exchange.
    ``replies[s]``: the data this rank owes rank ``s`` (only ranks that asked are keys).
    ``deadline`` and ``wait``: as :func:`.completion.complete` takes them."""
    me = outbox.me
    traffic: Traffic = outbox.traffic
    inbox = {d: np.empty(sum(f.nbytes for f in futures), np.uint8) if d != me
             else np.frombuffer(replies.get(me, b""), np.uint8) for d, futures in outbox.gets.items()}
    owners = [d for d, box in inbox.items() if d != me and box.size]
    askers = [s for s in sorted(replies) if s != me and replies[s]]
    reqs = [comm.Irecv([inbox[d], MPI.BYTE], d, TAG_REPLY) for d in owners]
    reqs += [comm.Isend([np.frombuffer(replies[s], np.uint8), MPI.BYTE], s, TAG_REPLY) for s in askers]
    complete(reqs, owners + askers, deadline, wait)
    for d, futures in outbox.gets.items():
        pos = 0
        for fut in futures:
            fut._fulfil(inbox[d][pos:pos + fut.nbytes])
            pos += fut.nbytes
        if d != me:
            traffic.bytes_in += pos
