"""The FA-BSP engine of one BSP context: moves mailbox messages, runs handlers, ends supersteps.

One engine serves all mailboxes of a context and is the context's sync hook (see
:class:`hpcbsp.runtime.context.SyncHook`):

* ``progress()`` (non-blocking) receives what has arrived, runs handlers one batch at a time,
  and completes finished sends;
* ``quiesce()`` (collective) flushes every partial buffer and keeps receiving and handling until
  :class:`~hpcbsp.fabsp.termination.DoubleWave` says no record is buffered, in flight or being
  handled on any rank, then returns the superstep's mailbox traffic for the ledger.

Transport.  Each message is one full (or, at a flush, partial) aggregation buffer of one mailbox,
sent with ``Issend`` on a duplicated communicator with the mailbox's index as tag and received
with ``Improbe`` + ``Recv`` (exact size, any source).  Synchronous mode means a send completes
only once the receiver has matched it, so with at most ``max_pending`` sends per mailbox in
flight neither the sender's buffers nor the receiver's unexpected-message queue can grow with the
number of records a superstep produces.  Records to this rank itself skip MPI (a local FIFO).

Epochs.  Supersteps alternate between two duplicated communicators (by parity), so a rank that
left a quiescence early and already sends next-superstep messages cannot have them received by a
slower rank that is still finishing the previous superstep; termination guarantees nothing of the
previous superstep is left when a rank leaves.

Failures.  A handler that raises makes this rank send a short "poison" message to every other
rank, stop handling, and raise the exception at the first point where raising cannot leave a
collective half done: at once inside ``send`` or ``sync``; from ``progress()`` (which the
runtime also calls while it waits inside the sync's control step) it is kept for this rank's
next ``send`` or ``sync`` (or raised by ``progress`` after ``$HPCBSP_ABORT_GRACE``/2 seconds, so
that a loop spinning on ``bsp.progress()`` cannot hang).  A rank that receives the poison stops
handling and drops what it sends; its next ``sync`` raises :class:`BSPError` (``remote=True``)
naming the failed rank.  The ranks thus reach the runtime's failure step together and the job
ends with the failing rank's traceback, instead of waiting for a rank that is gone.
"""
from __future__ import annotations

import contextlib
import os
import sys
import time
import warnings
from collections import deque
from typing import TYPE_CHECKING, Iterator

import numpy as np
from mpi4py import MPI

from ..runtime.errors import BSPError, SyncTimeout, env_number
from ..runtime.exchange import Traffic
from .termination import DoubleWave

if TYPE_CHECKING:
    from ..runtime.context import BSP
    from .mailbox import Mailbox

#: Tag of the failure notice; mailbox tags are their indices, far below this.
POISON_TAG = 32000
#: Messages received per non-blocking ``progress`` call before returning to the caller's work.
_PROGRESS_BATCHES = 64
#: The same inside a quiescence, between flushes of the buffers that handlers filled.
_QUIESCE_BATCHES = 256


class PeerFailed(BSPError):
    """Another rank failed (its handler raised); this rank stops (``remote=True``)."""

    def __init__(self, message: str):
        super().__init__(message, remote=True)


