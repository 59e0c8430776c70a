"""Quiescence detection by double-wave counting (Mattern's counting method, as in YGM's barrier).

Every rank keeps two counters for the current epoch: records *sent* (counted when a record is
enqueued, even while it still sits in an aggregation buffer) and records *handled* (counted after
their handler returned, so any records the handler sent are already in "sent").  A wave is one
non-blocking ``Iallreduce(SUM)`` of the pair; the caller keeps receiving and handling while it is
in flight.  The epoch is over when two consecutive waves return the same totals and
sent == handled.

Why that is enough: a rank contributes to wave k+1 only after wave k completed on it, and wave k
completes only after every rank contributed to it, so there is a moment T after every rank's
wave-k contribution and before any rank's wave-(k+1) contribution.  The counters only grow, so
equal sums in both waves mean no rank's counters changed between its two contributions; at T the
total sent therefore equals the total handled: nothing was buffered, in flight or being handled,
and, as only handlers create work during a quiescence, nothing can start again.  All ranks see
the same sums and stop at the same wave.

The start of the epoch counts as a wave with totals (0, 0): every rank's counters start at zero
before any rank's first contribution (the sync's control step lies in between), so a superstep
without mailbox traffic ends after one wave.

Cost per superstep: two or more ``Iallreduce`` of two int64 words (the ``l`` of the superstep;
no h-relation).
"""
from __future__ import annotations

import numpy as np
from mpi4py import MPI


class DoubleWave:
    """One epoch's termination detection on ``comm`` (every rank makes the same waves)."""

    def __init__(self, comm: MPI.Comm):
        self._comm = comm
        self._send = np.zeros(2, dtype=np.int64)
        self._recv = np.zeros(2, dtype=np.int64)
        self._req: MPI.Request | None = None
        self._prev = (0, 0)  # the virtual wave at the start of the epoch
        #: Completed waves (the number of Iallreduce calls this epoch needed).
        self.waves = 0

    @property
    def in_flight(self) -> bool:
        """A wave has started and not completed yet."""
        return self._req is not None

    def start(self, sent: int, handled: int) -> None:
        """Contribute this rank's counters to the next wave (call only when none is in flight)."""
        assert self._req is None, "one wave at a time"
        self._send[0] = sent
        self._send[1] = handled
        self._req = self._comm.Iallreduce(self._send, self._recv, op=MPI.SUM)

    def test(self) -> bool:
        """Poll the wave in flight; True once the epoch is over on every rank."""
        if self._req is None or not self._req.Test():
            return False
        self._req = None
        self.waves += 1
        totals = (int(self._recv[0]), int(self._recv[1]))
        done = totals[0] == totals[1] and totals == self._prev
        self._prev = totals
        return done
