"""How the exchange's point-to-point messages end: their tags, and the wait for a set of
requests, blocking (``Waitall``) or, in a bounded exchange, polled up to a deadline, after which
:class:`ExchangeTimeout` names a peer that did not take part; between idle polls it pauses as the
context's wait mode says (:class:`..waiting.Naps`, the one rule).  h-relation: none of its own."""
from __future__ import annotations

from mpi4py import MPI

from ....util.waiting import poll
from ..waiting import Naps

#: The tags of the exchange's messages: the header round (:mod:`.headers`), the replies to gets
#: (:mod:`.apply`), large payloads sent as messages (:mod:`.large`), the counts of a
#: bounded exchange (:mod:`.counts`), and the sparse consensus's (:mod:`.consensus`).
TAG_DATA = 101
TAG_REPLY = 102
TAG_LARGE = 103
TAG_COUNT = 104
TAG_SPARSE = 105


class ExchangeTimeout(Exception):
    """A bounded exchange passed its deadline; ``rank`` is a peer a message from or to which had
    not completed (the lowest such rank).  The superstep turns it into a
    :class:`~.errors.SyncTimeout` that names the rank and its host."""

    def __init__(self, rank: int, waiting: int):
        super().__init__(f"rank {rank} (and {waiting - 1} more messages)" if waiting > 1 else f"rank {rank}")
        self.rank = rank
        self.waiting = waiting


def complete(reqs: list[MPI.Request], peers: list[int], deadline: float | None, wait: str) -> None:
    """Wait for ``reqs`` (``peers[i]`` is the rank at the other end of ``reqs[i]``); with a
    ``deadline`` (``time.monotonic()``), poll, pausing as the wait mode ``wait`` says, and raise
    :class:`ExchangeTimeout` on expiry."""
    if deadline is None:
        MPI.Request.Waitall(reqs)
        return

    def expired() -> ExchangeTimeout:
        stuck = [peer for req, peer in zip(reqs, peers) if not req.Test()]
        return ExchangeTimeout(min(stuck) if stuck else -1, len(stuck))

    poll(lambda: True if MPI.Request.Testall(reqs) else None, deadline=deadline, expired=expired,
         pause=Naps(wait), patience=64)
