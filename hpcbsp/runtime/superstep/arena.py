"""Node-local shared memory for packed element puts (``Coarray.put_elements``).

Where every rank of a context runs on one node (:attr:`.nodes.Nodes.one_node`, learnt when the
context started), ``put_elements`` packs its records into this rank's segment of an MPI
shared-memory window (``MPI_Win_allocate_shared``) instead of a private buffer, and the
exchange sends each destination only a header naming where its record lies; the destination
applies the record straight from the sender's segment.  The packed bytes
are then never copied (MPI would copy them twice: into its shared cells and out of them).
Anywhere else, or with ``HPCBSP_ELEMENTS_TRANSPORT=messages``, or in a context with a sync
timeout (whose exchanges must be able to end without every rank), records travel as messages.

The window grows only inside an exchange, where the ranks agree on it: the count exchange of
each superstep with data carries every rank's *vote*, the bytes its records asked of the arena
in that superstep (or -1: "never", for ``messages`` or a bounded exchange).  Every rank sees the
same votes, so every rank takes the same decision: when the largest vote exceeds the segment,
after the exchange (every record applied, a ``Barrier``), the window is replaced by one 1.25x
the largest vote (rounded up to 1 MiB), if ``/dev/shm`` has twice the new windows' size free
(a vote refused for want of room is tried again only when a larger one comes); until then,
records that do not fit travel as messages.  A ``-1`` switches the arena off for good.  The
window is freed when the ranks leave the context together (``BSP.close``, bounded by the abort
grace); after a failure it is left to the end of the process.

Reuse: each rank's segment has two halves, and packing alternates between them at the end of
each superstep that packed (asked the arena for room).  The half written in one superstep is
read during that superstep's exchange; this rank writes it again only after another superstep
that packed, after a control step that every rank entered after finishing that exchange (every
superstep starts with one), so no reader can still be at it.  (A superstep that packed nothing
leaves the half as it was: no reader is at it.)

Memory model: every rank holds the window's passive-target lock (``Lock_all``) while it exists,
and ``Win.Sync`` orders the sender's stores before the headers go and the receiver's loads after
they arrive (as :mod:`hpcbsp.elastic.transport` does).

h-relation: none of its own; a record in the arena counts as the bytes it would have sent.
Memory: up to ``2 x 1.25 x`` the largest batch of element records of any superstep, per rank,
in ``/dev/shm``.
"""
from __future__ import annotations

import os
import time

import numpy as np
from mpi4py import MPI

from ...util.waiting import poll
from ..environment import setting
from .waiting import Naps

__all__ = ["ARENA_ENV", "Arena", "NEVER"]

ARENA_ENV = "HPCBSP_ELEMENTS_TRANSPORT"
NEVER = -1  # a vote that switches the arena off on every rank
_CHUNK = 1 << 20
_SHM = "/dev/shm"


def wanted() -> bool:
    """Whether ``$HPCBSP_ELEMENTS_TRANSPORT`` allows the arena (``auto``, the default); raises
    :class:`~.errors.BadInput` naming the variable for any other value than ``auto`` or
    ``messages`` (:mod:`hpcbsp.util.settings`)."""
    return bool(setting(ARENA_ENV) == "auto")


