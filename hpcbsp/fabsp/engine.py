"""The FA-BSP engine of one BSP context: moves mailbox messages, runs handlers, ends supersteps.

One engine serves all mailboxes of a context and is the context's sync hook (see
:class:`hpcbsp.runtime.superstep.supersteps.SyncHook`):

* ``progress()`` (non-blocking) receives what has arrived, runs handlers one batch at a time,
  and completes finished sends;
* ``quiesce()`` (collective) flushes every partial buffer and keeps receiving and handling until
  :class:`~hpcbsp.fabsp.termination.DoubleWave` says no record is buffered, in flight or being
  handled on any rank, then returns the superstep's mailbox traffic for the ledger.

Transport.  Each message is one full (or, at a flush, partial) aggregation buffer of one mailbox,
sent with ``Issend`` on a duplicated communicator with the mailbox's index as tag and received
with ``Improbe`` + ``Imrecv`` (exact size, any source; a message streaming in over a network does
not block this rank's own sends: :mod:`.handlers`).  Synchronous mode means a send completes
only once the receiver has matched it, so with at most ``max_pending`` sends per mailbox in
flight neither the sender's buffers nor the receiver's unexpected-message queue can grow with the
number of records a superstep produces.  Records to this rank itself skip MPI (a local FIFO).

Epochs.  Supersteps alternate between two duplicated communicators (by parity), so a rank that
left a quiescence early and already sends next-superstep messages cannot have them received by a
slower rank that is still finishing the previous superstep; termination guarantees nothing of the
previous superstep is left when a rank leaves.

Parts.  Back-pressure (at most ``max_pending`` sends in flight per mailbox) is
:class:`~.backpressure.SendWindow`; receiving and running handlers is :class:`~.handlers.Handlers`;
failure notices to and from peers are :class:`~.notices.FailureNotices`.  This module ties them
to the runtime through its extension interface.

Failures.  A handler that raises makes this rank send a short "poison" message that reaches
every other rank down a binomial tree (:mod:`.notices`: O(log P) sends per rank), stop
handling, and raise the exception at the first point where raising cannot leave a
collective half done: at once inside ``send`` or ``sync``; from ``progress()`` (which the
runtime also calls while it waits inside the sync's control step) it is kept for this rank's
next ``send`` or ``sync`` (or raised by ``progress`` after ``$HPCBSP_ABORT_GRACE``/2 seconds, so
that a loop spinning on ``bsp.progress()`` cannot hang).  A rank that receives the poison stops
handling and drops what it sends; its next ``sync`` raises :class:`~hpcbsp.runtime.errors.PeerFailed`
naming the failed rank.  The ranks thus reach the runtime's failure step together and the job
ends with the failing rank's traceback, instead of waiting for a rank that is gone.
"""
from __future__ import annotations

import sys
import time
import warnings
from typing import TYPE_CHECKING, Callable, ContextManager

import numpy as np
from mpi4py import MPI

from ..runtime.environment import setting
from ..runtime.errors import PeerFailed, SyncTimeout, UsageError
from ..runtime.superstep.ledger import Traffic
from ..runtime.superstep.waiting import Naps
from ..util.waiting import BUSY, poll
from .handlers import Handlers
from .notices import POISON_TAG, FailureNotices
from .termination import DoubleWave

if TYPE_CHECKING:
    from ..runtime.api.context import BSP
    from .mailbox import Mailbox

#: Messages received per non-blocking ``progress`` call before returning to the caller's work.
_PROGRESS_BATCHES = 64
#: The same inside a quiescence, between flushes of the buffers that handlers filled.
_QUIESCE_BATCHES = 256
#: Idle rounds of a quiescence before it starts to pause between rounds (and to look at the clock).
_QUIESCE_PATIENCE = 200

__all__ = ["Engine", "PeerFailed", "POISON_TAG", "default_buffer"]


