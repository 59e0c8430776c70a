"""Per-destination aggregation buffers of one mailbox (the conveyor "porter" in numpy form).

Records bound for rank d are appended to d's buffer of ``capacity`` records; a full buffer is
handed out as one message and a fresh buffer takes its place.  A large group of records for one
destination is cut into capacity-sized slices that go out directly, without a copy into the
buffer, when the caller owns the array.  Order is kept: the partial buffer is completed first,
then the direct slices, then the rest starts the next buffer, so records to one destination leave
in the order they were added (the mailbox's per-pair FIFO guarantee rests on this).

Buffers are allocated on a destination's first record and recycled after their send completes
(up to :data:`SPARES` are kept), so memory is ``capacity * itemsize`` per destination in use, plus
the messages in flight, plus the spares.  A send to many destinations appends in one compiled
pass (:meth:`Aggregator.append`, the porter ``kernels.append_by_dest``); a routed send's
records are wrapped in their envelopes in that same pass (:class:`Unwrapped`,
:meth:`Aggregator.append_wrapped`).  No MPI in here: the
caller ships what :meth:`Aggregator.put`, :meth:`~Aggregator.take` and
:meth:`~Aggregator.drain` hand out.

Combining (a mailbox with ``combine=``, :mod:`.combining`): :class:`CombiningAggregator`
combines a buffer's records of one key when the buffer fills, and keeps filling it while
combining leaves it at most half full (so a destination's buffer accumulates as many records as
it takes to fill it with distinct keys); a batch that leaves (full, or taken at a flush) is
combined first; at a flush, a partly filled buffer for a hop where several ranks' records
merge (a node's representative's to another node, :meth:`.routing.Routing.merging_hops`)
leaves only once it has not grown for :data:`SETTLE_S`.  Records relayed through this rank go
through the same buffers, so a node's representative combines its ranks' records for a remote
node before it forwards them, those its ranks flush at about the same time into one message.

Every aggregator counts the messages it hands out per destination (:attr:`Aggregator.messages`),
for the benchmarks and tests that count messages per pair of ranks or nodes.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Iterable, Iterator, NamedTuple, Protocol

import numpy as np

from ..kernels import append_by_dest
from ..kernels.envelopes import wrap_append, wrap_envelopes


class Buffers(Protocol):
    """A mailbox's per-destination buffers (of its record format, :mod:`.formats`): what the
    mailbox, the engine and the send window use of them."""

    nbuffered: int
    peak_buffers: int

    def put(self, dests: int | np.ndarray, batch: Any, owned: bool) -> Iterable[tuple[int, np.ndarray]]: ...

    def take(self, dest: int) -> np.ndarray | None: ...

    def drain(self) -> Iterator[tuple[int, np.ndarray]]: ...

    def recycle(self, msg: np.ndarray) -> None: ...


def take_rows(records: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``records[index]`` for a contiguous 1-D array of any (structured) dtype, as rows of bytes.

    numpy gathers structured records of odd sizes (12, 6 bytes) element by element through its
    generic path, 10x slower than ``np.take`` of the same bytes as rows.
    """
    size = records.dtype.itemsize
    rows = np.ascontiguousarray(records).view(np.uint8).reshape(-1, size)
    return np.take(rows, index, axis=0).view(records.dtype).reshape(-1)


class Unwrapped(NamedTuple):
    """Records of a send whose envelopes (``wire``: ``to``, [``from``,] ``rec``) are written
    only as they are appended to the buffers: to ``dests`` (an int or C-contiguous int64, checked
    ranks), from ``me`` (:class:`.formats.Fixed` makes them; one pass instead of two)."""

    recs: np.ndarray
    dests: int | np.ndarray
    me: int
    wire: np.dtype

    def wrapped(self) -> np.ndarray:
        """The envelopes as an array (for a path that needs them at once)."""
        return wrap_envelopes(self.recs, self.dests, self.me, self.wire)


#: Whole buffers kept for reuse after their send completed.
SPARES = 4


