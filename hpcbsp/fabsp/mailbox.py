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

Variable-size records.  ``bsp.mailbox(handler, dtype, ragged=True)``: a record is a 1-D array of
``dtype`` of any length.  ``box.send(pid, values, lengths)`` sends record i (the next
``lengths[i]`` values) to ``pid[i]`` (or all to ``pid``); ``box.send(pid, array)`` sends one
record.  The handler gets a batch as ``handler(values, lengths)`` (``np.split(values,
np.cumsum(lengths)[:-1])`` gives the records), with ``source`` last for ``with_source``.  Records
are never split across messages; per-pair FIFO holds (:mod:`.ragged`).

Phases.  ``box.done()`` (collective) finishes one mailbox inside a superstep: it returns when
every record sent to ``box`` so far, including those its handlers send meanwhile, has been
handled on every rank, while the other mailboxes keep moving; from then until the sync only
``box``'s own handlers may send to it.  A phased algorithm (build a table, then query it) thus
needs no sync between its phases.

Aggregation and memory.  Records are buffered per destination (``buffer`` records) and a full
buffer goes out as one message; at most ``max_pending`` messages per mailbox are in flight, and
they use synchronous-mode sends, so a rank's memory for a mailbox stays below
``(D + max_pending + 4) * buffer * itemsize`` bytes however many records a superstep sends, where
D is the number of ranks it sends to (P - 1 with ``routing="direct"``) and 4 buffers are kept
for reuse.

