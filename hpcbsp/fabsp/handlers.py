"""Handler scheduling of an FA-BSP engine: receiving mailbox messages and running handlers.

Arrived messages are received (``Improbe`` + ``Imrecv`` of the exact size, any source, any tag:
matched at their first bytes, received without blocking, entering the inbox in matched order per
source) into an inbox; records a rank sends to itself are put there directly.  A pump
receives what has arrived (up to :data:`AHEAD_BYTES` at a time) before it runs handlers, and
consecutive small batches of one mailbox in the inbox are handed to its handler as one batch (up
to ``buffer`` records; with the source, only batches of one source): per-pair order is kept, and
a handler's fixed cost is paid once per pass instead of once per message (issue 33: toposort's
many small batches).  Handlers run on the inbox one batch at a time and never nested: a handler that sends and has to wait for a
free send slot receives meanwhile, but the records wait in the inbox until it returns.  While a
mailbox is being created (:meth:`Handlers.holding`), messages are received but no handler runs,
and messages for a mailbox that does not exist yet on this rank are kept until it does.

A failure notice (:data:`~.notices.POISON_TAG`) that arrives goes to the engine's
:class:`~.notices.FailureNotices`; from then on the inbox is dropped (the superstep is lost).  A
handler that raises announces this rank's failure to the peers before the exception propagates.
"""
from __future__ import annotations

import contextlib
from collections import deque
from typing import TYPE_CHECKING, Callable, Iterator

import numpy as np
from mpi4py import MPI

from ..runtime.errors import PeerFailed
from ..runtime.superstep.ledger import Traffic
from .notices import POISON_TAG, FailureNotices

if TYPE_CHECKING:
    from .mailbox import Mailbox

#: Bytes a pump receives ahead before running handlers on them (then it handles and goes on).
AHEAD_BYTES = 1 << 20
#: Bytes of matched messages whose receive may be in progress at once.
ARRIVING_BYTES = 64 << 20


