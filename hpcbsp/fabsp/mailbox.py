"""FA-BSP mailboxes: fine-grained sends at any point of a superstep, handled on the receiver.

>>> box = bsp.mailbox(lambda offs: np.add.at(table, offs, 1), np.int64)   # doctest: +SKIP
>>> box.send(owner, offsets)      # one destination per record; returns at once
>>> bsp.sync()                    # returns when every record everywhere has been handled

Semantics.  ``handler(records)`` (or ``handler(records, source)`` with ``with_source=True``) runs
on the receiving rank with a batch of records of the mailbox's dtype, one batch at a time, at a
point the runtime chooses: inside ``send``, ``bsp.progress()`` or ``bsp.sync()`` on that rank,
never concurrently with another handler.  Handlers may send to any mailbox, their own included;
``sync`` returns on every rank only when all records sent in the superstep, including those sent
by handlers at any depth, have been handled.  Records from one rank to another through one
mailbox are handled in the order they were sent (per-pair FIFO); there is no order between
sources.  Handlers do not run while a mailbox is being created, but they may run while this
rank waits in any other collective call, so create the mailboxes (and the state their handlers
use) before sending.  A handler must not call ``sync``.  Puts, gets and queue sends made by a
handler before ``sync`` returns are delivered by that same sync: once the mailboxes are quiet
the ranks agree again on whether anything is left to exchange, and no handler runs after that
point of the sync.

Aggregation and memory.  Records are buffered per destination (``buffer`` records) and a full
buffer goes out as one message; at most ``max_pending`` messages per mailbox are in flight, and
they use synchronous-mode sends, so a rank's memory for a mailbox stays below
``(P + max_pending) * buffer * itemsize`` bytes however many records a superstep sends.
"""
from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from ..runtime.control import Kind
from ..runtime.errors import UsageError
from ..runtime.records import as_records, split_by_destination
from .aggregation import Aggregator
from .backpressure import SendWindow
from .engine import Engine, default_buffer

if TYPE_CHECKING:
    from ..runtime.context import BSP

#: Largest message of one buffer (MPI counts are C ints).
_MAX_MESSAGE_BYTES = (1 << 31) - 1


class Mailbox:
    """A typed FA-BSP mailbox; create it collectively with :meth:`BSP.mailbox`.

    Parameters
    ----------
    bsp
        The BSP context (every rank registers the same mailboxes in the same order).
    handler
        ``handler(records)`` runs on the receiving rank for each batch (a 1-D array of ``dtype``,
        owned by the handler); with ``with_source=True`` it is ``handler(records, source)``.
    dtype
        The record type (any numpy dtype without Python objects); ranks must agree on it.
    buffer
        Records per destination buffer, i.e. the largest message (default: 16 MiB shared by
        the destinations, 64 KiB to 512 KiB each; ``$HPCBSP_MAILBOX_BYTES`` bytes if set).
    max_pending
        Messages of this mailbox in flight at once (default 16); a ``send`` that would exceed it
        waits, receiving and handling meanwhile.
    with_source
        Pass the sending rank to the handler (for replies).
    name
        A name for error messages (default: the handler's name).

    Notes
    -----
    Registration is collective: one control step (the first mailbox of a context also
    duplicates the context's communicator twice).  h-relation: none.
    """

    def __init__(self, bsp: "BSP", handler: Callable[..., object], dtype: Any, *,
                 buffer: int | None = None, max_pending: int = 16, with_source: bool = False,
                 name: str | None = None):
        where = f"rank {bsp.pid}: mailbox"
        if not callable(handler):
            raise UsageError(f"{where}: handler must be callable, got {type(handler).__name__}")
        try:
            dt = np.dtype(dtype)
        except TypeError as exc:
            raise UsageError(f"{where}: {dtype!r} is not a numpy dtype ({exc})") from None
        if dt.hasobject or dt.itemsize == 0:
            raise UsageError(f"{where}: records must be plain data; dtype {dt} holds Python objects "
                           "or nothing")
        buffer = default_buffer(dt.itemsize, bsp.nprocs) if buffer is None else buffer
        for label, value in (("buffer", buffer), ("max_pending", max_pending)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise UsageError(f"{where}: {label} must be a positive integer, got {value!r}")
        if buffer * dt.itemsize > _MAX_MESSAGE_BYTES:
            raise UsageError(f"{where}: buffer of {buffer} records of {dt.itemsize} bytes exceeds "
                           "the 2 GiB limit of one MPI message")
        self.name = name or getattr(handler, "__name__", "mailbox")
        self.dtype = dt
        self.buffer = int(buffer)
        self.max_pending = int(max_pending)
        self._handler = handler
        self._with_source = bool(with_source)
        self._bsp = bsp
        existing = Engine.existing(bsp)
        with existing.holding_handlers() if existing is not None else contextlib.nullcontext():
            bsp.extension.agree(Kind.REGISTER, "mailbox " + str(dt.descr),
                                lambda: f"mailbox(handler={self.name}, dtype={dt})")
        self._engine = Engine.of(bsp)
        self.aggregator = Aggregator(bsp.nprocs, dt, self.buffer)
        #: Sends in flight and their messages (back-pressure: at most ``max_pending``).
        self.window = SendWindow(self.max_pending, self.aggregator)
        self.index = self._engine.register(self)

    def __repr__(self) -> str:
        return (f"Mailbox({self.name!r}, dtype={self.dtype}, buffer={self.buffer}, "
                f"max_pending={self.max_pending}, rank {self._bsp.pid})")

    def send(self, pid: int | np.ndarray, records: object) -> None:
        """Send ``records`` to ``pid`` (an int), or record i to ``pid[i]`` (an integer array).

        Returns once the records are copied into buffers (or sent); the handler runs on the
        destination before the next ``sync`` returns there.  Raises :class:`UsageError` at the
        call for a pid out of range, records that do not convert to the mailbox's dtype, or a
        pid array whose length differs from the number of records.

        h-relation: ``itemsize`` bytes and one message per record out of this rank and into its
        destination (records to this rank itself are not counted); the ``ceil(n / buffer)``
        MPI messages that carry them are not counted separately.
        """
        engine = self._engine
        where = f"rank {self._bsp.pid}: {self.name}.send"
        accepting = engine.accepting(where)
        recs = as_records(records, self.dtype, where)
        me = self._bsp.pid
        grouped, groups, fresh = split_by_destination(me, self._bsp.nprocs, pid, recs, f"{self.name}.send")
        if not groups or not accepting:
            return
        engine.count_sent(recs.size)
        moved = False
        for dest, start, stop in groups:
            part = grouped[start:stop]
            if dest == me:
                engine.enqueue_local(self, part if fresh else part.copy())
                moved = True
            else:
                for msg in self.aggregator.add(dest, part, owned=fresh):
                    engine.ship(self, dest, msg)
                    moved = True
        if moved:  # something left the buffers: let this rank's handlers keep up
            engine.after_send()

    def call_handler(self, records: np.ndarray, source: int) -> None:
        """Run the handler on one batch (the engine's side; not for user code)."""
        if self._with_source:
            self._handler(records, source)
        else:
            self._handler(records)