class Engine:
    """Mailbox traffic of one BSP context; created by the context's first mailbox."""

    @classmethod
    def existing(cls, bsp: "BSP") -> "Engine | None":
        """The engine of ``bsp`` if it has one."""
        return bsp.extension.sync_hook(Engine)

    @classmethod
    def of(cls, bsp: "BSP") -> "Engine":
        """The engine of ``bsp``, created (collectively) at its first mailbox registration."""
        engine = cls.existing(bsp)
        if engine is not None:
            return engine
        engine = cls(bsp)
        bsp.extension.add_sync_hook(engine)
        bsp.extension.add_close_hook(engine.close)
        return engine

    def __init__(self, bsp: "BSP"):
        self.pid = bsp.pid
        self.nprocs = bsp.nprocs
        self._bsp = bsp
        # How idle waits pause: as the context's wait mode says, by the one rule
        # (hpcbsp.runtime.superstep.waiting.Naps, one per wait).
        self._wait_mode = bsp.wait
        self._comms = (bsp.comm.Dup(), bsp.comm.Dup())
        self._comm = self._comms[0]
        self.epoch = 0
        self.boxes: list["Mailbox"] = []
        self.notices = FailureNotices(self._comms, self.pid, self.nprocs)
        self.handlers = Handlers(self.boxes, self._comm, self.notices, lambda: bsp.superstep)
        self.sent = 0       # records enqueued this epoch (termination counter)
        self.traffic = Traffic()  # what left this rank this epoch (arrivals: self.handlers.traffic)
        self._user_sent = 0           # records sent by user code (not handlers), ever
        self._user_sent_seen = -1     # its value at the previous progress() call
        #: Waves the last quiescence needed (a statistic for tests and benchmarks).
        self.last_waves = 0

    # ------------------------------------------------------------------ mailboxes' side
    def register(self, box: "Mailbox") -> int:
        """Add a mailbox; its index is its tag.  Records that arrived early are queued now."""
        index = len(self.boxes)
        if index >= POISON_TAG:  # tags must stay below the failure notice's (and MPI_TAG_UB)
            raise UsageError(f"rank {self.pid}: too many mailboxes in one BSP context ({index})")
        self.boxes.append(box)
        self.handlers.admit(index, box)
        return index

    def accepting(self, where: str) -> bool:
        """May ``send`` go on?  Raises this rank's pending handler failure or a closed context;
        False (the records are dropped) once another rank failed: the next sync reports it."""
        self.notices.raise_deferred()
        if self.notices.state != "open":
            raise UsageError(f"{where}: the BSP context is {self.notices.state}; nothing can be sent "
                             "any more")
        return self.notices.peer_failure is None

    def holding_handlers(self) -> ContextManager[None]:
        """Within this block ``progress`` and waits for a send slot receive but run no handler.

        Mailbox registration waits in a control step that calls ``progress``; a handler that
        sends to a mailbox being created right after its own (request, then reply) must not run
        before that mailbox exists.  A ``send`` ships its messages within this block too: a
        handler run while it waits for a slot could send records of this rank to the same
        destination and overtake the messages of the send not shipped yet (per-pair FIFO).
        """
        return self.handlers.holding()

    def count_sent(self, box: "Mailbox", nrecords: int) -> None:
        """Count records enqueued by ``send`` (before they are buffered, shipped or queued)."""
        self.sent += nrecords
        box.sent += nrecords
        if not self.handlers.running:
            self._user_sent += nrecords

    def post(self, box: "Mailbox", dest: int, msg: np.ndarray) -> None:
        """One message of ``box`` for ``dest``: shipped (:meth:`ship`), or for this rank itself
        straight into the inbox (handled at the next progress, no MPI)."""
        if dest == self.pid:
            batch, n = box.decode(msg)
            self.handlers.enqueue(box.index, self.pid, batch, n)
        else:
            self.ship(box, dest, msg)

    def ship(self, box: "Mailbox", dest: int, msg: np.ndarray) -> None:
        """Send one message of ``box`` to ``dest``, first waiting for a free slot if needed."""
        window = box.window
        if window.full:
            nap = Naps(self._wait_mode)
            while window.full:
                if self.notices.peer_failure is not None:
                    return  # the superstep is lost; the receiver may be gone
                self._wait_for_slot(box, nap)
        if self.notices.peer_failure is not None:
            return
        window.add(self._comm.Issend([msg.view(np.uint8), MPI.BYTE], dest, box.index), msg)
        self.traffic.sent(dest, msg.nbytes)
        self.traffic.msgs_out += box.count(msg)

    def after_send(self) -> None:
        """Called after a ``send`` that shipped messages: let the handlers keep up (user code only)."""
        if not self.handlers.running:
            self.handlers.pump(_PROGRESS_BATCHES)

    # ------------------------------------------------------------------ sync hook
    def progress(self) -> None:
        """Receive, run handlers and complete sends without blocking (the runtime's hook).

        When called twice with no ``send`` from user code in between, this rank is idle
        (waiting in a sync, or computing without sending): partly filled buffers are sent too,
        so no record is held back indefinitely.  Between sends, buffers fill up as usual.
        """
        notices = self.notices
        if notices.deferred:
            if notices.overdue():
                notices.raise_deferred()  # nobody reached a safe point: end it (see module notes)
            return
        if notices.state != "open" or notices.peer_failure is not None:
            return
        handlers = self.handlers
        try:
            if not handlers.may_run:  # receive only: handlers never nest, and no handler
                handlers.receive(_PROGRESS_BATCHES)  # runs while mailboxes are created
                return
            handlers.pump(_PROGRESS_BATCHES)
            if self._user_sent == self._user_sent_seen:
                self._flush()
            self._user_sent_seen = self._user_sent
            self._complete_sends()
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:
            # This may be the runtime's control step waiting: raising now would abandon its
            # collective.  The failure was announced; raise it at the next send or sync.
            notices.announce(f"failed at superstep {self._bsp.superstep} with "
                             f"{type(exc).__name__}: {exc}")
            notices.defer(exc)

    def quiesce(self) -> Traffic:
        """Collective: return when no mailbox record is buffered, in flight or being handled."""
        handlers = self.handlers
        wave = self._until_quiet("sync()", lambda: (self.sent, handlers.handled),
                                 f"ending superstep {self._bsp.superstep}")
        # Every record was handled, so every Issend was matched: these complete at once.
        for box in self.boxes:
            box.window.finish()
            box.new_superstep()
        traffic, self.traffic = self.traffic, Traffic()
        traffic.add(handlers.traffic)
        handlers.traffic = Traffic()
        self.sent = handlers.handled = 0
        self.last_waves = wave.waves
        self.epoch += 1
        self._comm = handlers.comm = self._comms[self.epoch % 2]
        return traffic

    def finish(self, box: "Mailbox") -> None:
        """Collective: return when no record of ``box`` is buffered, in flight or being handled
        on any rank; the other mailboxes keep moving meanwhile (``Mailbox.done``)."""
        self._until_quiet(f"{box.name}.done()", lambda: (box.sent, box.handled),
                          f"finishing mailbox {box.name!r} at superstep {self._bsp.superstep}")

    def _until_quiet(self, call: str, counters: Callable[[], tuple[int, int]], what: str) -> DoubleWave:
        """Receive, handle and flush until two waves of ``counters()`` (records sent, handled)
        agree on every rank (see :mod:`.termination`); the sync's and ``done``'s loop."""
        notices, handlers = self.notices, self.handlers
        if handlers.running:
            raise UsageError(f"rank {self.pid}: {call} called inside a mailbox handler")
        notices.raise_deferred()
        if notices.peer_failure is not None:
            notices.state = "failed"
            raise notices.peer_failed()
        if notices.state != "open":
            raise UsageError(f"rank {self.pid}: the BSP context is {notices.state}")
        wave = DoubleWave(self._comm)
        timeout = self._bsp.timeout

        nap = Naps(self._wait_mode)

        def round_of_work() -> object:
            busy = handlers.pump(_QUIESCE_BATCHES)
            self._flush()
            self._complete_sends()
            if notices.peer_failure is not None:
                raise notices.peer_failed()
            if not wave.in_flight:
                wave.start(*counters())
            if wave.test():
                return True
            if busy:
                nap.restart()  # handlers ran: the idle time counts from here
                return BUSY
            return None

        try:
            # A wave in flight cannot be cancelled: after a timeout the job cannot go on.
            poll(round_of_work, patience=_QUIESCE_PATIENCE, pause=nap,
                 deadline=None if timeout is None else time.monotonic() + timeout,
                 expired=lambda: SyncTimeout(f"rank {self.pid}: mailbox quiescence ({what}) "
                                             f"timed out after {timeout:g} s"))
        except PeerFailed:
            notices.state = "failed"
            raise
        except BaseException as exc:
            notices.announce(f"failed while {what}: {type(exc).__name__}: {exc}")
            raise
        return wave

    def close(self) -> None:
        """Free the communicators (close hook of the context).

        A handler failure that no send or sync has raised yet is raised here (after the
        communicators are freed), so that it is never lost.
        """
        notices = self.notices
        if notices.state == "closed":
            return
        # Warn only on a normal close: after a failure (this engine's, another rank's, or the
        # context's, caught by the program), undelivered records are expected.
        if notices.state == "open" and notices.peer_failure is None and sys.exc_info()[0] is None \
                and self._bsp.extension.state != "failed":
            left = sum(b.aggregator.nbuffered for b in self.boxes) + len(self.handlers)
            if left:
                warnings.warn(f"rank {self.pid}: mailbox records of superstep {self._bsp.superstep} "
                              "were never delivered: call sync() before leaving the BSP block",
                              stacklevel=3)
        # After a failure some sends can never be matched: they are kept (see .notices).
        notices.keep_unmatched([u for b in self.boxes for u in b.window.unmatched()]
                               + self.handlers.unfinished())
        notices.state = "closed"
        for comm in self._comms:
            try:
                comm.Free()
            except MPI.Exception:
                pass
        notices.raise_deferred()

    # ------------------------------------------------------------------ internals
    def _wait_for_slot(self, box: "Mailbox", nap: Naps) -> None:
        """One round of waiting for ``box`` to have fewer than ``max_pending`` sends in flight;
        ``nap``: the wait's pause when the round received nothing."""
        box.window.complete()
        if not box.window.full:
            return
        if self.notices.peer_failure is not None:
            return  # ship() drops the message
        # Receiving is what lets the peers' sends (and so, eventually, ours) complete; inside a
        # handler, or while a send ships, the records wait in the inbox (handlers never nest,
        # and must not overtake what is being shipped).
        if not self.handlers.may_run:
            got = self.handlers.receive(_PROGRESS_BATCHES)
        else:
            got = self.handlers.pump(_PROGRESS_BATCHES)
        if got:
            nap.restart()
        else:
            nap()

    def _flush(self) -> None:
        """Send every partly filled buffer of every mailbox."""
        with self.handlers.holding():
            for box in self.boxes:
                if box.aggregator.nbuffered:
                    for dest, msg in list(box.aggregator.drain()):
                        self.post(box, dest, msg)

    def _complete_sends(self) -> None:
        for box in self.boxes:
            box.window.complete()


def default_buffer(itemsize: int, nprocs: int) -> int:
    """Records per destination buffer when the mailbox does not say.

    Large messages matter: every message costs a handshake with a receiver that may be busy or
    descheduled.  So the buffers share a budget of 16 MiB per mailbox (like YGM's default),
    each between 64 KiB and 512 KiB; ``$HPCBSP_MAILBOX_BYTES`` sets the bytes per buffer.
    """
    env = setting("HPCBSP_MAILBOX_BYTES")
    nbytes = int(env) if env is not None else min(512 << 10, max(64 << 10, (16 << 20) // max(1, nprocs)))
    return max(1, nbytes // max(1, itemsize))