class Handlers:
    """The inbox and handler loop of one engine.

    ``boxes`` is the engine's list of mailboxes (shared: index = tag); ``comm`` is the current
    epoch's communicator (the engine sets it); ``traffic`` counts what arrived (bytes, records)
    and is swapped out by the engine at the end of each superstep; ``handled`` counts records
    whose handler returned (the termination counter).
    """

    def __init__(self, boxes: list["Mailbox"], comm: MPI.Comm, notices: FailureNotices,
                 superstep: Callable[[], int]):
        self.boxes = boxes
        self.comm = comm
        self.traffic = Traffic()
        self.handled = 0
        #: True while a handler runs (handlers never nest), and the mailbox whose handler it is.
        self.running = False
        self.current: "Mailbox | None" = None
        self._held = False  # receive, but run no handler (while a mailbox is registered)
        self._notices = notices
        self._superstep = superstep
        self._inbox: deque[tuple[int, int, object, int]] = deque()  # (box, source, batch, records)
        self._early: list[tuple[int, int, np.ndarray]] = []  # for mailboxes not registered yet
        #: Per source, matched messages being received: (request, buffer, tag), in matched order.
        self._arriving: dict[int, deque[tuple[MPI.Request, np.ndarray, int]]] = {}
        self._arriving_bytes = 0
        self._status = MPI.Status()

    def count_handled(self, box: "Mailbox", n: int) -> None:
        """``n`` records of ``box`` are done with on this rank: its handler returned for them, or
        combining folded them into another record (the termination counters of both)."""
        self.handled += n
        box.handled += n

    def __len__(self) -> int:
        """Batches waiting in the inbox."""
        return len(self._inbox)

    @property
    def may_run(self) -> bool:
        """False inside a handler or while mailboxes are created: receive only."""
        return not (self.running or self._held)

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """Within this block messages are received but no handler runs."""
        held, self._held = self._held, True
        try:
            yield
        finally:
            self._held = held

    def admit(self, index: int, box: "Mailbox") -> None:
        """Mailbox ``index`` was registered: queue the records that arrived for it before."""
        for tag, src, raw in [e for e in self._early if e[0] == index]:
            batch, n = box.decode(raw)
            self.traffic.msgs_in += n
            self._inbox.append((tag, src, batch, n))
        self._early = [e for e in self._early if e[0] != index]

    def enqueue(self, index: int, src: int, batch: object, n: int) -> None:
        """A batch of ``n`` records for mailbox ``index`` from ``src`` (this rank itself),
        handled at the next pump."""
        self._inbox.append((index, src, batch, n))

    def pump(self, limit: int | None) -> bool:
        """Receive and handle until nothing is waiting (at most ``limit`` messages); True if any."""
        busy = False
        count = 0
        while True:
            if self._inbox:
                self.run()
                busy = True
            if limit is not None and count >= limit:
                break
            got = self.receive(limit - count if limit is not None else 1 << 30, AHEAD_BYTES)
            if not got:
                break
            count += got
        return busy or count > 0

    def receive(self, limit: int, max_bytes: int = 0) -> int:
        """Move up to ``limit`` arrived messages into the inbox (stopping once ``max_bytes``
        were moved, if given); return how many.

        A message is matched (``Improbe``) as soon as its first bytes are here and received
        without blocking (``Imrecv``): over a network a large message takes a while to stream
        in, and a blocking receive would stop this rank's own sends meanwhile (both directions
        of a link then take turns instead of running at once).  Matched messages of one source
        enter the inbox in the order they were matched (per-pair FIFO); at most
        :data:`ARRIVING_BYTES` are being received at once (one larger message alone)."""
        got, nbytes = self._landed()
        comm, status = self.comm, self._status
        misses = 0
        while got < limit and (not max_bytes or nbytes < max_bytes) \
                and (not self._arriving or self._arriving_bytes < ARRIVING_BYTES):
            msg = comm.Improbe(MPI.ANY_SOURCE, MPI.ANY_TAG, status)
            if msg is None:
                # MPICH's probe makes progress and may find what that progress brought in only
                # at the next call: receiving ahead (max_bytes), stop at a second miss in a row.
                misses += 1
                if not max_bytes or misses > 1:
                    break
                continue
            misses = 0
            src, tag = status.Get_source(), status.Get_tag()
            raw = np.empty(status.Get_count(MPI.BYTE), dtype=np.uint8)
            self._arriving.setdefault(src, deque()).append((msg.Irecv([raw, MPI.BYTE]), raw, tag))
            self._arriving_bytes += raw.size
            more, more_bytes = self._landed(src)
            got, nbytes = got + more, nbytes + more_bytes
        more, more_bytes = self._landed()
        return got + more

    def _landed(self, only: int | None = None) -> tuple[int, int]:
        """Move the messages whose receive completed into the inbox, in matched order per
        source (of source ``only``, or of all); how many, and their bytes."""
        got = nbytes = 0
        for src in [only] if only is not None else list(self._arriving):
            queue = self._arriving.get(src)
            while queue and queue[0][0].Test():
                _, raw, tag = queue.popleft()
                self._arriving_bytes -= raw.size
                if tag == POISON_TAG:
                    self._notices.heard(src, raw)
                    continue
                got += 1
                nbytes += raw.size
                self.traffic.bytes_in += raw.size
                if tag < len(self.boxes):
                    batch, n = self.boxes[tag].decode(raw)
                    self.traffic.msgs_in += n
                    self._inbox.append((tag, src, batch, n))
                else:
                    self._early.append((tag, src, raw))
            if queue is not None and not queue:
                del self._arriving[src]
        return got, nbytes

    def unfinished(self) -> list[tuple[MPI.Request, np.ndarray]]:
        """Receives still in progress, with their buffers (after a failure some never end)."""
        return [(req, raw) for queue in self._arriving.values() for req, raw, _ in queue]

    def run(self) -> None:
        """Run handlers on the inbox, one batch at a time (never nested)."""
        if self.running:
            return
        self.running = True
        box = None
        try:
            while self._inbox:
                if self._notices.peer_failure is not None:
                    self._inbox.clear()  # the superstep is lost; do not act on its records
                    return
                index, src, batch, n = self._inbox.popleft()
                box = self.current = self.boxes[index]
                if self._inbox and self._inbox[0][0] == index and n < box.buffer:
                    batch, n = self._merged(box, index, src, batch, n)
                box.call_handler(batch, src)
                self.count_handled(box, n)
        except PeerFailed:
            raise
        except BaseException as exc:
            what = f"mailbox {box.name!r}" if box is not None else "a mailbox"
            self._notices.announce(f"failed in the handler of {what} at superstep {self._superstep()} "
                                   f"with {type(exc).__name__}: {exc}")
            raise
        finally:
            self.running = False
            self.current = None

    def _merged(self, box: "Mailbox", index: int, src: int, batch: object, n: int) -> tuple[object, int]:
        """``batch`` and the batches of ``box`` right behind it in the inbox, as one batch of at
        most ``box.buffer`` records (those of other sources only if ``box.merges(src, ...)``)."""
        parts, inbox = [batch], self._inbox
        while inbox:
            head = inbox[0]
            if head[0] != index or n + head[3] > box.buffer or not box.merges(src, head[1]):
                break
            inbox.popleft()
            parts.append(head[2])
            n += head[3]
        return (box.merge(parts) if len(parts) > 1 else batch), n
