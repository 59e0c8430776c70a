"""The general exchange: every superstep with data for another rank that is not a bulk one
(:mod:`.bulk`), or with records for this rank only (``local``), in its phases, in this order:

1. the count exchange (:mod:`.counts`): what comes from whom, the arena's votes, and how the
   large payloads travel;
2. the header round (:mod:`.headers`): the outbox buffers, to the ranks they are for only;
   (1 and 2 are one step, the sparse consensus (:mod:`.consensus`), where the control step
   found no rank with records for more than a few ranks or in the shared arena: ``sparse``;
   the large payloads then travel as messages, sent before it;)
3. reading them (:mod:`.headers`), then the gets' reads (:mod:`.apply`), before any put lands;
4. the large-put transfer (:mod:`.large`): rounds of ``Alltoallv`` (:mod:`.regions`) or messages;
5. the writes, in ascending source rank and program order, and the queues' batches (:mod:`.apply`);
6. the gets' replies (:mod:`.apply`), and the arena's settling of its votes (:mod:`..arena`).

h-relation: that of the superstep's puts, gets and queue records, plus the count exchange's
``3 (p - 1)`` words each way (none with ``sparse``: the consensus's barrier instead, ``O(log p)``
empty messages).
"""
from __future__ import annotations

from typing import Sequence

from mpi4py import MPI

from ..ledger import Traffic
from ..outbox import Outbox
from . import apply, consensus, counts, headers, large
from .targets import Registered


def exchange(comm: MPI.Comm, outbox: Outbox, registry: Sequence[Registered], any_gets: bool,
             deadline: float | None = None, local: bool = False, wait: str = "spin",
             sparse: bool = False) -> Traffic:
    """Deliver everything in ``outbox`` (collective over ``comm``); return this rank's traffic.

    ``registry[i]`` is the object with id ``i``: a :class:`~.targets.Target` for puts and gets,
    a :class:`~.targets.Sink` for queue records (the records' codes say which).  ``deadline`` (a
    ``time.monotonic()`` value) bounds every wait: past it,
    :class:`~.completion.ExchangeTimeout` names a peer that did not take part (the exchange is
    then abandoned half done: the context failed).  ``local``: no rank has a record for another
    (the control step said so): this rank applies its own records, in the same order, without
    any MPI call (not collective).  ``wait``: the context's wait mode, how a bounded wait pauses
    between its polls (:class:`..waiting.Naps`).  ``sparse``: every rank learns who sends to
    whom by the sparse consensus (:mod:`.consensus`; every rank must pass the same, never with
    a ``deadline``).
    """
    traffic = outbox.traffic
    traffic.records = outbox.nrecords
    votes = None
    rounds = 0
    received: dict = {}
    large_sends: list = []
    large_dests: list[int] = []
    if sparse and not local:  # (the large payloads leave first: they move while the ranks agree)
        large_sends, large_dests = large.send_as_messages(comm, outbox)
        received = consensus.discover(comm, outbox, wait)
    elif not local:
        recv, votes, rounds = counts.agree(comm, outbox, deadline, wait)
        received, large_sends, large_dests = headers.send(comm, outbox, recv, rounds, deadline, wait, local)
    gets, data, large_headers = headers.read(outbox, registry, received)
    replies = apply.read_gets(outbox, registry, gets)
    large.receive(comm, outbox, registry, data, rounds, large_headers, large_sends, large_dests, deadline, wait)
    apply.deliver(data, registry)
    del data, received
    if any_gets:
        apply.return_gets(comm, outbox, replies, deadline, wait)
    if outbox.arena is not None and votes is not None:
        outbox.arena.settle(votes, collective=deadline is None)
    return traffic
