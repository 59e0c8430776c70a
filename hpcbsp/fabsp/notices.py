"""Failure notices of an FA-BSP engine: telling the peers that this rank failed, hearing that a
peer did, and holding back this rank's own failure until it can be raised safely.

A handler that raises makes this rank send a short "poison" message (tag :data:`POISON_TAG`,
the failure's description as bytes) to every other rank on both epoch communicators, once.  A
rank that receives one stops handling and drops what it sends; its next ``sync`` raises
:class:`~hpcbsp.runtime.errors.PeerFailed` naming the failed rank.

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

import numpy as np
from mpi4py import MPI

from ..runtime.superstep.lifecycle import abort_grace

#: Tag of the failure notice; mailbox tags are their indices, far below this.
POISON_TAG = 32000

#: Sends of failed runs that no receiver will match, with their buffers (see the module notes).
_UNMATCHED: list[tuple[object, ...]] = []


class FailureNotices:
    """The failure state of one engine: ``state`` goes open -> failed | closed."""

    def __init__(self, comms: tuple[MPI.Comm, ...], pid: int, nprocs: int):
        self._comms = comms
        self._pid = pid
        self._nprocs = nprocs
        self.state = "open"
        #: What a peer's notice said ("rank R failed ..."), once one arrived.
        self.peer_failure: str | None = None
        self._deferred: BaseException | None = None  # this rank's handler failure, not raised yet
        self._deferred_at = 0.0
        self._reqs: list[MPI.Request] = []
        self._note = np.empty(0, dtype=np.uint8)

    def announce(self, describe: str) -> None:
        """This rank failed: tell every other rank (on every epoch communicator), once."""
        if self.state != "open":
            return
        self.state = "failed"
        note = np.frombuffer(describe.encode()[:2000], dtype=np.uint8).copy()
        for comm in self._comms:
            for dest in range(self._nprocs):
                if dest != self._pid:
                    self._reqs.append(comm.Isend([note, MPI.BYTE], dest, POISON_TAG))
        self._note = note  # keep the buffer alive while the sends are in flight

    def heard(self, src: int, raw: np.ndarray) -> None:
        """A notice from ``src`` arrived (its bytes)."""
        self.peer_failure = f"rank {src} {raw.tobytes().decode(errors='replace')}"

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
            _UNMATCHED.append((unmatched, self._reqs, self._note))
