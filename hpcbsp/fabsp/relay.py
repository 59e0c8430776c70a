"""How a mailbox's records move from hop to hop on one rank: bare, or in envelopes.

A mailbox composes its routing's relay (:meth:`.routing.Routing.relay`) with its record format
(:mod:`.formats`); the relay decides where records go and what arrived for whom, the format
how records are laid out.  Both relays offer the same three things:

* ``fields``: the address fields a record carries besides its data;
* ``outgoing(fmt, batch, dests)``: the next hops of a batch about to be sent (an int if one
  for all), whose address fields the format filled when it laid the records out;
* ``arrived(fmt, batch, source)``: splits a received batch into ``deliveries`` (the handler's
  arguments, with their origin) and records passing through, with their next hops.

:class:`Straight` (direct routing): every next hop is the destination, so records carry no
address; all that arrives is for this rank, from the MPI source.  :class:`Relay` (any routing
through other ranks): each record carries its final destination ``to`` (int32) and, when the
handler takes the source, its origin ``from`` (int32); a rank hands the records addressed to it
to the handler and passes the others on.  The format splits a batch (:meth:`.formats.Fixed.split`:
one compiled pass, :mod:`hpcbsp.kernels.envelopes`, for fixed-size records; numpy passes over
the heads for ragged ones), so relaying a batch costs no Python per record.  Envelopes keep
their relative order on the way to each next hop; with the route fixed per (source,
destination) this keeps per-pair FIFO order end to end.  No MPI in here.
"""
from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from ..kernels import group_by_dest
from ..runtime.api.records import destination_slices

#: Address fields of a record travelling through other ranks: its destination and origin.
TO = ("to", np.int32)
FROM = ("from", np.int32)

#: The handler's calls of an arrived batch: ``(arguments, origin)`` (origin -1: not carried).
Deliveries = list[tuple[tuple[np.ndarray, ...], int]]


class Addressed(Protocol):
    """What a relay needs of a record format (:mod:`.formats`): an arrived batch split by its
    address fields, a selection of delivered records, the handler's arguments."""

    def split(self, batch: Any, me: int, hops: np.ndarray) -> tuple[Any, np.ndarray | None, Any, np.ndarray | None]: ...

    def take(self, batch: Any, index: np.ndarray) -> Any: ...

    def handler_args(self, batch: Any) -> tuple[np.ndarray, ...]: ...


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
        return [(fmt.handler_args(batch), source)], None, None


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
        """The next hops of ``batch`` (record i to ``dests`` or ``dests[i]``, checked ranks, its
        address fields filled by the format): an int if one for all; this rank for its own."""
        if isinstance(dests, int):
            return int(self.hops[dests])
        return dests if self._all_next else self.hops[dests]

    def arrived(self, fmt: Addressed, batch: Any, source: int) -> tuple[Deliveries, Any, np.ndarray | None]:
        """``(deliveries, passing, their next hops)`` of an arrived batch, each in arrival order
        (``passing`` None if nothing passes).  With the source, one delivery per origin in
        ascending rank; else one for all (origin -1)."""
        here, origins, passing, hops = fmt.split(batch, self.me, self.hops)
        return ([] if here is None else self._by_origin(fmt, here, origins)), passing, hops

    def _by_origin(self, fmt: Addressed, here: Any, origins: np.ndarray | None) -> Deliveries:
        if not self._with_source or origins is None:
            return [(fmt.handler_args(here), -1)]
        first = int(origins[0])
        if (origins == first).all():
            return [(fmt.handler_args(here), first)]
        perm, counts = group_by_dest(origins, self.nprocs)  # stable: arrival order per origin
        return [(fmt.handler_args(fmt.take(here, perm[start:stop])), src)
                for src, start, stop in destination_slices(counts)]
