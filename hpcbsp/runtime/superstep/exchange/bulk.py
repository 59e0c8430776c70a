"""The bulk exchange: a superstep in which every record of every rank is a large put to another
rank, at most one per destination (halo exchanges, transposes), in one ``Alltoall`` of what comes
from whom and one ``Alltoallv`` of the payloads: none of the counts, headers and parsing of the
general exchange (:mod:`.general`; about 14 us less per superstep at two ranks:
docs/notes/performance-journal.md, "Where issue 30's item 4 stands").  Where every rank's puts
go where they went in the last bulk exchange (an iterative program's halo exchange, superstep
after superstep), the control step says so (:attr:`~..outbox.Data.REPEAT`, granted only where
every rank offers it) and the ``Alltoallv`` alone moves the superstep: what came from whom is
what came then.

h-relation: the puts' bytes, out of and into every rank, plus ``3 (p - 1)`` words each way for
the ``Alltoall`` (none when repeated).
"""
from __future__ import annotations

from typing import Collection, Sequence, cast

import numpy as np
from mpi4py import MPI

from ..ledger import Traffic
from ..outbox import Outbox
from .large import unshared
from .regions import alltoallv
from .targets import Registered, Target


def bulk_exchange(comm: MPI.Comm, outbox: Outbox, registry: Sequence[Registered], repeat: bool = False) -> Traffic:
    """Deliver a superstep in which every rank's records are large puts to other ranks, at most
    one per destination (the control step agreed on :attr:`~..outbox.Data.BULK` and no rank has
    anything else; collective over ``comm``); return this rank's traffic.

    One ``Alltoall`` of :attr:`Outbox.heads` tells every rank what comes from whom (object,
    offset, element count), and one ``Alltoallv`` moves the payloads, each received straight into
    its target where no other source's put overlaps it.  Puts that overlap are received into
    temporaries and applied in ascending source rank, as BSPlib prescribes.  With ``repeat``
    (every rank offered :attr:`~..outbox.Data.REPEAT`: its puts go where they went in the last
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
        alone = unshared(spans)
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
    large = outbox.large
    alltoallv(comm, [large[d][0] if d in large and d != me else None for d in range(p)], back)
    for target, off, values in later:
        target._write(off, values)
    return traffic
