"""The outbox: a superstep's puts, get requests and queue records, staged per destination
until the exchange at ``sync`` delivers them (:mod:`.exchange`).

Every put, get request and queue record is appended, as a 32-byte header (:data:`HEADER`) and an
8-byte-aligned payload, to a byte buffer per destination rank, made when the first record for
that rank comes: a superstep's bookkeeping is per destination it touches, not per rank of the
context (:attr:`Outbox.bufs`, :attr:`Outbox.large`, :attr:`Outbox.gets` are dicts by rank).
The copy into the outbox is the only copy on the sending side (BSPlib's buffered put: the
source may change right after the call).  Large puts (at least :attr:`Outbox.large_bytes`, ``$HPCBSP_LARGE_PUT_BYTES``, read
when a context is made) and large packed batches of element puts are kept aside, to travel on
their own after the headers (:mod:`.exchange`); their copies and the buffers element puts are packed into come from a
:class:`BufferPool` kept between supersteps, or, for element puts
where every rank is on one node, from the shared arena (:mod:`.arena`), whose records are
announced by a header and their place (:data:`PLACE`) and never copied.
"""
from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..environment import setting
from .arena import Arena
from .ledger import Traffic

if TYPE_CHECKING:
    from ..api.coarray import GetFuture

PUT, GET, SEND, PUT_LARGE, PUT_ELEMENTS, PUT_ELEMENTS_LARGE, PUT_ELEMENTS_SHARED = 1, 2, 3, 4, 5, 6, 7
HEADER = struct.Struct("<4q")  # code, object id, offset (a queue record: its tag), element count
PLACE = struct.Struct("<q")  # after a PUT_ELEMENTS_SHARED header: where the record lies in the arena
#: The variable that sets :attr:`Outbox.large_bytes` (default 64 KiB), read when a context is made.
LARGE_PUT_ENV = "HPCBSP_LARGE_PUT_BYTES"
#: The most bytes a large put may have to travel in a bulk exchange (one region of an
#: ``Alltoallv``: MPI's int counts).
BULK_MAX = 2**31 - 1


class Data(enum.IntEnum):
    """What a rank has for other ranks at a sync: the control step's data field (:mod:`.control`),
    whose maximum over the ranks, with :class:`Extra`'s, says how the superstep's data travel
    (:mod:`.exchange`)."""

    NONE = 0     #: no record for another rank
    #: a bulk superstep whose puts go where this rank's went in the last bulk exchange (the same
    #: destinations, objects, offsets and counts): where every rank offers it, the exchange
    #: reuses what it learnt then and skips its ``Alltoall`` (:func:`agreed`)
    REPEAT = 1
    BULK = 2     #: only large puts to other ranks, at most one per destination (a bulk exchange)
    GENERAL = 3  #: anything else for another rank


class Extra(enum.IntEnum):
    """What else a rank has at a sync: the control step's gets field."""

    NONE = 0     #: no record for itself and no get
    OWN = 1      #: records for itself, no get
    GETS = 2     #: gets (from itself or from others)
    #: records for more ranks than :attr:`Outbox.sparse_max`, or in the shared arena (whose votes
    #: every rank needs): the general exchange learns who sends to whom by its dense ``Alltoall``
    #: of counts (:mod:`.exchange.counts`) instead of the sparse consensus
    #: (:mod:`.exchange.consensus`), on every rank (the maximum decides), and answers gets, which
    #: this level may hide (only a rank with data for another offers it)
    DENSE = 3


#: Below this many ranks every general superstep takes the dense count exchange.
SPARSE_MIN_RANKS = 16


