"""The general exchange: every superstep with data for another rank that is not a bulk one
(:mod:`.bulk`), or with records for this rank only (``local``), in its phases, in this order:

1. the count exchange (:mod:`.counts`): what comes from whom, the arena's votes, and how the
   large payloads travel;
2. the header round (:mod:`.headers`): the outbox buffers, to the ranks they are for only;
3. reading them (:mod:`.headers`), then the gets' reads (:mod:`.apply`), before any put lands;
4. the large-put transfer (:mod:`.large`): rounds of ``Alltoallv`` (:mod:`.regions`) or messages;
5. the writes, in ascending source rank and program order, and the queues' batches (:mod:`.apply`);
6. the gets' replies (:mod:`.apply`), and the arena's settling of its votes (:mod:`..arena`).

h-relation: that of the superstep's puts, gets and queue records, plus the count exchange's
``3 (p - 1)`` words each way.
"""
from __future__ import annotations

from typing import Sequence

from mpi4py import MPI

from ..ledger import Traffic
from ..outbox import Outbox
from . import apply, counts, headers, large
from .targets import Registered


def exchange(comm: MPI.Comm, outbox: Outbox, registry: Sequence[Registered], any_gets: bool,
             deadline: float | None = None, local: bool = False, wait: str = "spin") -> Traffic:
    """Deliver everything in ``outbox`` (collective over ``comm``); return this rank's traffic.

    ``registry[i]`` is the object with id ``i``: a :class:`~.targets.Target` for puts and gets,
    a :class:`~.targets.Sink` for queue records (the records' codes say which).  ``deadline`` (a
    ``time.monotonic()`` value) bounds every wait: past it,
    :class:`~.completion.ExchangeTimeout` names a peer that did not take part (the exchange is
    then abandoned half done: the context failed).  ``local``: no rank has a record for another
    (the control step said so): this rank applies its own records, in the same order, without
    any MPI call (not collective).  ``wait``: the context's wait mode, how a bounded wait pauses
    between its polls (:class:`..waiting.Naps`).
    """
    traffic = outbox.traffic
    traffic.records = outbox.nrecords
    if local:
        recv, votes, rounds = [0] * outbox.nprocs, None, 0
    else:
        recv, votes, rounds = counts.agree(comm, outbox, deadline, wait)
    recvbuf, displs, sources, large_sends, large_dests = headers.send(comm, outbox, recv, rounds, deadline, wait, local)
    gets, data, large_headers = headers.read(outbox, registry, recvbuf, displs, sources)
    replies = apply.read_gets(outbox, registry, gets)
    large.receive(comm, outbox, registry, data, rounds, large_headers, large_sends, large_dests, deadline, wait)
    apply.deliver(data, registry)
    del data, recvbuf
    if any_gets:
        apply.return_gets(comm, outbox, replies, deadline, wait)
    if outbox.arena is not None and votes is not None:
        outbox.arena.settle(votes, collective=deadline is None)
    return traffic