class Aggregator:
    """Per-destination buffers of ``capacity`` records of ``dtype`` for ``nprocs`` ranks."""

    def __init__(self, nprocs: int, dtype: np.dtype, capacity: int):
        self.capacity = capacity
        self.dtype = dtype
        self._bufs: list[np.ndarray | None] = [None] * nprocs
        self._fill = np.zeros(nprocs, dtype=np.int64)
        self._ptrs = np.zeros(nprocs, dtype=np.uint64)  # the buffers' addresses, for the kernel
        self._spare: list[np.ndarray] = []
        #: Records added but not yet handed out, over all destinations.
        self.nbuffered = 0
        self._partial = 0  # destinations holding a buffer
        #: The most buffers held at once (partly filled ones and spares; not those in flight).
        self.peak_buffers = 0
        #: Messages handed out so far, per destination (this rank's own included).
        self.messages = np.zeros(nprocs, dtype=np.int64)

    def put(self, dests: int | np.ndarray, recs: "np.ndarray | Unwrapped",
            owned: bool) -> Iterable[tuple[int, np.ndarray]]:
        """Append record i for ``dests`` (an int: :meth:`add`) or ``dests[i]`` (an array:
        :meth:`append`, or :meth:`append_wrapped` for records still to be wrapped);
        ``(dest, message)`` for every buffer that becomes full, to be shipped as it comes
        (before later records are appended)."""
        if isinstance(recs, Unwrapped):
            if isinstance(dests, int) or isinstance(recs.dests, int):
                return self.put(dests, recs.wrapped(), True)
            return self.append_wrapped(dests, recs)
        if isinstance(dests, int):
            full = self.add(dests, recs, owned)
            return [(dests, msg) for msg in full] if full else ()
        return self.append(dests, recs)

    def add(self, dest: int, recs: np.ndarray, owned: bool) -> list[np.ndarray]:
        """Append ``recs`` (1-D, ``dtype``) for ``dest``; return the messages that became full.

        ``owned``: the caller gives up ``recs`` (it will not change), so capacity-sized slices of
        it may be sent as they are; otherwise every record is copied.
        """
        cap = self.capacity
        n = recs.shape[0]
        out: list[np.ndarray] = []
        i = 0
        fill = int(self._fill[dest])
        if fill:
            buf = self._bufs[dest]
            assert buf is not None
            i = min(cap - fill, n)
            buf[fill:fill + i] = recs[:i]
            fill += i
            if fill < cap:
                self._fill[dest] = fill
                self.nbuffered += n
                return out
            out.append(buf)
            self._bufs[dest] = None
            self._ptrs[dest] = 0
            self._partial -= 1
            self.nbuffered -= cap - i  # the records that were already buffered left
            fill = 0
        while n - i >= cap:
            piece = recs[i:i + cap]
            out.append(piece if owned else piece.copy())
            i += cap
        self.messages[dest] += len(out)
        rest = n - i
        if rest:
            buf = self._install(dest)
            buf[:rest] = recs[i:]
            self.nbuffered += rest
        self._fill[dest] = rest
        return out

    def append(self, dests: np.ndarray, recs: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
        """Append record i for ``dests[i]`` (C-contiguous int64, checked ranks), in order, in
        one compiled pass (:func:`hpcbsp.kernels.append_by_dest`); yield ``(dest, message)``
        for every buffer that becomes full, at once (before later records are appended).

        Records for the caller's own rank are buffered like the others (the caller takes
        them out with :meth:`take` when it wants them handled in order with later ones)."""
        n = recs.shape[0]
        rows = np.ascontiguousarray(recs).view(np.uint8).reshape(n, self.dtype.itemsize)
        return self._port(lambda i: append_by_dest(dests, rows, i, self._ptrs, self._fill, self.capacity))

    def append_wrapped(self, nexts: np.ndarray, batch: "Unwrapped") -> Iterator[tuple[int, np.ndarray]]:
        """:meth:`append` for records not yet in their envelopes (this object's dtype): record
        i's envelope goes to the buffer of ``nexts[i]``, written there in the same compiled pass
        (:func:`hpcbsp.kernels.envelopes.wrap_append`)."""
        dests = batch.dests
        assert isinstance(dests, np.ndarray) and batch.wire == self.dtype
        return self._port(lambda i: wrap_append(dests, nexts, batch.recs, i, batch.me, batch.wire,
                                                self._ptrs, self._fill, self.capacity))

    def _port(self, step: Callable[[int], tuple[int, int]]) -> Iterator[tuple[int, np.ndarray]]:
        """Drive a porter kernel: ``step(i)`` appends from record i on and says why it stopped
        (:func:`hpcbsp.kernels.append_by_dest`'s result); full buffers are yielded, missing
        ones installed."""
        i = 0
        while True:
            before = i
            i, d = step(i)
            self.nbuffered += i - before
            if d == -1:
                return
            if d >= 0:
                full = self._full(d)
                if full is not None:
                    yield d, full
            else:
                self._install(-d - 2)

    def _full(self, dest: int) -> np.ndarray | None:
        """``dest``'s buffer just filled: the message to ship (None: keep filling it)."""
        return self.take(dest)

    def _install(self, dest: int) -> np.ndarray:
        """A buffer (a spare, or new) for ``dest``, which has none."""
        buf = self._spare.pop() if self._spare else np.empty(self.capacity, dtype=self.dtype)
        self._bufs[dest] = buf
        self._ptrs[dest] = buf.ctypes.data
        self._partial += 1
        self.peak_buffers = max(self.peak_buffers, self._partial + len(self._spare))
        return buf

    def take(self, dest: int) -> np.ndarray | None:
        """Hand out ``dest``'s buffer (the whole buffer if full, else its records), if it has one."""
        fill = int(self._fill[dest])
        if not fill:
            return None
        buf = self._detach(dest)
        return buf if fill == self.capacity else buf[:fill]

    def _detach(self, dest: int) -> np.ndarray:
        """Empty ``dest``'s place, whose buffer holds records (``fill``): its records leave as one
        message; returns the buffer."""
        buf = self._bufs[dest]
        assert buf is not None
        self.nbuffered -= int(self._fill[dest])
        self._bufs[dest] = None
        self._ptrs[dest] = 0
        self._fill[dest] = 0
        self._partial -= 1
        self.messages[dest] += 1
        return buf

    def drain(self) -> Iterator[tuple[int, np.ndarray]]:
        """Hand out every partly filled buffer as ``(dest, records)`` and empty it."""
        for dest in np.flatnonzero(self._fill).tolist():
            part = self.take(dest)
            assert part is not None
            yield dest, part

    def recycle(self, msg: np.ndarray) -> None:
        """Take back a message whose send completed, if it is a whole buffer this object made.

        Only arrays that own their memory qualify (full buffers and copies); slices of the
        caller's arrays and drained partial buffers are left to the garbage collector.
        """
        if msg.base is None and msg.shape == (self.capacity,) and msg.dtype == self.dtype \
                and len(self._spare) < SPARES:
            self._spare.append(msg)
            self.peak_buffers = max(self.peak_buffers, self._partial + len(self._spare))


#: A combining buffer that holds at most this fraction of its capacity after combining keeps
#: filling; above it, the combined records leave.
KEEP = 0.5
#: A partly filled combining buffer leaves at a flush (:meth:`CombiningAggregator.drain`) only
#: once it has not grown for this many seconds: a node's representative then merges the
#: batches its ranks flush at about the same time into one message per remote node.
SETTLE_S = 0.005


class CombiningAggregator(Aggregator):
    """:class:`Aggregator` whose batches are combined before they leave (module notes):
    ``combine(records)`` returns them with each key's records combined (:mod:`.combining`);
    ``absorbed(n)`` is told of every n records that combining removed (they count as handled:
    the mailbox's termination counters); ``settle``: a mask of the destinations whose
    buffers settle before a flush (:meth:`drain`; None: none)."""

    def __init__(self, nprocs: int, dtype: np.dtype, capacity: int,
                 combine: Callable[[np.ndarray], np.ndarray], absorbed: Callable[[int], None],
                 settle: np.ndarray | None = None):
        super().__init__(nprocs, dtype, capacity)
        self._combine = combine
        self._absorbed = absorbed
        self._keep = max(1, int(capacity * KEEP))
        #: Records removed by combining so far.
        self.combined = 0
        self._settle = settle
        self._seen = np.zeros(nprocs, dtype=np.int64)  # the fills at the previous drain
        self._grew_at = np.zeros(nprocs, dtype=np.float64)  # when each was last seen to grow

    def _reduce(self, recs: np.ndarray) -> np.ndarray:
        out = self._combine(recs)
        gone = recs.shape[0] - out.shape[0]
        if gone:
            self.combined += gone
            self._absorbed(gone)
        return out

    def _full(self, dest: int) -> np.ndarray | None:
        buf = self._bufs[dest]
        assert buf is not None
        out = self._reduce(buf)
        if out is buf:  # no key twice: the buffer leaves as it is
            return Aggregator.take(self, dest)
        k = out.shape[0]
        self.nbuffered -= self.capacity - k
        self._fill[dest] = k  # the buffer's records are now the k combined ones
        if k <= self._keep:  # room again: keep filling
            buf[:k] = out
            return None
        self._detach(dest)  # they leave as ``out``; the buffer itself is free again
        self.recycle(buf)
        return out

    def add(self, dest: int, recs: np.ndarray, owned: bool) -> list[np.ndarray]:
        """As :meth:`Aggregator.add`, every record through the buffer (combined as it fills)."""
        cap, n, i = self.capacity, recs.shape[0], 0
        out: list[np.ndarray] = []
        while i < n:
            fill = int(self._fill[dest])
            buf = self._bufs[dest] if fill else self._install(dest)
            assert buf is not None
            m = min(cap - fill, n - i)
            buf[fill:fill + m] = recs[i:i + m]
            i += m
            self.nbuffered += m
            self._fill[dest] = fill + m
            if fill + m == cap:
                full = self._full(dest)
                if full is not None:
                    out.append(full)
        return out

    def drain(self) -> Iterator[tuple[int, np.ndarray]]:
        """As :meth:`Aggregator.drain`, combined; but a buffer that settles (``settle``) only
        once it has not grown for :data:`SETTLE_S` (the caller drains again: the engine's flush
        runs every round of a quiescence, and an idle rank's ``progress`` too, so such a buffer
        leaves SETTLE_S after its last record at the latest)."""
        if self._settle is None:
            yield from super().drain()
            return
        now = time.monotonic()
        fill = self._fill
        self._grew_at[fill != self._seen] = now
        self._seen[:] = fill
        ready = (fill > 0) & (~self._settle | (now - self._grew_at >= SETTLE_S))
        for dest in np.flatnonzero(ready).tolist():
            part = self.take(dest)
            assert part is not None
            self._seen[dest] = 0
            yield dest, part

    def take(self, dest: int) -> np.ndarray | None:
        """As :meth:`Aggregator.take`, the records combined."""
        msg = super().take(dest)
        return None if msg is None else self._reduce(msg)
