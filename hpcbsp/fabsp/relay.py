"""How a mailbox's records move from hop to hop on one rank: bare, or in envelopes.

A mailbox composes its routing's relay (:meth:`.routing.Routing.relay`) with its record format
(:mod:`.formats`); the relay decides where records go and what arrived for whom, the format
how records are laid out.  Both relays offer the same three things:

* ``fields``: the address fields a record carries besides its data;
* ``outgoing(fmt, batch, dests)``: fills those fields of a batch about to be sent and returns
  its next hops (an int if one for all);
* ``arrived(fmt, batch, source)``: splits a received batch into ``deliveries`` (the handler's
  batches, with their origin) and records passing through, with their next hops.

:class:`Straight` (direct routing): every next hop is the destination, so records carry no
address; all that arrives is for this rank, from the MPI source.  :class:`Relay` (any routing
through other ranks): each record carries its final destination ``to`` (int32) and, when the
handler takes the source, its origin ``from`` (int32); a rank hands the records addressed to it
to the handler and passes the others on.  Envelopes keep their relative order on the way to each
next hop; with the route fixed per (source, destination) this keeps per-pair FIFO order end to
end.  No MPI in here.
"""
from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from ..kernels import group_by_dest
from ..runtime.records import destination_slices

#: Address fields of a record travelling through other ranks: its destination and origin.
TO = ("to", np.int32)
FROM = ("from", np.int32)

#: The handler's batches of an arrived batch: ``(records, origin)`` (origin -1: not carried).
Deliveries = list[tuple[Any, int]]


class Addressed(Protocol):
    """What a relay needs of a record format (:mod:`.formats`): a batch's address fields, a
    selection of its records, its size."""

    def addresses(self, batch: Any) -> np.ndarray: ...

    def take(self, batch: Any, index: np.ndarray) -> Any: ...

    def size(self, batch: Any) -> int: ...


class Straight:
    """Direct routing on rank ``me`` of ``nprocs``: records go bare to their destinations."""

    def __init__(self, me: int, nprocs: int):
        self.me = me
        self.nprocs = nprocs
        self.fields: list[tuple[str, Any]] = []  # records travel bare

    @property
    def peers(self) -> np.ndarray:
        """The ranks this rank sends to: every other one."""
        return np.delete(np.arange(self.nprocs, dtype=np.int64), self.me)

    def outgoing(self, fmt: Addressed, batch: Any, dests: int | np.ndarray) -> int | np.ndarray:
        return dests

    def arrived(self, fmt: Addressed, batch: Any, source: int) -> tuple[Deliveries, Any, np.ndarray | None]:
        return [(batch, source)], None, None


class Relay:
    """Routing through other ranks on rank ``me``, with ``hops[d]`` the next hop to ``d``."""

    def __init__(self, hops: np.ndarray, me: int, with_source: bool):
        self.me = me
        self.nprocs = hops.size
        #: ``hops[d]``: where a record for rank d goes next from this rank.
        self.hops = hops
        self.fields: list[tuple[str, Any]] = [TO, FROM] if with_source else [TO]
        self._with_source = with_source
        #: The ranks this rank sends to (its neighbours), ascending.
        self.peers = np.setdiff1d(np.unique(hops), [me])
        #: Every rank is a neighbour: the next hop is the destination (no gather through hops).
        self._all_next = self.peers.size == self.nprocs - 1

    def outgoing(self, fmt: Addressed, batch: Any, dests: int | np.ndarray) -> int | np.ndarray:
        """Address ``batch`` (record i to ``dests`` or ``dests[i]``, checked ranks); its next
        hops (an int if one for all; this rank for its own)."""
        addr = fmt.addresses(batch)
        addr["to"] = dests
        if self._with_source:
            addr["from"] = self.me
        if isinstance(dests, int):
            return int(self.hops[dests])
        return dests if self._all_next else self.hops[dests]

    def arrived(self, fmt: Addressed, batch: Any, source: int) -> tuple[Deliveries, Any, np.ndarray | None]:
        """``(deliveries, passing, their next hops)`` of an arrived batch, each in arrival order
        (``passing`` None if nothing passes).  With the source, one delivery per origin in
        ascending rank; else one for all (origin -1)."""
        to = fmt.addresses(batch)["to"]
        if not to.size:
            return [], None, None
        mine = to == self.me
        if mine.all():
            here, passing, hops = batch, None, None
        elif not mine.any():
            return [], batch, self.hops[to]
        else:
            away = np.flatnonzero(~mine)
            here, passing, hops = fmt.take(batch, np.flatnonzero(mine)), fmt.take(batch, away), self.hops[to[away]]
        return self._by_origin(fmt, here), passing, hops

    def _by_origin(self, fmt: Addressed, here: Any) -> Deliveries:
        if not self._with_source:
            return [(here, -1)]
        origin = fmt.addresses(here)["from"]
        first = int(origin[0])
        if (origin == first).all():
            return [(here, first)]
        perm, counts = group_by_dest(origin, self.nprocs)  # stable: arrival order per origin
        return [(fmt.take(here, perm[start:stop]), src) for src, start, stop in destination_slices(counts)]