def sparse_limit(nprocs: int) -> int:
    """The most ranks a rank's records may go to for a superstep to take the sparse consensus
    (:attr:`Extra.DENSE` beyond): a quarter of the ranks, at least 2 (measured in
    docs/notes/performance-journal.md, "Issue 44 item 2": at 8 ranks the consensus costs about as
    much as the dense count exchange with every rank sending to 4 others); -1 (none) below
    :data:`SPARSE_MIN_RANKS` ranks.  There the dense exchange's work per rank is small, and it
    has fewer rounds of messages than the consensus (a synchronous send's answer, the
    barrier's), which counts wherever ranks share cores, seen or not: a halo superstep (a put to
    each neighbour) took 700-900 us by the consensus against 333-375 us dense at 3 ranks on 2
    cores, and 3 ranks on emulated nodes sharing 2 cores (each node sees cores enough, so its
    ranks spin) 1.5x the time of the dense exchange; at 2 ranks on 2 cores the consensus was
    faster (26 against 36 us)."""
    if nprocs < SPARSE_MIN_RANKS:
        return -1
    return max(2, nprocs // 4)


#: The bit of the control step's code that says every rank offered the same data level.
UNIFORM = 16


def agreed(code: int) -> tuple[int, int]:
    """The levels the ranks agreed on, from the control step's ``code`` (``data | extra << 2``,
    each the highest level any rank offered, ``| UNIFORM`` where every rank offered the same
    data level): ``(data, extra)``.  A repeated bulk exchange needs every rank's offer
    (:attr:`Data.REPEAT`: a rank with nothing to send cannot vouch that nothing comes from it
    where something came last time); where only some offered it, the exchange is a plain bulk one."""
    data = code & 3
    if data == Data.REPEAT and not code & UNIFORM:
        data = Data.BULK
    return data, (code >> 2) & 3


class BufferPool:
    """Byte buffers kept between supersteps: the send copies of large puts, packed element puts,
    and the receive buffers of large element records.

    Iterative programs move the same sizes every superstep; reusing the buffers avoids the page
    faults of fresh 8 MiB allocations, which otherwise cost as much as the copy itself.  Sizes
    from ``CHUNK`` up are rounded up to a multiple of it, so that buffers whose size varies a
    little between supersteps (element puts to random ranks) are reused too.
    """

    CHUNK = 1 << 20

    def __init__(self, keep: int = 64):
        self._free: dict[int, list[np.ndarray]] = {}
        self._keep = keep
        self._peak = 0  # the most bytes one superstep gave back

    @property
    def held(self) -> int:
        """Bytes of the free buffers the pool holds now."""
        return sum(buf.size for stack in self._free.values() for buf in stack)

    def take(self, nbytes: int) -> np.ndarray:
        """A uint8 array of exactly ``nbytes`` (a view of a pooled buffer, or a new one)."""
        cap = nbytes if nbytes < self.CHUNK else -(-nbytes // self.CHUNK) * self.CHUNK
        stack = self._free.get(cap)
        buf = stack.pop() if stack else np.empty(cap, dtype=np.uint8)
        return buf[:nbytes] if cap != nbytes else buf

    def give(self, bufs: list[np.ndarray]) -> None:
        """Return the buffers one superstep took (or views of them), at its end.

        The pool keeps them (at most ``keep``) and, of the buffers it held before, as many bytes
        as the largest superstep so far took: its memory stays within twice that peak, and
        programs that alternate supersteps of different sizes reuse the buffers of each.
        """
        older, self._free = self._free, {}
        kept = now = 0
        for buf in bufs:
            if isinstance(buf.base, np.ndarray):
                buf = buf.base
            if kept < self._keep:
                self._free.setdefault(buf.size, []).append(buf)
                kept += 1
                now += buf.size
        self._peak = max(self._peak, now)
        budget = self._peak
        for size, stack in older.items():
            for buf in stack:
                if kept >= self._keep or buf.size > budget:
                    break
                self._free.setdefault(size, []).append(buf)
                kept += 1
                budget -= buf.size


@dataclass
class Outbox:
    """This superstep's outgoing records, one byte buffer per destination rank."""

    nprocs: int
    me: int
    #: Per destination rank with records (this rank's own among them): their headers and
    #: small payloads.
    bufs: dict[int, bytearray] = field(init=False)
    #: Per destination rank with gets: the futures, in the order asked.
    gets: dict[int, list["GetFuture"]] = field(init=False)
    traffic: Traffic = field(init=False)
    nrecords: int = field(init=False)
    gets_count: int = field(init=False)
    #: Per destination rank: the large payloads that travel on their own (:mod:`.exchange.large`).
    large: dict[int, list[np.ndarray]] = field(init=False)
    pooled: list[np.ndarray] = field(init=False)
    pool: BufferPool = field(init=False, default_factory=BufferPool)
    #: The shared-memory window for packed element puts (None: they travel as messages).
    arena: Arena | None = None
    #: Puts of at least this many bytes travel on their own after the headers (``$HPCBSP_LARGE_PUT_BYTES``).
    large_bytes: int = field(init=False)
    #: Per destination with one, this superstep's first large put: ``(object id + 1, offset,
    #: element count)`` (what a bulk exchange sends, :mod:`.exchange`; Python tuples: a superstep's
    #: bookkeeping on caches its copies have just flushed costs about 25 us per numpy call).
    firsts: dict[int, tuple[int, int, int]] = field(init=False)
    #: How many of this superstep's records are such first large puts.
    bulk_puts: int = field(init=False)
    #: What the last bulk exchange learnt: per destination the head this rank sent (None where
    #: it sent nothing), and per source rank that sent one the head it received.
    sent: list[tuple[int, int, int] | None] = field(init=False)
    received: dict[int, tuple[int, int, int]] = field(init=False)
    #: The receiving side the last bulk exchange worked out from :attr:`received` (where each
    #: source's payload lands), which its repetitions reuse (:mod:`.exchange.bulk`).
    plan: Any = field(init=False)
    #: Whether the ranks of the last bulk exchange each sent to at most
    #: :attr:`repeat_messages_max` ranks (the same on every rank): its repetitions move as
    #: messages to and from those ranks only.
    repeat_sparse: bool = field(init=False)
    #: The most ranks any rank of a bulk exchange may send to for its repetitions to move as
    #: messages: a quarter of the ranks (as :func:`sparse_limit`, but none below 4 ranks, where
    #: the one ``Alltoallv`` stays: its Python work is a few lines per rank, and Intel MPI moves
    #: large blocks faster in it on one node; tests set it to force either way).
    repeat_messages_max: int = field(init=False)
    #: How many heads :attr:`sent` holds.
    sent_count: int = field(init=False)
    #: Whether this superstep's heads so far equal those of :attr:`sent`.
    same: bool = field(init=False)
    #: Whether this superstep asked the arena for room (only then does its end move the arena on).
    arena_asked: bool = field(init=False)
    #: The most destinations this rank's records may have for the sparse exchange
    #: (:func:`sparse_limit`; tests set it to force either exchange).
    sparse_max: int = field(init=False)

    def __post_init__(self) -> None:
        self.large_bytes = int(setting(LARGE_PUT_ENV))
        self.pooled = []
        self.firsts = {}
        self.bulk_puts = 0
        self.sent = [None] * self.nprocs
        self.received = {}
        self.plan = None
        self.repeat_sparse = False
        self.repeat_messages_max = self.nprocs // 4
        self.sent_count = 0
        self.gets = {}
        self.gets_count = 0
        self.arena_asked = False
        self.sparse_max = sparse_limit(self.nprocs)
        self.reset()

    def reset(self) -> None:
        self.pool.give(self.pooled)  # the copies made for buffered large puts; never user arrays
        self.pooled = []
        # (Only what this superstep used: a bulk superstep's whole sync is a few microseconds of
        # this bookkeeping, each line slower on caches its copies have just flushed.)
        if self.arena_asked:
            self.arena_asked = False
            if self.arena is not None:
                self.arena.end_superstep()
        self.bufs = {}
        if self.gets_count:
            self.gets = {}
            self.gets_count = 0
        self.traffic = Traffic()
        self.nrecords = 0
        if self.bulk_puts:
            self.firsts = {}
            self.bulk_puts = 0
        self.large = {}
        self.same = True

    def add(self, dest: int, code: int, obj_id: int, offset: int, count: int,
            payload: np.ndarray | None, borrow: bool = False) -> None:
        """Append one record; ``payload`` must be C-contiguous.

        The payload is copied here, unless ``borrow`` (``hpput``) and it is large: then it is sent
        from the caller's memory at the sync, which must leave it unchanged until then.
        """
        buf = self.bufs.get(dest)
        if buf is None:
            buf = self.bufs[dest] = bytearray()
        if code == PUT and dest != self.me and payload is not None and payload.nbytes >= self.large_bytes:
            buf += HEADER.pack(PUT_LARGE, obj_id, offset, count)
            raw = payload.reshape(-1).view(np.uint8)
            large = self.large.get(dest)
            if large is None:
                large = self.large[dest] = []
            if not large and raw.size <= BULK_MAX:
                head = (obj_id + 1, offset, count)
                self.firsts[dest] = head
                self.bulk_puts += 1
                if head != self.sent[dest]:
                    self.same = False
            if not borrow:
                copy = self.pool.take(raw.size)
                copy[:] = raw
                self.pooled.append(copy)
                raw = copy
            large.append(raw)
            self.traffic.sent(dest, payload.nbytes)
            self.traffic.msgs_out += 1
            self.nrecords += 1
            return
        buf += HEADER.pack(code, obj_id, offset, count)
        if payload is not None and payload.size:
            raw = payload.reshape(-1).view(np.uint8)
            buf += raw.data
            pad = -raw.size % 8
            if pad:
                buf += bytes(pad)
            if dest != self.me:
                self.traffic.sent(dest, raw.size)
        if dest != self.me:
            self.traffic.msgs_out += 1
        self.nrecords += 1

    def element_buffer(self, nbytes: int) -> np.ndarray:
        """A buffer of ``nbytes`` to pack element puts into, kept until the exchange is done:
        from the arena where they fit there, else from :attr:`pool`."""
        buf = None
        if self.arena is not None:
            self.arena_asked = True
            buf = self.arena.take(nbytes)
        if buf is None:
            buf = self.pool.take(nbytes)
            self.keep_until_sent(buf)
        return buf

    def add_elements(self, dest: int, obj_id: int, count: int, record: np.ndarray) -> None:
        """Append a packed batch of ``count`` element puts to ``dest`` (``record``: the offsets,
        then the values, each padded to 8 bytes; see :mod:`hpcbsp.kernels.elements`).  The
        header's offset field carries the record's length, so the exchange needs no knowledge of
        its layout.

        ``record`` is a view of a buffer from :meth:`element_buffer`, which the caller must not
        change until the sync.  For another rank, a record in the arena is announced by its
        place there; a large one travels on its own after the headers, sent from ``record`` itself;
        a small one is copied into the outbox.  For this rank, a large record is applied from
        ``record`` itself."""
        if record.nbytes % 8:  # the receiver steps over it by its length: headers stay aligned
            raise ValueError(f"add_elements: a record of {record.nbytes} bytes is not padded to 8 bytes")
        place = self.arena.announce(record) if self.arena is not None and dest != self.me else None
        buf = self.bufs.get(dest)
        if buf is None:
            buf = self.bufs[dest] = bytearray()
        if place is not None:
            buf += HEADER.pack(PUT_ELEMENTS_SHARED, obj_id, record.nbytes, count)
            buf += PLACE.pack(place)
        elif record.nbytes >= self.large_bytes:  # for this rank too: applied from ``record`` itself
            buf += HEADER.pack(PUT_ELEMENTS_LARGE, obj_id, record.nbytes, count)
            self.large.setdefault(dest, []).append(record)
        else:
            buf += HEADER.pack(PUT_ELEMENTS, obj_id, record.nbytes, count)
            buf += record.data
        if dest != self.me:
            self.traffic.sent(dest, record.nbytes)
            self.traffic.msgs_out += 1
        self.nrecords += 1

    def levels(self) -> tuple[Data, Extra]:
        """What this rank has for the control step: for other ranks (:attr:`Data.BULK` where every
        record is a large put to another rank, at most one per destination, each at most
        :data:`BULK_MAX` bytes; :attr:`Data.REPEAT` where these are the last bulk exchange's),
        and besides (records for itself, gets; :attr:`Extra.DENSE` for general records to more
        than :attr:`sparse_max` ranks or in the shared arena)."""
        remote = self.traffic.msgs_out  # one per record for another rank
        if not remote:
            data = Data.NONE
        elif self.nrecords != self.bulk_puts:
            data = Data.GENERAL
        elif self.same and self.bulk_puts == self.sent_count:
            data = Data.REPEAT  # (the same heads, as many: the same destinations)
        else:
            data = Data.BULK
        if data == Data.GENERAL and (self.arena_asked or len(self.bufs) - (self.me in self.bufs) > self.sparse_max):
            return data, Extra.DENSE
        extra = Extra.GETS if self.gets_count else Extra.OWN if self.nrecords > remote else Extra.NONE
        return data, extra

    @property
    def remote(self) -> int:
        """Records for other ranks so far (each is one request counted in ``traffic.msgs_out``):
        what the control step reports; with none anywhere, every rank applies its own records
        without any message."""
        return self.traffic.msgs_out

    def remember(self, received: dict[int, tuple[int, int, int]], sparse: bool) -> None:
        """A bulk exchange's ``Alltoall`` is over: keep what this rank sent and ``received``
        (per source rank that sent a put: object id + 1, offset, count) for the exchanges that
        repeat it, and whether every rank sent to few ranks (``sparse``, agreed by all)."""
        sent: list[tuple[int, int, int] | None] = [None] * self.nprocs
        for d, head in self.firsts.items():
            sent[d] = head
        self.sent = sent
        self.sent_count = self.bulk_puts
        self.received = received
        self.repeat_sparse = sparse

    @property
    def heads(self) -> np.ndarray:
        """:attr:`firsts` as ``p`` rows of int64, zeros where there is none."""
        rows = np.zeros((self.nprocs, 3), dtype=np.int64)
        for d, head in self.firsts.items():
            rows[d] = head
        return rows

    def keep_until_sent(self, buf: np.ndarray) -> None:
        """Give ``buf`` (from :attr:`pool`) back to the pool once this superstep's exchange is done."""
        self.pooled.append(buf)

    def add_get(self, dest: int, obj_id: int, offset: int, count: int, future: "GetFuture") -> None:
        self.add(dest, GET, obj_id, offset, count, None)
        self.gets.setdefault(dest, []).append(future)
        self.gets_count += 1
