"""Failure notices of an FA-BSP engine: telling the peers that this rank failed, hearing that a
peer did, and holding back this rank's own failure until it can be raised safely.

A handler that raises makes this rank send a short "poison" message (tag :data:`POISON_TAG`:
the failed rank, 8 bytes, then the failure's description) down a binomial tree rooted at it, on
both epoch communicators: the failed rank sends it to the ranks 1, 2, 4, ... after it (modulo
P), and each rank that hears it first forwards it to its own children in that tree
(:func:`children`), once per failed rank.  So every rank hears of it within ceil(log2 P) hops,
and no rank sends more than ceil(log2 P) notices per failed rank and communicator (the failed
one included: it used to send 2(P-1)).  A rank that receives one stops handling and drops what
it sends; its next ``sync`` raises :class:`~hpcbsp.runtime.errors.PeerFailed` naming the failed
rank (uncaught, printed by one rank only: :meth:`FailureNotices.peer_failed`).  (A notice
forwarded by a rank busy in its own work waits for that rank's next call into the mailboxes;
the runtime's control step names the failure at the next sync either way.)

A failure raised while the runtime's control step waits (inside ``progress``) cannot be raised
there without abandoning a collective: it is *deferred* to this rank's next ``send`` or ``sync``,
or raised by ``progress`` once half of ``$HPCBSP_ABORT_GRACE`` has passed, so that a loop
spinning on ``bsp.progress()`` cannot hang.

Sends that no receiver will match (after a failure) are kept, with their buffers, for the life of
the process: MPICH finalizes with them outstanding, while cancelling a send (deprecated since
MPI-4.1) hangs or crashes it.
"""
from __future__ import annotations

import time
from typing import Iterator

import numpy as np
from mpi4py import MPI

from ..runtime.errors import PeerFailed
from ..runtime.superstep.lifecycle import abort_grace

#: Tag of the failure notice; mailbox tags are their indices, far below this.
POISON_TAG = 32000

#: Sends of failed runs that no receiver will match, with their buffers (see the module notes).
_UNMATCHED: list[tuple[object, ...]] = []


def children(me: int, root: int, nprocs: int) -> Iterator[int]:
    """The ranks ``me`` sends a notice of rank ``root``'s failure to: its children in the binomial
    tree rooted at ``root`` (relative rank v = me - root mod P: v + 2**k for each 2**k > v below P)."""
    v = (me - root) % nprocs
    step = 1 << v.bit_length()
    while v + step < nprocs:
        yield (root + v + step) % nprocs
        step <<= 1


class FailureNotices:
    """The failure state of one engine: ``state`` goes open -> failed | closed."""

    def __init__(self, comms: tuple[MPI.Comm, ...], pid: int, nprocs: int):
        self._comms = comms
        self._pid = pid
        self._nprocs = nprocs
        self.state = "open"
        #: What a peer's notice said ("rank R failed ..."), once one arrived.
        self.peer_failure: str | None = None
        self._peer_origin = -1  # the failed rank of the first notice heard
        self._deferred: BaseException | None = None  # this rank's handler failure, not raised yet
        self._deferred_at = 0.0
        self._reqs: list[MPI.Request] = []
        self._notes: list[np.ndarray] = []  # the notices sent, alive while their sends are in flight
        self._forwarded: set[int] = set()  # the failed ranks whose notices this rank has passed on

    def announce(self, describe: str) -> None:
        """This rank failed: tell every other rank (down the tree rooted here), once."""
        if self.state != "open":
            return
        self.state = "failed"
        self._forward(self._pid, describe.encode()[:2000])

    def _forward(self, origin: int, text: bytes) -> None:
        """Send the notice of rank ``origin``'s failure to this rank's children in its tree, on
        every epoch communicator (once per origin)."""
        if origin in self._forwarded:
            return
        self._forwarded.add(origin)
        note = np.frombuffer(origin.to_bytes(8, "little", signed=True) + text, dtype=np.uint8).copy()
        self._notes.append(note)  # keep the buffer alive while the sends are in flight
        for dest in children(self._pid, origin, self._nprocs):
            for comm in self._comms:
                self._reqs.append(comm.Isend([note, MPI.BYTE], dest, POISON_TAG))

    def heard(self, src: int, raw: np.ndarray) -> None:
        """A notice arrived from ``src`` (its bytes: the failed rank, then what it said): keep the
        first one heard, and pass each failed rank's on down its tree."""
        data = raw.tobytes()
        origin = int.from_bytes(data[:8], "little", signed=True) if len(data) >= 8 else src
        text = data[8:]
        if not 0 <= origin < self._nprocs:  # (not a notice of this engine's making)
            origin, text = src, data
        if self.peer_failure is None:
            self.peer_failure = f"rank {origin} {text.decode(errors='replace')}"
            self._peer_origin = origin
        self._forward(origin, text)

    def peer_failed(self) -> PeerFailed:
        """The error a rank raises once it has heard of a peer's failure (``peer_failure`` set):
        reported, uncaught, only by the lowest rank other than the failed one, so that the job
        prints one such line (with the failed rank's own report), not one per rank."""
        reporter = 1 if self._peer_origin == 0 else 0
        return PeerFailed(f"stopping because {self.peer_failure}", reports=self._pid == reporter)

    def defer(self, exc: BaseException) -> None:
        """Keep this rank's failure to raise at the next safe point."""
        self._deferred = exc
        self._deferred_at = time.monotonic()

    @property
    def deferred(self) -> bool:
        return self._deferred is not None

    def overdue(self) -> bool:
        """The deferred failure has waited half the abort grace for a safe point."""
        return self._deferred is not None and time.monotonic() - self._deferred_at > abort_grace() / 2

    def raise_deferred(self) -> None:
        exc, self._deferred = self._deferred, None
        if exc is not None:
            raise exc

    def keep_unmatched(self, unmatched: list[tuple[MPI.Request, np.ndarray]]) -> None:
        """Keep sends that will never be matched, and the notices, alive for the process's life."""
        if unmatched or self._reqs:
            _UNMATCHED.append((unmatched, self._reqs, self._notes))