def _aligned(nbytes: int) -> int:
    return -(-nbytes // 8) * 8


class Arena:
    """This rank's view of the shared window of packed element records (see the module
    docstring).  ``allowed``: this rank may use it (the environment says ``auto`` and its
    exchanges are unbounded); the ranks agree through their votes.  ``one_node``: every rank of
    ``comm`` shares one node (:attr:`.nodes.Nodes.one_node`, the same on every rank): only then
    may a window exist.  ``wait``: the context's wait mode, how :meth:`close` pauses between
    its polls (:class:`.waiting.Naps`)."""

    def __init__(self, comm: MPI.Comm, allowed: bool, one_node: bool, wait: str = "spin"):
        self._comm = comm
        self._me = comm.Get_rank()
        self._allowed = allowed
        self._one_node = one_node
        self._wait = wait
        self._state = "unknown"  # -> "node" (all on one node: a window may exist) or "off" for good
        self._win: MPI.Win | None = None
        self._segments: list[np.ndarray] = []  # every rank's segment, as uint8
        self._half_bytes = 0
        self._half = 0  # the half this superstep packs into
        self._used = 0  # bytes of it taken this superstep
        self._asked = 0  # bytes asked this superstep (taken or not)
        self._refused = 0  # the largest vote /dev/shm had no room for: not tried again below it
        #: How many records this rank announced by their place in the arena (for diagnostics).
        self.announced = 0

    @property
    def half_bytes(self) -> int:
        """The size of one half of each rank's segment (0: no window yet)."""
        return self._half_bytes

    @property
    def active(self) -> bool:
        return self._state != "off"

    def vote(self) -> int:
        """This superstep's vote: the bytes its records asked for, or :data:`NEVER`."""
        return self._asked if self._allowed and self._state != "off" else NEVER

    def take(self, nbytes: int) -> np.ndarray | None:
        """``nbytes`` of this rank's current half for a packed record, or None if they do not fit."""
        if not self._allowed or self._state == "off":
            return None
        self._asked += _aligned(nbytes)
        if self._used + nbytes > self._half_bytes:
            return None
        start = self._half * self._half_bytes + self._used
        self._used += _aligned(nbytes)
        return self._segments[self._me][start:start + nbytes]

    def announce(self, record: np.ndarray) -> int | None:
        """Where ``record`` starts in this rank's segment, counted as announced; None if it is
        not in the arena (it then travels as a message)."""
        if self._win is None or not record.size:
            return None
        seg = self._segments[self._me]
        at = record.ctypes.data - seg.ctypes.data
        if not 0 <= at <= seg.nbytes - record.nbytes:
            return None
        self.announced += 1
        return at

    def record(self, rank: int, offset: int, nbytes: int) -> np.ndarray:
        """The ``nbytes`` at ``offset`` of rank ``rank``'s segment (a record it announced)."""
        seg = self._segments[rank] if self._segments else np.empty(0, np.uint8)
        if not 0 <= offset <= offset + nbytes <= seg.size:
            raise ValueError(f"rank {self._me}: a record announced by rank {rank} at bytes {offset}.."
                             f"{offset + nbytes} lies outside its arena segment of {seg.size} bytes")
        return seg[offset:offset + nbytes]

    def sync(self) -> None:
        """Order this rank's stores and loads of the window against its messages."""
        if self._win is not None:
            self._win.Sync()

    def end_superstep(self) -> None:
        """This rank's exchange of a superstep that asked for room is over: the next superstep
        packs into the other half (the outbox calls it only then)."""
        self._half ^= 1
        self._used = self._asked = 0

    def settle(self, votes: list[int], collective: bool = True) -> None:
        """After an exchange with messages: every rank passes the same ``votes`` (every rank's
        :meth:`vote` of the superstep) and takes the same decision.  Collective, unless not
        ``collective`` (a bounded exchange, which votes :data:`NEVER`): then it only stops
        using the arena, and the window waits for :meth:`close`."""
        if self._state == "off":
            return
        if min(votes) < 0:
            self._state = "off"
            if collective and self._win is not None:
                self._comm.Barrier()  # every record in the window has been applied
                self._free()
            return
        need = max(votes)
        if not collective or need <= self._half_bytes or need <= self._refused:
            return
        if self._state == "unknown":
            self._state = "node" if self._one_node else "off"
            if self._state == "off":
                return
        half = -(-(need + need // 4) // _CHUNK) * _CHUNK
        total = 2 * half * self._comm.Get_size()  # every rank's segment, all on this node
        try:
            st = os.statvfs(_SHM)
            room = st.f_bavail * st.f_frsize >= 2 * total  # leave as much again for everything else
        except OSError:
            room = False
        if not self._comm.allreduce(room, op=MPI.LAND):
            self._refused = need  # records keep travelling as messages; tried again for a larger batch
            return
        self._comm.Barrier()  # every record in the old window has been applied
        self._free()
        win = MPI.Win.Allocate_shared(2 * half, 1, comm=self._comm)  # type: ignore[arg-type]
        win.Lock_all()
        self._segments = [np.frombuffer(win.Shared_query(r)[0], dtype=np.uint8)  # type: ignore[call-overload]
                          for r in range(self._comm.Get_size())]
        self._win, self._half_bytes = win, half

    def close(self, grace: float | None = None) -> None:
        """Stop using the arena and release its window.  With ``grace`` (seconds; when the
        ranks agreed to leave the context together) the ranks first meet in a non-blocking
        barrier bounded by it, and free the window (a collective call) only if every rank came.
        Otherwise (a failure, or a rank that raised after the agreement) the window is left to
        the end of the process, as freeing it could wait for ranks that never come."""
        win, self._win, self._segments, self._half_bytes, self._state = self._win, None, [], 0, "off"
        if win is None or grace is None:
            return
        req = self._comm.Ibarrier()
        if poll(lambda: True if req.Test() else None, until=time.monotonic() + grace, pause=Naps(self._wait),
                patience=64):
            win.Unlock_all()
            win.Free()

    def _free(self) -> None:
        self._segments, self._half_bytes = [], 0
        if self._win is not None:
            self._win.Unlock_all()
            self._win.Free()
            self._win = None