Routing.  With ``routing="2d"`` or ``"3d"`` a record hops through a grid of ranks, one grid
dimension per hop (:mod:`.routing`), so D is about 2 sqrt(P) or 3 cbrt(P) and a record takes up
to 2 or 3 messages; it travels in an envelope with its destination (and its source, for
``with_source``), 4 or 8 bytes more (:mod:`.relay`).  The ranks on the way pass it on when they
receive it (as a handler would).  Per-pair FIFO order holds with every routing.  The default
(``$HPCBSP_ROUTING``, else by P: direct up to 256 ranks, 2-D up to 32,768, 3-D beyond) suits
memory; a mailbox may choose.
"""
from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from ..runtime.control import Kind
from ..runtime.errors import UsageError
from ..runtime.records import as_records, check_pids, split_by_destination
from .aggregation import SPARES, Aggregator, Buffers
from .backpressure import SendWindow
from .engine import Engine, default_buffer
from .ragged import WORD, RaggedAggregator, count_records, group_ragged, unpack
from .relay import Groups, Relay
from .routing import ROUTINGS, Grid, resolve_routing

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
    routing
        ``"direct"`` (a buffer per destination), ``"2d"`` or ``"3d"`` (through a grid of ranks,
        O(sqrt P) or O(cbrt P) buffers, see the module notes) or ``"auto"``; default
        ``$HPCBSP_ROUTING``, else ``"auto"`` (by P).  Ranks must agree on it.
    ragged
        Variable-size records: a record is a 1-D array of ``dtype`` of any length; ``send(pid,
        values, lengths)`` and ``handler(values, lengths[, source])`` (see the module notes).
        ``buffer`` then counts values, not records.  Routed directly.

    Notes
    -----
    Registration is collective: one control step (the first mailbox of a context also
    duplicates the context's communicator twice).  h-relation: none.
    """

    def __init__(self, bsp: "BSP", handler: Callable[..., object], dtype: Any, *,
                 buffer: int | None = None, max_pending: int = 16, with_source: bool = False,
                 name: str | None = None, routing: str | None = None, ragged: bool = False):
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
        if routing is not None and not isinstance(routing, str):
            raise UsageError(f"{where}: routing must be one of auto, {', '.join(ROUTINGS)}; "
                             f"got {routing!r}")
        self.ragged = bool(ragged)
        if self.ragged and routing not in (None, "auto", "direct"):
            raise UsageError(f"{where}: a ragged mailbox routes its records directly; "
                             f"routing={routing!r} is not available for it")
        self.routing = "direct" if self.ragged else resolve_routing(routing, bsp.nprocs, where)
        #: Envelopes of a routed mailbox (None: direct, records travel as they are).
        self._relay = None if self.routing == "direct" else \
            Relay(Grid(bsp.nprocs, ROUTINGS[self.routing]), bsp.pid, dt, bool(with_source))
        #: What travels: the records, their envelopes, or (ragged) whole messages of bytes.
        self.wire_dtype = dt if self._relay is None else self._relay.wire
        if self.ragged:
            self.wire_dtype = np.dtype(np.uint8)
        # Bytes of one unit of ``buffer``: a record (or envelope), or a ragged record's value.
        unit = dt.itemsize if self.ragged else self.wire_dtype.itemsize
        if buffer is None:
            peers = bsp.nprocs if self._relay is None else self._relay.peers.size + 1
            buffer = default_buffer(unit, peers)
        for label, value in (("buffer", buffer), ("max_pending", max_pending)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise UsageError(f"{where}: {label} must be a positive integer, got {value!r}")
        if self.ragged and buffer * dt.itemsize < 2 * WORD + dt.itemsize:
            raise UsageError(f"{where}: buffer={buffer} is too small for a ragged mailbox: a message "
                             f"needs {2 * WORD} bytes besides a record's values "
                             f"(at least {-(-(2 * WORD) // dt.itemsize) + 1} values of {dt})")
        if buffer * unit > _MAX_MESSAGE_BYTES:
            raise UsageError(f"{where}: buffer of {buffer} {'values' if self.ragged else 'records'} "
                             f"of {unit} bytes exceeds the 2 GiB limit of one MPI message")
        self.name = name or getattr(handler, "__name__", "mailbox")
        self.dtype = dt
        self.buffer = int(buffer)
        self._buffer_bytes = self.buffer * unit
        self.max_pending = int(max_pending)
        self._handler = handler
        self._with_source = bool(with_source)
        self._bsp = bsp
        existing = Engine.existing(bsp)
        with existing.holding_handlers() if existing is not None else contextlib.nullcontext():
            bsp.extension.agree(Kind.REGISTER, f"mailbox {dt.descr} {self.routing} {self.ragged}",
                                lambda: f"mailbox(handler={self.name}, dtype={dt}, "
                                        f"routing={self.routing}, ragged={self.ragged})")
        self._engine = Engine.of(bsp)
        self.aggregator: Buffers = \
            RaggedAggregator(bsp.nprocs, dt, self._buffer_bytes) if self.ragged else \
            Aggregator(bsp.nprocs, self.wire_dtype, self.buffer)
        #: The fixed-size records' buffers (``aggregator`` itself; an unused stand-in if ragged).
        self._fixed: Aggregator = self.aggregator if isinstance(self.aggregator, Aggregator) else \
            Aggregator(0, dt, 1)
        #: Sends in flight and their messages (back-pressure: at most ``max_pending``).
        self.window = SendWindow(self.max_pending, self.aggregator)
        #: Records of this mailbox sent and handled on this rank in this superstep (``done``'s
        #: termination counters; every hop of a routed record counts).
        self.sent = 0
        self.handled = 0
        #: ``done()`` was called in this superstep: only this mailbox's own handlers may send.
        self.finished = False
        self.index = self._engine.register(self)

    def __repr__(self) -> str:
        return (f"Mailbox({self.name!r}, dtype={self.dtype}, buffer={self.buffer}, "
                f"max_pending={self.max_pending}, routing={self.routing!r}, rank {self._bsp.pid})")

    @property
    def peers(self) -> int:
        """How many ranks this rank's messages of this mailbox can go to (its buffers' bound)."""
        return self._bsp.nprocs - 1 if self._relay is None else int(self._relay.peers.size)

    def memory(self) -> dict[str, int | str]:
        """What this mailbox holds on this rank: ``routing``, ``peers`` (ranks it can send to),
        ``buffers`` (the most aggregation buffers held at once so far) and ``buffer_bytes``
        (their bytes), and ``bound_bytes``: ``(peers + max_pending + SPARES) * buffer * itemsize``,
        what the buffers and the messages in flight can reach."""
        nbytes = self._buffer_bytes
        return {"routing": self.routing, "peers": self.peers,
                "buffers": self.aggregator.peak_buffers,
                "buffer_bytes": self.aggregator.peak_buffers * nbytes,
                "bound_bytes": (self.peers + self.max_pending + SPARES) * nbytes}

    def send(self, pid: int | np.ndarray, records: object, lengths: object = None) -> None:
        """Send ``records`` to ``pid`` (an int), or record i to ``pid[i]`` (an integer array).

        Returns once the records are copied into buffers (or sent); the handler runs on the
        destination before the next ``sync`` returns there.  Raises :class:`UsageError` at the
        call, sending nothing, for a pid out of range, records that do not convert to the
        mailbox's dtype, a pid array whose length differs from the number of records, or a
        mailbox that is done (:meth:`done`).

        Ragged mailbox: ``records`` are the records' values concatenated and ``lengths`` the
        length of each; without ``lengths`` the whole array is one record (for one ``pid``).  A
        record larger than a buffer (``buffer`` values, less 16 bytes) is refused.

        h-relation: ``itemsize`` bytes and one message per record out of this rank and into its
        destination (records to this rank itself are not counted); the ``ceil(n / buffer)``
        MPI messages that carry them are not counted separately.  Routed: every hop counts,
        with the envelope's bytes (``wire_dtype.itemsize``), on the ranks it leaves and enters.
        Ragged: a record's values' bytes plus 8.
        """
        engine = self._engine
        where = f"rank {self._bsp.pid}: {self.name}.send"
        accepting = engine.accepting(where)
        if self.finished and engine.handlers.current is not self:
            raise UsageError(f"{where}: the mailbox is done for this superstep (done() was called "
                             "on this rank); only its own handlers may send to it until the sync")
        recs = as_records(records, self.dtype, where)
        if self.ragged:
            self._send_ragged(pid, recs, lengths, where, accepting)
            return
        if lengths is not None:
            raise UsageError(f"{where}: lengths= is for ragged mailboxes (bsp.mailbox(..., ragged=True))")
        if self._relay is not None:
            dests = check_pids(pid, self._bsp.nprocs, recs.size, self._bsp.pid, f"{self.name}.send")
            if recs.size and accepting:
                engine.count_sent(self, recs.size)
                self._ship_envelopes(*self._relay.outgoing(dests, recs))
            return
        me = self._bsp.pid
        if np.ndim(pid) != 0:
            # One compiled pass appends each record to its destination's buffer (no sort).
            dests = check_pids(pid, self._bsp.nprocs, recs.size, me, f"{self.name}.send")
            assert not isinstance(dests, int)
            if not recs.size or not accepting:
                return
            engine.count_sent(self, recs.size)
            self._ship_appended(dests, recs)
            return
        grouped, groups, fresh = split_by_destination(me, self._bsp.nprocs, pid, recs, f"{self.name}.send")
        if not groups or not accepting:
            return
        engine.count_sent(self, recs.size)
        self._ship_groups(grouped, groups, fresh)

    def done(self) -> None:
        """Collective: finish this mailbox's traffic of the superstep; the phase end of a phased
        algorithm (e.g. build a table with one mailbox, then query it with another).

        Returns on every rank when every record sent to this mailbox in this superstep,
        including those its handlers sent, has been handled everywhere.  Other mailboxes keep
        moving meanwhile (their handlers run, their records are not waited for).  From the call
        on, until the next ``sync``, a send to this mailbox from user code or from another
        mailbox's handler raises :class:`UsageError` (a late record would be lost to the phase);
        its own handlers may still send to it.  Not inside a handler.

        The ranks leave ``done`` at about the same time, not together: records of the other
        mailboxes, even ones that a rank sent after its ``done`` returned, may be handled on
        this rank while it is still inside ``done``.  A handler that needs what the code after
        ``done`` prepares must prepare it itself on first use (see ``apps/irregular/toposort``).

        h-relation: none; l: two or more ``Iallreduce`` of two words (a double wave).
        """
        self.finished = True
        self._engine.finish(self)

    def new_superstep(self) -> None:
        """The sync ended the superstep (the engine's side): counters to zero, open again."""
        self.sent = self.handled = 0
        self.finished = False

    # ------------------------------------------------------------------ the engine's side
    def decode(self, raw: np.ndarray) -> tuple[Any, int]:
        """A received message's batch for :meth:`call_handler`, and its number of records."""
        if self.ragged:
            values, lengths = unpack(raw, self.dtype)
            return (values, lengths), lengths.size
        recs = raw.view(self.wire_dtype)
        return recs, recs.shape[0]

    def count(self, msg: np.ndarray) -> int:
        """Records in an outgoing message."""
        return count_records(msg) if self.ragged else msg.shape[0]

    def call_handler(self, records: Any, source: int) -> None:
        """Run the handler on one batch (the engine's side; not for user code).

        A routed mailbox's batch is envelopes: those for other ranks are passed on first (they
        count as sent again), then the handler runs on the rest.  A ragged one's is
        ``(values, lengths)``."""
        if self.ragged:
            values, lengths = records
            if self._with_source:
                self._handler(values, lengths, source)
            else:
                self._handler(values, lengths)
            return
        if self._relay is not None:
            mine, transit, hops = self._relay.arrived(records)
            if transit.size:
                self._engine.count_sent(self, transit.size)
                self._ship_envelopes(transit, hops)
            for recs, origin in self._relay.deliveries(mine):
                self._call(recs, origin)
            return
        self._call(records, source)

    def _send_ragged(self, pid: int | np.ndarray, values: np.ndarray, lengths: object, where: str,
                     accepting: bool) -> None:
        me = self._bsp.pid
        limit = (self._buffer_bytes - 2 * WORD) // self.dtype.itemsize
        nrecords, groups = group_ragged(pid, values, lengths, limit, self._bsp.nprocs, me, where,
                                        f"{self.name}.send")
        if not nrecords or not accepting:
            return
        engine = self._engine
        engine.count_sent(self, nrecords)
        moved = False
        with engine.holding_handlers():  # nothing may overtake these messages
            for dest, vals, lns in groups:
                if dest == me:
                    engine.enqueue_local(self, (vals, lns), lns.size)
                    moved = True
                else:
                    assert isinstance(self.aggregator, RaggedAggregator)
                    for msg in self.aggregator.add(dest, vals, lns):
                        engine.ship(self, dest, msg)
                        moved = True
        if moved:
            engine.after_send()

    def _call(self, records: np.ndarray, source: int) -> None:
        if self._with_source:
            self._handler(records, source)
        else:
            self._handler(records)

    def _ship_envelopes(self, env: np.ndarray, hops: int | np.ndarray) -> None:
        """Envelopes, in order, to their next hops (an int for all, or one each)."""
        if isinstance(hops, int):
            self._ship_groups(env, [(hops, 0, env.shape[0])] if env.shape[0] else [], owned=True)
        else:
            self._ship_appended(hops, env)

    def _ship_appended(self, dests: np.ndarray, records: np.ndarray) -> None:
        """Record i to ``dests[i]`` (checked int64 ranks) through the compiled porter: full
        buffers ship as they fill; this rank's records go into its inbox at the end."""
        engine, me = self._engine, self._bsp.pid
        moved = False
        with engine.holding_handlers():  # nothing may overtake these messages (see there)
            for dest, msg in self._fixed.append(dests, records):
                if dest == me:
                    engine.enqueue_local(self, msg, msg.shape[0])
                else:
                    engine.ship(self, dest, msg)
                moved = True
            mine = self._fixed.take(me)  # into the inbox now, ahead of any later send
            if mine is not None:
                engine.enqueue_local(self, mine, mine.shape[0])
                moved = True
        if moved:
            engine.after_send()

    def _ship_groups(self, records: np.ndarray, groups: Groups, owned: bool) -> None:
        """Records grouped by (next) destination, ``(dest, start, stop)`` slices of ``records``,
        into the buffers (full ones shipped) or, for this rank, the inbox.  ``owned``: the
        caller gives ``records`` up, so slices of it may travel without a copy."""
        engine, me = self._engine, self._bsp.pid
        moved = False
        with engine.holding_handlers():  # nothing may overtake these messages (see there)
            for dest, start, stop in groups:
                part = records[start:stop]
                if dest == me:
                    batch = part if owned else part.copy()
                    engine.enqueue_local(self, batch, batch.shape[0])
                    moved = True
                else:
                    for msg in self._fixed.add(dest, part, owned=owned):
                        engine.ship(self, dest, msg)
                        moved = True
        if moved:  # something left the buffers: let this rank's handlers keep up
            engine.after_send()
