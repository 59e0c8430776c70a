"""FA-BSP mailboxes: fine-grained sends at any point of a superstep, handled on the receiver.

>>> box = bsp.mailbox(lambda offs: np.add.at(table, offs, 1), np.int64)   # doctest: +SKIP
>>> box.send(owner, offsets)      # one destination per record; returns at once
>>> bsp.sync()                    # returns when every record everywhere has been handled

Semantics.  ``handler(records)`` (or ``handler(records, source)`` with ``with_source=True``) runs
on the receiving rank with a batch of records of the mailbox's dtype (those of one message or of
several that arrived together), one batch at a time, at a point the runtime chooses: inside
``send``, ``bsp.progress()`` or ``bsp.sync()`` on that rank, never concurrently with another
handler.  Handlers may send to any mailbox, their own included;
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
are never split across messages; per-pair FIFO holds, and they are routed like fixed-size ones
(:mod:`.ragged`).

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
to 2 or 3 messages; it carries its destination (and its source, for ``with_source``): a
fixed-size record travels in an envelope 4 or 8 bytes larger, a ragged one has a head of 16
bytes instead of 8 (:mod:`.relay`), except where every route is one hop (a grid on 2 ranks),
where records travel bare.  The ranks on the way pass it on when they receive it (as a
handler would).  With ``routing="node"`` a record for a rank on another node goes through one
rank of each of the two nodes (up to 3 messages), so that two nodes exchange one aggregated
message per direction instead of one per pair of their ranks, and D is the node's other ranks
plus about (nodes / ranks per node).  Per-pair FIFO order holds with every routing.  The default
(``$HPCBSP_ROUTING``, else by P: direct up to 256 ranks, 2-D up to 32,768, 3-D beyond; by
node for a combining mailbox on two or more nodes of at least 3 ranks each:
:func:`~.routing.default_routing`) suits memory; a mailbox may choose, by name or with a
:class:`~.routing.Routing` object.

Combining.  ``bsp.mailbox(handler, dtype, combine="sum")`` (or ``"min"``, ``"max"``, ``"set"``)
declares the handler commutative: records are integer keys (``"set"`` only) or (key, value)
pairs (a structured dtype of two fields, the key an integer), and the records of one key may be
combined into one before a batch leaves any rank, the sender's buffers and every rank a routed
record passes through (:mod:`.combining`).  The handler then sees fewer records (one per key
and batch at best) with the same total effect: exact for integer sums (int64 wrap-around, as
the handler's own), min, max and set; a float sum is reassociated (rounding only).  Per-pair
FIFO order does not hold for such a mailbox, and ``with_source`` and ``ragged`` are refused.
A buffer that fills is combined and keeps filling while that leaves it at most half full, so
with few keys per destination most records never leave the sender (the h-relation counts only
the records that leave).  With ``routing="node"`` the representative of a node combines its
ranks' records for a remote node: one message per node pair carries each key at most once.

Composition.  A mailbox is its routing's relay (:mod:`.relay`: where records go next, what
arrived for whom) and its record format (:mod:`.formats`: fixed or ragged, how records are laid
out, buffered and handed to the handler) put together; neither knows the engine, and the
mailbox's own code is the same for every routing and format.
"""
from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from ..runtime.environment import setting
from ..runtime.errors import UsageError
from ..runtime.superstep.control import Kind
from .aggregation import SPARES, Buffers, CombiningAggregator
from .backpressure import SendWindow
from .combining import Combiner, check_combine
from .engine import Engine, default_buffer
from .formats import Fixed, Ragged, RecordFormat
from .routing import Routing, resolve_routing

if TYPE_CHECKING:
    from ..runtime.api.context import BSP

