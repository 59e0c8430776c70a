"""Send back-pressure of one mailbox: at most ``max_pending`` messages in flight.

Messages go out with synchronous-mode sends (``Issend``), which complete only once the receiver
has matched them; with a bounded number in flight, neither the sender's buffers nor the
receiver's unexpected-message queue can grow with the number of records a superstep produces.
A :class:`SendWindow` holds the requests in flight and their buffers (kept alive until the send
completes, then given back to the mailbox's aggregator for reuse).  Waiting for a free slot is
the engine's job (it receives and handles meanwhile, which is what lets the peers' sends, and so
eventually this rank's, complete).
"""
from __future__ import annotations

import numpy as np
from mpi4py import MPI

from .aggregation import Buffers


class SendWindow:
    """The sends of one mailbox in flight, at most ``max_pending``."""

    def __init__(self, max_pending: int, aggregator: Buffers):
        self.max_pending = max_pending
        self._aggregator = aggregator
        self._reqs: list[MPI.Request] = []
        self._msgs: list[np.ndarray] = []

    def __len__(self) -> int:
        return len(self._reqs)

    @property
    def full(self) -> bool:
        return len(self._reqs) >= self.max_pending

    def add(self, req: MPI.Request, msg: np.ndarray) -> None:
        """A send just started; ``msg`` must stay alive until it completes."""
        self._reqs.append(req)
        self._msgs.append(msg)

    def complete(self) -> None:
        """Retire the sends that completed (without blocking); recycle their buffers."""
        if not self._reqs:
            return
        done = MPI.Request.Testsome(self._reqs)
        if not done:
            return
        finished = set(done)
        for i in done:
            self._aggregator.recycle(self._msgs[i])
        self._reqs[:] = [r for i, r in enumerate(self._reqs) if i not in finished]
        self._msgs[:] = [m for i, m in enumerate(self._msgs) if i not in finished]

    def finish(self) -> None:
        """Wait for every send (after quiescence every one was matched, so this does not block
        for long) and recycle the buffers."""
        MPI.Request.Waitall(self._reqs)
        for msg in self._msgs:
            self._aggregator.recycle(msg)
        self._reqs.clear()
        self._msgs.clear()

    def unmatched(self) -> list[tuple[MPI.Request, np.ndarray]]:
        """The sends not completed, with their buffers (after a failure, some never will be)."""
        return [(r, m) for r, m in zip(self._reqs, self._msgs) if not _done(r)]


def _done(req: MPI.Request) -> bool:
    try:
        return bool(req.Test())
    except MPI.Exception:
        return False
