"""The exchange that delivers a superstep's communication at ``sync``.

Every put, get request and queue record issued during a superstep waits in the *outbox*
(:mod:`..outbox`), a byte buffer of headers and payloads per destination rank it has records
for.  At ``sync``, from 16 ranks on, where every rank's records go to few ranks (at most a
quarter of them: :func:`~..outbox.sparse_limit`) and none lies in the shared arena, the *sparse
consensus* (:mod:`.consensus`, NBX) delivers the buffers: a synchronous send to each
destination, every arrival taken, and a non-blocking barrier once this rank's sends were all
received; no rank learns anything of the ranks it has no business with, and its Python work is
per message, not per rank.  Otherwise (a rank asked for :attr:`~..outbox.Extra.DENSE` in the
control step: the maximum decides, so every rank takes the same way) one ``Alltoall`` of byte
counts is followed by point-to-point ``Isend``/``Irecv`` of the non-empty buffers only.  A
second, count-free round returns the data of gets.  The choice was measured in lines of
Python per superstep (``python -m hpcbsp.bench scale``'s counting; docs/notes/performance-journal.md,
"Issue 44 item 2").

Large puts (at least ``$HPCBSP_LARGE_PUT_BYTES``), and large packed batches of element puts
(``put_elements``), travel on their own, after their headers: in rounds of one ``Alltoallv``
(round k carries each rank's k-th large payload for each other rank; the count exchange tells
every rank how many rounds), or, in a bounded exchange or for a payload over 2 GiB, as messages of
their own (always in the sparse consensus).  Some MPI libraries move large blocks much faster
in ``Alltoallv`` than as messages (Intel MPI on one node: docs/notes/performance-journal.md, "Per MPI").  A batch is sent from
the buffer it was packed into and received into a pooled buffer (no copy through the outbox);
a large batch for this rank itself is applied from the buffer it was packed into.  Where every
rank is on one node, batches are packed into a shared-memory window instead (:mod:`..arena`),
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
has: :class:`~..outbox.Data`, :class:`~..outbox.Extra`) needs no message: each rank applies its
own records, in the same order (``local=True``), so its cost is the control step's, as the BSP
model's l for h = 0 says.  A superstep in which every record of every rank is a large put to
another rank, at most one per destination (halo exchanges, transposes), takes the *bulk
exchange* (:func:`bulk_exchange`): one ``Alltoall`` of what comes from whom, one ``Alltoallv``
of the payloads, none of the counts, headers and parsing above (about 14 µs less per superstep
at two ranks: docs/notes/performance-journal.md, "Where issue 30's item 4 stands").  Where every
rank's puts go where they went in the last bulk exchange (an iterative program's halo exchange,
superstep after superstep), the control step says so (:attr:`~..outbox.Data.REPEAT`, granted
only where every rank offers it) and the ``Alltoallv`` alone moves the superstep: what came from
whom is what came then, and where every rank sent to at most a quarter of the ranks (from 4
ranks up), messages to and from those ranks move it, with no ``Alltoallv``.

A bounded exchange (``deadline`` given: the context or the sync has a timeout) trades the
``Alltoall`` of counts for point-to-point messages and waits for every message by polling, so
that a peer that stopped inside the exchange (its node died or its link went down, which MPI
alone may wait for forever) is named within the deadline (:class:`ExchangeTimeout`).

Order of effects, as BSPlib prescribes: every get reads its source before any put of the same
superstep is applied; puts are then applied in ascending source rank and, from one source, in
program order, so the last writer is well defined and results are deterministic.

One module per part: :mod:`.general` (:func:`exchange`, its phases in order),
:mod:`.consensus` (the sparse consensus), :mod:`.counts` (the dense count exchange),
:mod:`.headers` (the header round and reading it), :mod:`.large` (the large-put transfer),
:mod:`.regions` (one ``Alltoallv`` of regions anywhere in memory), :mod:`.apply` (gets, puts
and queue records applied, gets answered), :mod:`.bulk` (the bulk exchange),
:mod:`.completion` (tags, the bounded wait, :class:`ExchangeTimeout`) and :mod:`.targets` (what
the exchange needs of coarrays and queues).
"""
from __future__ import annotations

from .bulk import bulk_exchange
from .completion import ExchangeTimeout
from .general import exchange
from .targets import Registered, Sink, Target

__all__ = ["ExchangeTimeout", "Registered", "Sink", "Target", "bulk_exchange", "exchange"]
