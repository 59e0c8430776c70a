"""Envelopes of a routed mailbox: records that carry their destination (and source) across hops.

A mailbox routed through a grid (:mod:`.routing`) sends each record to its next hop, not to its
destination, so the record travels in an *envelope*: a structured record ``(to, [from,] rec)``
with the final destination (int32), the origin (int32, only when the handler asks for the
source) and the user's record.  A rank that receives envelopes hands those addressed to it to the
handler and passes the others on to their next hop.  No MPI and no engine in here: the mailbox
ships the envelopes to the next hops that :meth:`Relay.outgoing` and :meth:`Relay.arrived`
give, in order, through its buffers.

Order.  Envelopes keep their relative order on the way to each next hop; with the route fixed
per (source, destination) this keeps per-pair FIFO order end to end.
"""
from __future__ import annotations

from typing import Iterator

import numpy as np

from ..kernels import group_by_dest
from ..runtime.records import destination_slices
from .routing import Grid

#: (next hop, start, stop) slices of an array of envelopes grouped by next hop.
Groups = list[tuple[int, int, int]]


def envelope_dtype(dtype: np.dtype, with_source: bool) -> np.dtype:
    """The wire record of a routed mailbox of ``dtype`` records."""
    fields: list[tuple[str, object]] = [("to", np.int32)]
    if with_source:
        fields.append(("from", np.int32))
    fields.append(("rec", dtype))
    return np.dtype(fields)


def take_records(records: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``records[index]`` for a contiguous 1-D array of any (structured) dtype, as rows of bytes.

    numpy gathers structured records of odd sizes (12, 6 bytes) element by element through its
    generic path, 10x slower than ``np.take`` of the same bytes as rows.
    """
    size = records.dtype.itemsize
    rows = np.ascontiguousarray(records).view(np.uint8).reshape(-1, size)
    return np.take(rows, index, axis=0).view(records.dtype).reshape(-1)


class Relay:
    """Envelopes of one routed mailbox on rank ``me`` of a grid of ``grid.nprocs`` ranks."""

    def __init__(self, grid: Grid, me: int, dtype: np.dtype, with_source: bool):
        self.me = me
        self.nprocs = grid.nprocs
        self.wire = envelope_dtype(dtype, with_source)
        self._with_source = with_source
        #: ``hops[d]``: where a record for rank d goes next from this rank.
        self.hops = grid.next_hops(me)
        #: The ranks this rank sends to (its grid neighbours), ascending.
        self.peers = np.setdiff1d(np.unique(self.hops), [me])
        #: Every rank is a neighbour (a grid of one line): the next hop is the destination.
        self._direct = self.peers.size == self.nprocs - 1

    def outgoing(self, dests: int | np.ndarray, recs: np.ndarray) -> tuple[np.ndarray, int | np.ndarray]:
        """Envelopes for ``recs`` (record i to ``dests`` or ``dests[i]``, checked ranks), in
        order, and the next hop of each (an int if one for all; this rank for its own)."""
        env = np.empty(recs.shape[0], dtype=self.wire)
        if self._with_source:
            env["from"] = self.me
        env["to"] = dests
        env["rec"] = recs
        if isinstance(dests, int):
            return env, int(self.hops[dests])
        return env, (dests if self._direct else self.hops[dests])

    def arrived(self, batch: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Split an arrived batch: ``(for this rank, passing through, their next hops)``, each
        in arrival order (the handler runs on the first at once, so that order per source
        holds)."""
        to = batch["to"]
        mine = to == self.me
        if mine.all():
            return batch, batch[:0], to[:0].astype(np.int64)
        if not mine.any():
            return batch[:0], batch, self.hops[to]
        passing = np.flatnonzero(~mine)
        return (take_records(batch, np.flatnonzero(mine)), take_records(batch, passing),
                self.hops[to[passing]])

    def deliveries(self, mine: np.ndarray) -> Iterator[tuple[np.ndarray, int]]:
        """The handler's batches in ``mine`` (envelopes for this rank): ``(records, origin)``,
        one per origin in ascending rank when the handler takes the source (the origin is -1
        otherwise), each a fresh contiguous array in arrival order."""
        if not mine.size:
            return
        if not self._with_source:
            yield np.ascontiguousarray(mine["rec"]), -1
            return
        origin = mine["from"]
        first = int(origin[0])
        if (origin == first).all():
            yield np.ascontiguousarray(mine["rec"]), first
            return
        perm, counts = group_by_dest(origin, self.nprocs)
        recs = take_records(mine, perm)["rec"]
        for src, start, stop in destination_slices(counts):
            yield recs[start:stop], src