#: The bytes a mailbox's buffers share (:func:`.engine.default_buffer`'s budget) and, for a
#: combining mailbox, the most bytes of one buffer when it is not given.
MAILBOX_BUDGET_BYTES = 16 << 20
COMBINING_BUFFER_BYTES = 4 << 20
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
        the destinations, 64 KiB to 512 KiB each, up to 4 MiB for a combining mailbox;
        ``$HPCBSP_MAILBOX_BYTES`` bytes if set).
    max_pending
        Messages of this mailbox in flight at once (default 16); a ``send`` that would exceed it
        waits, receiving and handling meanwhile.
    with_source
        Pass the sending rank to the handler (for replies).
    name
        A name for error messages (default: the handler's name).
    routing
        ``"direct"`` (a buffer per destination), ``"2d"`` or ``"3d"`` (through a grid of ranks,
        O(sqrt P) or O(cbrt P) buffers, see the module notes), ``"node"`` (by node), ``"auto"``,
        or a :class:`~.routing.Routing` of P ranks; default ``$HPCBSP_ROUTING``, else ``"auto"``
        (by P; by node for a combining mailbox on nodes of 3 ranks or more).  Ranks must agree
        on it.
    ragged
        Variable-size records: a record is a 1-D array of ``dtype`` of any length; ``send(pid,
        values, lengths)`` and ``handler(values, lengths[, source])`` (see the module notes).
        ``buffer`` then counts values, not records.
    combine
        ``"sum"``, ``"min"``, ``"max"`` or ``"set"``: the handler is commutative and records of
        one key may be combined on the way (see the module notes and :mod:`.combining`);
        default None (every record reaches the handler, in per-pair order).  Ranks must agree.

    Notes
    -----
    Registration is collective: one control step (the first mailbox of a context also
    duplicates the context's communicator twice).  h-relation: none.
    """

    def __init__(self, bsp: "BSP", handler: Callable[..., object], dtype: Any, *,
                 buffer: int | None = None, max_pending: int = 16, with_source: bool = False,
                 name: str | None = None, routing: str | Routing | None = None, ragged: bool = False,
                 combine: str | None = None):
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
        self.ragged = bool(ragged)
        #: The combine rule (None: records are not combined).
        self.combine = None if combine is None else check_combine(combine, dt, where)
        if self.combine is not None and (self.ragged or with_source):
            raise UsageError(f"{where}: combine= is for fixed-size records without with_source "
                             "(a combined record may come from several sources)")
        #: The routing strategy, and what moves this mailbox's records on this rank.
        self.route = resolve_routing(routing, bsp.nprocs, where, bsp.hosts,
                                     combine=self.combine is not None)
        self.routing = self.route.name
        self.relay = self.route.relay(bsp.pid, bool(with_source))
        #: How records are laid out on the wire (with the relay's address fields) and buffered.
        self.format: RecordFormat = (Ragged if self.ragged else Fixed)(dt, self.relay.fields)
        unit = self.format.unit  # bytes of one unit of ``buffer``: a (wire) record, or a value
        if buffer is None:
            buffer = default_buffer(unit, int(self.relay.peers.size) + 1)
            if self.combine is not None and setting("HPCBSP_MAILBOX_BYTES") is None:
                # A combining buffer is a cache of keys: the mailbox's budget shared by its
                # destinations, beyond the 512 KiB cap of default_buffer, combines more.
                share = min(COMBINING_BUFFER_BYTES, MAILBOX_BUDGET_BYTES // (int(self.relay.peers.size) + 1))
                buffer = max(buffer, share // unit)
        for label, value in (("buffer", buffer), ("max_pending", max_pending)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise UsageError(f"{where}: {label} must be a positive integer, got {value!r}")
        self.format.check_buffer(int(buffer), where)
        if buffer * unit > _MAX_MESSAGE_BYTES:
            raise UsageError(f"{where}: buffer of {buffer} {self.format.units} of {unit} bytes exceeds "
                             "the 2 GiB limit of one MPI message")
        self.name = name or getattr(handler, "__name__", "mailbox")
        self.dtype = dt
        self.buffer = int(buffer)
        self._buffer_bytes = self.buffer * unit
        self.max_pending = int(max_pending)
        self._handler = handler
        self._with_source = bool(with_source)
        self._bsp = bsp
        existing = Engine.existing(bsp)
        signature = self.route.signature()
        with existing.holding_handlers() if existing is not None else contextlib.nullcontext():
            bsp.extension.agree(Kind.REGISTER, f"mailbox {dt.descr} {signature} {self.ragged} {self.combine}",
                                lambda: f"mailbox(handler={self.name}, dtype={dt}, "
                                        f"routing={signature}, ragged={self.ragged}, combine={self.combine})")
        self._engine = Engine.of(bsp)
        #: Per-destination buffers (of the format; destinations are next hops), combining ones
        #: for a mailbox that combines.
        self.aggregator: Buffers
        if self.combine is None:
            self.aggregator = self.format.buffers(bsp.nprocs, self.buffer)
        else:
            assert isinstance(self.format, Fixed)
            wire = self.format.wire
            self.aggregator = CombiningAggregator(bsp.nprocs, wire, self.buffer,
                                                  Combiner(self.combine, dt, wire).combine, self._absorbed,
                                                  self.route.merging_hops(bsp.pid))
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
                f"max_pending={self.max_pending}, routing={self.routing!r}"
                f"{', ragged' if self.ragged else ''}"
                f"{f', combine={self.combine!r}' if self.combine else ''}, rank {self._bsp.pid})")

    def messages(self) -> np.ndarray | None:
        """Messages this mailbox handed out on this rank so far, per next hop (its own rank's
        included); None for a ragged mailbox (not counted)."""
        return getattr(self.aggregator, "messages", None)

    @property
    def peers(self) -> int:
        """How many ranks this rank's messages of this mailbox can go to (its buffers' bound)."""
        return int(self.relay.peers.size)

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
        record larger than a message can hold (``buffer`` values, less 16 bytes; 24 routed) is
        refused.

        h-relation: ``itemsize`` bytes and one message per record out of this rank and into its
        destination (records to this rank itself are not counted); the ``ceil(n / buffer)``
        MPI messages that carry them are not counted separately.  Routed: every hop counts,
        with the envelope's bytes (``format.unit``), on the ranks it leaves and enters.
        Ragged: a record's values' bytes plus its head's (8, routed 16), and 8 per message.
        Combining (``combine=``): only the records that leave a rank after combining count, at
        each hop; at most the uncombined figure.
        """
        engine = self._engine
        where = f"rank {self._bsp.pid}: {self.name}.send"
        accepting = engine.accepting(where)
        if self.finished and engine.handlers.current is not self:
            raise UsageError(f"{where}: the mailbox is done for this superstep (done() was called "
                             "on this rank); only its own handlers may send to it until the sync")
        n, dests, batch, owned = self.format.outgoing(pid, records, lengths, self._bsp.nprocs, self._bsp.pid,
                                                      where, f"{self.name}.send")
        if not n or not accepting:
            return
        engine.count_sent(self, n)
        self._forward(self.relay.outgoing(self.format, batch, dests), batch, owned)

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

    def _absorbed(self, nrecords: int) -> None:
        """Combining removed ``nrecords`` buffered records: their effect travels in another
        record, so for the termination counters they are handled here (sent and handled stay
        monotone and balance once nothing is buffered or in flight)."""
        self._engine.handlers.count_handled(self, nrecords)

    # ------------------------------------------------------------------ the engine's side
    def decode(self, raw: np.ndarray) -> tuple[Any, int]:
        """A message's batch for :meth:`call_handler`, and its number of records."""
        return self.format.decode(raw)

    def count(self, msg: np.ndarray) -> int:
        """Records in an outgoing message."""
        return self.format.count(msg)

    def merges(self, a: int, b: int) -> bool:
        """May batches from sources ``a`` and ``b`` go to one handler call (the engine's side)?
        Yes unless the handler takes the MPI source (direct routing with the source; routed
        records carry their origin)."""
        return a == b or not self._with_source or bool(self.relay.fields)

    def merge(self, batches: list[Any]) -> Any:
        """Arrived batches as one, in order (the engine's side)."""
        return self.format.concat(batches)

    def call_handler(self, batch: Any, source: int) -> None:
        """Run the handler on one batch from ``source`` (the engine's side; not for user code).

        The relay splits it: records passing through are passed on first (they count as sent
        again), then the handler runs on those for this rank, once per origin with the source.
        """
        deliveries, passing, hops = self.relay.arrived(self.format, batch, source)
        if passing is not None:
            self._engine.count_sent(self, self.format.size(passing))
            self._forward(hops, passing, True)
        for args, origin in deliveries:
            if self._with_source:
                self._handler(*args, origin)
            else:
                self._handler(*args)

    def _forward(self, hops: Any, batch: Any, owned: bool) -> None:
        """Record i of ``batch`` to its next hop ``hops`` (or ``hops[i]``) through the buffers:
        full ones ship as they fill; this rank's records go into its inbox at the end, ahead of
        any later send.  ``owned``: the caller gives ``batch`` up (it may travel uncopied)."""
        engine, me = self._engine, self._bsp.pid
        moved = False
        with engine.holding_handlers():  # nothing may overtake these messages (see there)
            for dest, msg in self.aggregator.put(hops, batch, owned):
                engine.post(self, dest, msg)
                moved = True
            mine = self.aggregator.take(me)
            if mine is not None:
                engine.post(self, me, mine)
                moved = True
        if moved:  # something left the buffers: let this rank's handlers keep up
            engine.after_send()