class Engine:
    """Mailbox traffic of one BSP context; created by the context's first mailbox."""

    @classmethod
    def existing(cls, bsp: "BSP") -> "Engine | None":
        """The engine of ``bsp`` if it has one."""
        return next((hook for hook in bsp._hooks if isinstance(hook, Engine)), None)

    @classmethod
    def of(cls, bsp: "BSP") -> "Engine":
        """The engine of ``bsp``, created (collectively) at its first mailbox registration."""
        engine = cls.existing(bsp)
        if engine is not None:
            return engine
        engine = cls(bsp)
        bsp._add_sync_hook(engine)
        bsp._add_close_hook(engine.close)
        return engine

    def __init__(self, bsp: "BSP"):
        self.pid = bsp.pid
        self.nprocs = bsp.nprocs
        self._bsp = bsp
        self._comms = (bsp.comm.Dup(), bsp.comm.Dup())
        self._comm = self._comms[0]
        self.epoch = 0
        self.boxes: list["Mailbox"] = []
        self._inbox: deque[tuple[int, int, np.ndarray]] = deque()
        self._early: list[tuple[int, int, np.ndarray]] = []  # for mailboxes not registered yet
        self._status = MPI.Status()
        self.sent = 0       # records enqueued this epoch (termination counter)
        self.handled = 0    # records whose handler returned this epoch
        self.traffic = Traffic()
        self._in_handler = False
        self._holding = False  # receive, but run no handler (while a mailbox is registered)
        self._user_sent = 0           # records sent by user code (not handlers), ever
        self._user_sent_seen = -1     # its value at the previous progress() call
        self._state = "open"  # open -> failed | closed
        self._peer_failure: str | None = None
        self._deferred: BaseException | None = None  # this rank's handler failure, not raised yet
        self._deferred_at = 0.0
        self._poison_reqs: list[MPI.Request] = []
        self._poison_note = np.empty(0, dtype=np.uint8)
        #: Waves the last quiescence needed (a statistic for tests and benchmarks).
        self.last_waves = 0

    # ------------------------------------------------------------------ mailboxes' side
    def register(self, box: "Mailbox") -> int:
        """Add a mailbox; its index is its tag.  Records that arrived early are queued now."""
        index = len(self.boxes)
        if index >= POISON_TAG:  # tags must stay below the failure notice's (and MPI_TAG_UB)
            raise BSPError(f"rank {self.pid}: too many mailboxes in one BSP context ({index})")
        self.boxes.append(box)
        for tag, src, raw in [e for e in self._early if e[0] == index]:
            recs = raw.view(box.dtype)
            self.traffic.msgs_in += recs.shape[0]
            self._inbox.append((tag, src, recs))
        self._early = [e for e in self._early if e[0] != index]
        return index

    def accepting(self, where: str) -> bool:
        """May ``send`` go on?  Raises this rank's pending handler failure or a closed context;
        False (the records are dropped) once another rank failed: the next sync reports it."""
        self._raise_deferred()
        if self._state != "open":
            raise BSPError(f"{where}: the BSP context is {self._state}; nothing can be sent any more")
        return self._peer_failure is None

    @contextlib.contextmanager
    def holding_handlers(self) -> Iterator[None]:
        """Within this block ``progress`` receives but runs no handler.

        Mailbox registration waits in a control step that calls ``progress``; a handler that
        sends to a mailbox being created right after its own (request, then reply) must not run
        before that mailbox exists.
        """
        self._holding = True
        try:
            yield
        finally:
            self._holding = False

    def count_sent(self, nrecords: int) -> None:
        """Count records enqueued by ``send`` (before they are buffered, shipped or queued)."""
        self.sent += nrecords
        if not self._in_handler:
            self._user_sent += nrecords

    def enqueue_local(self, box: "Mailbox", recs: np.ndarray) -> None:
        """Records to this rank itself: straight into the inbox (handled at the next progress)."""
        self._inbox.append((box.index, self.pid, recs))

    def ship(self, box: "Mailbox", dest: int, msg: np.ndarray) -> None:
        """Send one message of ``box`` to ``dest``, first waiting for a free slot if needed."""
        while len(box.pending) >= box.max_pending:
            if self._peer_failure is not None:
                return  # the superstep is lost; the receiver may be gone
            self._wait_for_slot(box)
        if self._peer_failure is not None:
            return
        req = self._comm.Issend([msg.view(np.uint8), MPI.BYTE], dest, box.index)
        box.pending.append(req)
        box.pending_msgs.append(msg)
        self.traffic.bytes_out += msg.nbytes
        self.traffic.msgs_out += msg.shape[0]

    def after_send(self) -> None:
        """Called after a ``send`` that shipped messages: let the handlers keep up (user code only)."""
        if not self._in_handler:
            self._pump(_PROGRESS_BATCHES)

    # ------------------------------------------------------------------ sync hook
    def progress(self) -> None:
        """Receive, run handlers and complete sends without blocking (the runtime's hook).

        When called twice with no ``send`` from user code in between, this rank is idle
        (waiting in a sync, or computing without sending): partly filled buffers are sent too,
        so no record is held back indefinitely.  Between sends, buffers fill up as usual.
        """
        if self._deferred is not None:
            if time.monotonic() - self._deferred_at > _abort_grace() / 2:
                self._raise_deferred()  # nobody reached a safe point: end it (see module notes)
            return
        if self._state != "open" or self._peer_failure is not None:
            return
        try:
            if self._in_handler or self._holding:  # receive only: handlers never nest, and no
                self._receive(_PROGRESS_BATCHES)   # handler runs while mailboxes are created
                return
            self._pump(_PROGRESS_BATCHES)
            if self._user_sent == self._user_sent_seen:
                self._flush()
            self._user_sent_seen = self._user_sent
            self._complete_sends()
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:
            # This may be the runtime's control step waiting: raising now would abandon its
            # collective.  The failure was announced; raise it at the next send or sync.
            if self._state == "open":
                self._fail(f"failed at superstep {self._bsp.superstep} with "
                           f"{type(exc).__name__}: {exc}")
            self._deferred = exc
            self._deferred_at = time.monotonic()

    def quiesce(self) -> Traffic:
        """Collective: return when no mailbox record is buffered, in flight or being handled."""
        if self._in_handler:
            raise BSPError(f"rank {self.pid}: sync() called inside a mailbox handler")
        self._raise_deferred()
        if self._peer_failure is not None:
            self._state = "failed"
            raise PeerFailed(f"stopping because {self._peer_failure}")
        if self._state != "open":
            raise BSPError(f"rank {self.pid}: the BSP context is {self._state}")
        wave = DoubleWave(self._comm)
        timeout = self._bsp.timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        idle = 0
        try:
            while True:
                busy = self._pump(_QUIESCE_BATCHES)
                self._flush()
                self._complete_sends()
                if self._peer_failure is not None:
                    raise PeerFailed(f"stopping because {self._peer_failure}")
                if not wave.in_flight:
                    wave.start(self.sent, self.handled)
                if wave.test():
                    break
                idle = 0 if busy else idle + 1
                if idle > 200:
                    time.sleep(1e-4)  # ranks are often oversubscribed: let the busy one run
                    if deadline is not None and time.monotonic() > deadline:
                        # A wave is in flight and cannot be cancelled: the job cannot go on.
                        raise SyncTimeout(f"rank {self.pid}: mailbox quiescence at superstep "
                                       f"{self._bsp.superstep} timed out after {timeout:g} s")
        except PeerFailed:
            self._state = "failed"
            raise
        except BaseException as exc:
            self._fail(f"failed while ending superstep {self._bsp.superstep}: "
                       f"{type(exc).__name__}: {exc}")
            raise
        # Every record was handled, so every Issend was matched: these complete at once.
        for box in self.boxes:
            MPI.Request.Waitall(box.pending)
            for msg in box.pending_msgs:
                box.aggregator.recycle(msg)
            box.pending.clear()
            box.pending_msgs.clear()
        traffic, self.traffic = self.traffic, Traffic()
        self.sent = self.handled = 0
        self.last_waves = wave.waves
        self.epoch += 1
        self._comm = self._comms[self.epoch % 2]
        return traffic

    def close(self) -> None:
        """Free the communicators (close hook of the context).

        A handler failure that no send or sync has raised yet is raised here (after the
        communicators are freed), so that it is never lost.
        """
        if self._state == "closed":
            return
        # Warn only on a normal close: after a failure (this engine's, another rank's, or the
        # context's, caught by the program), undelivered records are expected.
        if self._state == "open" and self._peer_failure is None and sys.exc_info()[0] is None \
                and self._bsp._state != "failed":
            left = sum(b.aggregator.nbuffered for b in self.boxes) + len(self._inbox)
            if left:
                warnings.warn(f"rank {self.pid}: mailbox records of superstep {self._bsp.superstep} "
                              "were never delivered: call sync() before leaving the BSP block",
                              stacklevel=3)
        # After a failure some sends can never be matched.  They are left as they are: MPICH
        # finalizes with them outstanding, while MPI_Cancel on a send (deprecated since MPI-4.1)
        # hangs or crashes it (a segfault here used to cut off the failed rank's report).  Their
        # requests and buffers are kept for the life of the process, so that MPI never reads
        # memory that this engine's collection would free.
        unmatched = [(r, m) for b in self.boxes for r, m in zip(b.pending, b.pending_msgs)
                     if not _done(r)]
        if unmatched or self._poison_reqs:
            _UNMATCHED.append((unmatched, self._poison_reqs, self._poison_note))
        self._state = "closed"
        for comm in self._comms:
            try:
                comm.Free()
            except MPI.Exception:
                pass
        self._raise_deferred()

    # ------------------------------------------------------------------ internals
    def _pump(self, limit: int | None) -> bool:
        """Receive and handle until nothing is waiting (at most ``limit`` messages); True if any."""
        busy = False
        count = 0
        while True:
            if self._inbox:
                self._run_handlers()
                busy = True
            if limit is not None and count >= limit:
                break
            if not self._receive(1):
                break
            count += 1
        return busy or count > 0

    def _receive(self, limit: int) -> int:
        """Move up to ``limit`` arrived messages into the inbox; return how many."""
        got = 0
        comm, status = self._comm, self._status
        while got < limit:
            msg = comm.Improbe(MPI.ANY_SOURCE, MPI.ANY_TAG, status)
            if msg is None:
                break
            src, tag = status.Get_source(), status.Get_tag()
            raw = np.empty(status.Get_count(MPI.BYTE), dtype=np.uint8)
            msg.Recv([raw, MPI.BYTE])
            if tag == POISON_TAG:
                self._peer_failure = f"rank {src} {raw.tobytes().decode(errors='replace')}"
                continue
            got += 1
            self.traffic.bytes_in += raw.size
            if tag < len(self.boxes):
                box = self.boxes[tag]
                recs = raw.view(box.dtype)
                self.traffic.msgs_in += recs.shape[0]
                self._inbox.append((tag, src, recs))
            else:
                self._early.append((tag, src, raw))
        return got

    def _run_handlers(self) -> None:
        """Run handlers on the inbox, one batch at a time (never nested)."""
        if self._in_handler:
            return
        self._in_handler = True
        box = None
        try:
            while self._inbox:
                if self._peer_failure is not None:
                    self._inbox.clear()  # the superstep is lost; do not act on its records
                    return
                index, src, recs = self._inbox.popleft()
                box = self.boxes[index]
                box.call_handler(recs, src)
                self.handled += recs.shape[0]
        except PeerFailed:
            raise
        except BaseException as exc:
            what = f"mailbox {box.name!r}" if box is not None else "a mailbox"
            self._fail(f"failed in the handler of {what} at superstep {self._bsp.superstep} "
                       f"with {type(exc).__name__}: {exc}")
            raise
        finally:
            self._in_handler = False

    def _wait_for_slot(self, box: "Mailbox") -> None:
        """One round of waiting for ``box`` to have fewer than ``max_pending`` sends in flight."""
        self._complete_box(box)
        if len(box.pending) < box.max_pending:
            return
        if self._peer_failure is not None:
            return  # ship() drops the message
        # Receiving is what lets the peers' sends (and so, eventually, ours) complete; inside a
        # handler the records wait in the inbox, because handlers never nest.
        if self._in_handler:
            got = self._receive(_PROGRESS_BATCHES)
        else:
            got = self._pump(_PROGRESS_BATCHES)
        if not got:
            time.sleep(0)

    def _flush(self) -> None:
        """Send every partly filled buffer of every mailbox."""
        for box in self.boxes:
            if box.aggregator.nbuffered:
                for dest, msg in list(box.aggregator.drain()):
                    self.ship(box, dest, msg)

    def _complete_sends(self) -> None:
        for box in self.boxes:
            if box.pending:
                self._complete_box(box)

    @staticmethod
    def _complete_box(box: "Mailbox") -> None:
        done = MPI.Request.Testsome(box.pending)
        if not done:
            return
        finished = set(done)
        for i in done:
            box.aggregator.recycle(box.pending_msgs[i])
        box.pending[:] = [r for i, r in enumerate(box.pending) if i not in finished]
        box.pending_msgs[:] = [m for i, m in enumerate(box.pending_msgs) if i not in finished]

    def _raise_deferred(self) -> None:
        exc, self._deferred = self._deferred, None
        if exc is not None:
            raise exc

    def _fail(self, describe: str) -> None:
        """This rank failed: tell every other rank (on both epoch communicators), once."""
        if self._state != "open":
            return
        self._state = "failed"
        note = np.frombuffer(describe.encode()[:2000], dtype=np.uint8).copy()
        for comm in self._comms:
            for dest in range(self.nprocs):
                if dest != self.pid:
                    self._poison_reqs.append(comm.Isend([note, MPI.BYTE], dest, POISON_TAG))
        self._poison_note = note  # keep the buffer alive while the sends are in flight


def _done(req: MPI.Request) -> bool:
    try:
        return bool(req.Test())
    except MPI.Exception:
        return False


#: Sends of failed runs that no receiver will match, with their buffers (see ``Engine.close``).
_UNMATCHED: list[tuple[object, ...]] = []


def _abort_grace() -> float:
    return float(os.environ.get("HPCBSP_ABORT_GRACE", "10"))


def default_buffer(itemsize: int, nprocs: int) -> int:
    """Records per destination buffer when the mailbox does not say.

    Large messages matter: every message costs a handshake with a receiver that may be busy or
    descheduled.  So the buffers share a budget of 16 MiB per mailbox (like YGM's default),
    each between 64 KiB and 512 KiB; ``$HPCBSP_MAILBOX_BYTES`` sets the bytes per buffer.
    """
    env = env_number("HPCBSP_MAILBOX_BYTES", int, 1)
    nbytes = int(env) if env else min(512 << 10, max(64 << 10, (16 << 20) // max(1, nprocs)))
    return max(1, nbytes // max(1, itemsize))
