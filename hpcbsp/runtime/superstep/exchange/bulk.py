"""The bulk exchange: a superstep in which every record of every rank is a large put to another
rank, at most one per destination (halo exchanges, transposes), in one ``Alltoall`` of what comes
from whom and one ``Alltoallv`` of the payloads: none of the counts, headers and parsing of the
general exchange (:mod:`.general`; about 14 us less per superstep at two ranks:
docs/notes/performance-journal.md, "Where issue 30's item 4 stands").  Where every rank's puts
go where they went in the last bulk exchange (an iterative program's halo exchange, superstep
after superstep), the control step says so (:attr:`~..outbox.Data.REPEAT`, granted only where
every rank offers it) and the payloads alone move the superstep: what came from whom is what
came then, and each lands where it landed then (:class:`Landing`, worked out once).  They
move in one ``Alltoallv``, or, where every rank of that last bulk exchange sent to at most
:attr:`~..outbox.Outbox.repeat_messages_max` ranks (a quarter of them, none below 4 ranks; each
rank's number of destinations rides in its ``Alltoall`` rows, so all of them learn the
largest), as messages to and from those ranks only: a repeated halo exchange costs the
control step and its messages, its Python work per neighbour, not per rank.

h-relation: the puts' bytes, out of and into every rank, plus ``4 (p - 1)`` words each way for
the ``Alltoall`` (none when repeated).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Sequence, cast

import numpy as np
from mpi4py import MPI

from ..ledger import Traffic
from ..outbox import Outbox
from .completion import TAG_LARGE
from .large import unshared
from .regions import Region, alltoallv, regions
from .targets import Registered, Target


@dataclass
class Landing:
    """Where a bulk exchange's payloads land, worked out from what comes from whom (the same
    for its repetitions, which reuse it: :attr:`~..outbox.Outbox.plan`)."""

    back: dict[int, np.ndarray]  #: per source, the bytes its payload lands in
    later: list[tuple[Target, int, np.ndarray]]  #: overlapping puts' temporaries, by source rank
    nbytes: int  #: the bytes that come
    into: list[np.ndarray | None]  #: ``back`` per rank (None where nothing comes) ...
    side: Region  #: ... as the receiving side of one ``Alltoallv`` (:func:`.regions.regions`)


def landing(received: dict[int, tuple[int, int, int]], registry: Sequence[Registered], p: int) -> Landing:
    """Where each source's put (``received[s]``: object id + 1, offset, element count) lands:
    straight in its target where no other source's put overlaps it, else in a temporary that is
    applied in ascending source rank, as BSPlib prescribes."""
    sources = sorted(received)
    alone: Collection[int] = sources
    if len(sources) > 1:  # which puts overlap another source's (per object: its id + 1)
        spans: dict[int, list[tuple[int, int, int]]] = {}
        for s in sources:
            obj, off, cnt = received[s]
            spans.setdefault(obj, []).append((off, off + cnt, s))
        alone = unshared(spans)
    back: dict[int, np.ndarray] = {}
    later: list[tuple[Target, int, np.ndarray]] = []
    nbytes = 0
    for s in sources:
        obj, off, cnt = received[s]
        target = cast(Target, registry[obj - 1])
        if s in alone:
            back[s] = target._view(off, cnt).view(np.uint8)
        else:
            tmp = np.empty(cnt, dtype=target.dtype)
            later.append((target, off, tmp))
            back[s] = tmp.view(np.uint8)
        nbytes += cnt * target.itemsize
    into = [back.get(s) for s in range(p)]
    return Landing(back, later, nbytes, into, regions(into))


def bulk_exchange(comm: MPI.Comm, outbox: Outbox, registry: Sequence[Registered], repeat: bool = False) -> Traffic:
    """Deliver a superstep in which every rank's records are large puts to other ranks, at most
    one per destination (the control step agreed on :attr:`~..outbox.Data.BULK` and no rank has
    anything else; collective over ``comm``); return this rank's traffic.

    One ``Alltoall`` of :attr:`Outbox.heads` (with this rank's number of destinations) tells
    every rank what comes from whom (object, offset, element count), and one ``Alltoallv``
    moves the payloads, each received straight into its target where no other source's put
    overlaps it.  Puts that overlap are received into temporaries and applied in ascending
    source rank, as BSPlib prescribes.  With ``repeat`` (every rank offered
    :attr:`~..outbox.Data.REPEAT`: its puts go where they went in the last bulk exchange), what
    came from whom then (:attr:`Outbox.received`) stands for the ``Alltoall``, and where every
    rank then had few destinations (:attr:`Outbox.repeat_sparse`) messages stand for the
    ``Alltoallv``.
    """
    p, me = outbox.nprocs, outbox.me
    traffic = outbox.traffic
    traffic.records = outbox.nrecords
    plan: Landing | None = outbox.plan if repeat else None
    if plan is None:
        if repeat:
            received = outbox.received
        else:
            rows = np.empty((p, 4), dtype=np.int64)
            rows[:, :3] = outbox.heads
            rows[:, 3] = len(outbox.large)  # (every rank learns every rank's number of destinations)
            got = np.empty((p, 4), dtype=np.int64)
            comm.Alltoall(rows, got)
            # (Python lists from here: at a few ranks, numpy's per-call cost would be most of the work.)
            received = {s: (row[0], row[1], row[2]) for s, row in enumerate(got[:, :3].tolist()) if row[0]}
            outbox.remember(received, sparse=int(got[:, 3].max()) <= outbox.repeat_messages_max)
        plan = outbox.plan = landing(received, registry, p)
    traffic.bytes_in += plan.nbytes
    traffic.msgs_in += len(plan.back)
    back = plan.back
    large = outbox.large
    if repeat and outbox.repeat_sparse:
        reqs = [comm.Irecv([into, MPI.BYTE], s, TAG_LARGE) for s, into in back.items()]
        reqs += [comm.Isend([arrs[0], MPI.BYTE], d, TAG_LARGE) for d, arrs in large.items()]
        MPI.Request.Waitall(reqs)
    else:
        alltoallv(comm, [large[d][0] if d in large and d != me else None for d in range(p)],
                  plan.into, plan.side)
    for target, off, values in plan.later:
        target._write(off, values)
    return traffic
