"""Record formats of FA-BSP mailboxes: how a send's records are laid out, buffered and handed over.

A mailbox composes one format with its routing's relay (:mod:`.relay`); the relay's address
fields (none for direct routing) are part of the format's wire layout: the format fills them
when a send's records are laid out (``to`` the destination, ``from`` this rank) and splits an
arrived batch by them (:meth:`~RecordFormat.split`), for the relay.  Two formats, one interface
(:class:`RecordFormat`):

* :class:`Fixed`: records of one numpy dtype.  A batch is a 1-D array of wire records: the
  records themselves, or with address fields an envelope ``(to, [from,] rec)`` (4 or 8 bytes
  more); buffers of ``buffer`` wire records (:class:`~.aggregation.Aggregator`, whose compiled
  porter fills them from a send to many destinations).  Envelopes are made and split by compiled
  passes (:mod:`hpcbsp.kernels.envelopes`): a send's records are wrapped as the porter appends
  them (:class:`~.aggregation.Unwrapped`), an arrived batch is split in one pass that moves this
  rank's records, bare, within the message itself; no Python and no numpy structured-field copy
  per record, whether a rank sends, relays or receives.
* :class:`Ragged`: variable-size records, a 1-D array of the dtype of any length each.  A batch
  is ``(heads, values)`` (:mod:`.ragged`: a head is the record's length and its address fields,
  8 bytes direct, 16 routed); messages of up to ``buffer`` values' bytes, never splitting a
  record (:class:`~.ragged.RaggedAggregator`).

No MPI in here.
"""
from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from ..kernels.envelopes import Scratch, split_envelopes
from ..runtime.api.records import as_records, check_pids
from ..runtime.errors import UsageError
from .aggregation import Aggregator, Buffers, Unwrapped, take_rows
from .ragged import WORD, RaggedAggregator, check_lengths, count_records, gather_records, head_dtype, unpack


class RecordFormat(Protocol):
    """What a mailbox uses of its record format."""

    #: The user's record dtype.
    dtype: np.dtype
    #: Bytes of one unit of the mailbox's ``buffer``, and what a unit is ("records", "values").
    unit: int
    units: str

    def check_buffer(self, buffer: int, where: str) -> None:
        """Refuse (:class:`UsageError`) a ``buffer`` too small for a message of one record."""

    def buffers(self, nprocs: int, buffer: int) -> Buffers:
        """Per-destination buffers of ``buffer`` units for ``nprocs`` ranks."""

    def outgoing(self, pid: int | np.ndarray, records: object, lengths: object, nprocs: int, me: int,
                 where: str, call: str) -> tuple[int, int | np.ndarray, Any, bool]:
        """A ``send``'s arguments checked (:class:`UsageError` naming ``where``, ``call`` for a
        pid): ``(n, dests, batch, owned)``, the batch of ``n`` records in wire layout with its
        address fields filled (``to``: the destination, ``from``: ``me``; or records that the
        buffers wrap as they take them, :class:`~.aggregation.Unwrapped`), ``owned`` if it is
        a fresh array the buffers may keep."""

    def size(self, batch: Any) -> int:
        """Records in a batch."""

    def split(self, batch: Any, me: int, hops: np.ndarray) -> tuple[Any, np.ndarray | None, Any, np.ndarray | None]:
        """An arrived batch with address fields split, in arrival order: ``(here, origins,
        passing, next_hops)``: the records for ``me`` as a delivered batch (for
        :meth:`handler_args` and :meth:`take`; None if none) and their ``from`` (None if not
        carried), the wire records for other ranks (None if none) and ``hops[to]`` of each."""

    def take(self, batch: Any, index: np.ndarray) -> Any:
        """The records ``index`` of a batch, in that order, as a new batch."""

    def concat(self, batches: list[Any]) -> Any:
        """Batches as one, in order."""

    def handler_args(self, batch: Any) -> tuple[np.ndarray, ...]:
        """What the handler gets of a delivered batch (before the source)."""

    def decode(self, raw: np.ndarray) -> tuple[Any, int]:
        """A message's batch (views of ``raw``) and its number of records."""

    def count(self, msg: np.ndarray) -> int:
        """Records in an outgoing message."""


class Fixed:
    """Records of ``dtype``; ``fields``: the relay's address fields (an envelope if any)."""

    units = "records"

    def __init__(self, dtype: np.dtype, fields: list[tuple[str, Any]]):
        self.dtype = dtype
        self._bare = not fields
        #: What travels: the records, or their envelopes.
        self.wire = dtype if self._bare else np.dtype(fields + [("rec", dtype)])
        self.unit = self.wire.itemsize
        self._scratch = Scratch()  # for what passes through this rank (split)

    def check_buffer(self, buffer: int, where: str) -> None:
        pass  # one record always fits

    def buffers(self, nprocs: int, buffer: int) -> Aggregator:
        return Aggregator(nprocs, self.wire, buffer)

    def outgoing(self, pid: int | np.ndarray, records: object, lengths: object, nprocs: int, me: int,
                 where: str, call: str) -> tuple[int, int | np.ndarray, np.ndarray | Unwrapped, bool]:
        recs = as_records(records, self.dtype, where)
        if lengths is not None:
            raise UsageError(f"{where}: lengths= is for ragged mailboxes (bsp.mailbox(..., ragged=True))")
        n = recs.shape[0]
        dests = check_pids(pid, nprocs, n, me, call)
        if self._bare:
            return n, dests, recs, False
        # Wrapped as the buffers take them (one pass), or at once for one destination.
        batch = Unwrapped(np.ascontiguousarray(recs), dests, me, self.wire)
        return n, dests, (batch.wrapped() if isinstance(dests, int) else batch), True

    def size(self, batch: np.ndarray) -> int:
        return batch.shape[0]

    def split(self, batch: np.ndarray, me: int, hops: np.ndarray
              ) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None, np.ndarray | None]:
        # What passes on lies in scratch memory reused by the next split: the buffers copy it
        # (passing records always go through Aggregator.append: their next hops are an array).
        here, origins, passing, next_hops = split_envelopes(batch, me, hops, self.dtype, self._scratch)
        if not passing.shape[0]:
            return (here if here.shape[0] else None), origins, None, None
        return (here if here.shape[0] else None), origins, passing, next_hops

    def take(self, batch: np.ndarray, index: np.ndarray) -> np.ndarray:
        return take_rows(batch, index)

    def concat(self, batches: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(batches)

    def handler_args(self, batch: np.ndarray) -> tuple[np.ndarray, ...]:
        return (batch,)  # delivered records are bare (split took them out of their envelopes)

    def decode(self, raw: np.ndarray) -> tuple[np.ndarray, int]:
        recs = raw.view(self.wire)
        return recs, recs.shape[0]

    def count(self, msg: np.ndarray) -> int:
        return msg.shape[0]


class Ragged:
    """Variable-size records of ``dtype``; ``fields``: the relay's address fields (in each
    record's head)."""

    units = "values"

    def __init__(self, dtype: np.dtype, fields: list[tuple[str, Any]]):
        self.dtype = dtype
        self.head = head_dtype(fields)
        self._addressed = "to" in dict(fields)
        self._with_source = "from" in dict(fields)
        self.unit = dtype.itemsize
        self._limit = 0  # the most values of one record (check_buffer sets it)

    def check_buffer(self, buffer: int, where: str) -> None:
        overhead = WORD + self.head.itemsize
        itemsize = self.dtype.itemsize
        if buffer * itemsize < overhead + itemsize:
            raise UsageError(f"{where}: buffer={buffer} is too small for a ragged mailbox: a message "
                             f"needs {overhead} bytes besides a record's values "
                             f"(at least {-(-overhead // itemsize) + 1} values of {self.dtype})")
        self._limit = (buffer * itemsize - overhead) // itemsize

    def buffers(self, nprocs: int, buffer: int) -> RaggedAggregator:
        return RaggedAggregator(nprocs, self.head, self.dtype, buffer * self.dtype.itemsize)

    def outgoing(self, pid: int | np.ndarray, records: object, lengths: object, nprocs: int, me: int,
                 where: str, call: str) -> tuple[int, int | np.ndarray, tuple[np.ndarray, np.ndarray], bool]:
        values = as_records(records, self.dtype, where)
        if lengths is None and np.ndim(pid) != 0:
            raise UsageError(f"{where}: without lengths= the array is one record, for one pid; "
                             "give lengths= to send several records")
        lens = check_lengths(lengths, values.size, self._limit, where)
        dests = check_pids(pid, nprocs, lens.size, me, call)
        heads = np.zeros(lens.size, dtype=self.head)  # (zeros: no stray bytes in the padding)
        heads["len"] = lens
        if self._addressed:
            heads["to"] = dests
        if self._with_source:
            heads["from"] = me
        return lens.size, dests, (heads, values), False

    def size(self, batch: tuple[np.ndarray, np.ndarray]) -> int:
        return batch[0].size

    def split(self, batch: tuple[np.ndarray, np.ndarray], me: int, hops: np.ndarray
              ) -> tuple[Any, np.ndarray | None, Any, np.ndarray | None]:
        # Numpy passes over the heads (a ragged batch has few records for its bytes).
        to = batch[0]["to"]
        if not to.size:
            return None, None, None, None
        mine = to == me
        if mine.all():
            here, passing, next_hops = batch, None, None
        elif not mine.any():
            return None, None, batch, hops[to]
        else:
            away = np.flatnonzero(~mine)
            here, passing, next_hops = self.take(batch, np.flatnonzero(mine)), self.take(batch, away), hops[to[away]]
        origins = here[0]["from"] if self._with_source else None
        return here, origins, passing, next_hops

    def take(self, batch: tuple[np.ndarray, np.ndarray], index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return gather_records(batch[0], batch[1], index)

    def concat(self, batches: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
        return np.concatenate([b[0] for b in batches]), np.concatenate([b[1] for b in batches])

    def handler_args(self, batch: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, ...]:
        heads, values = batch
        return values, np.ascontiguousarray(heads["len"])

    def decode(self, raw: np.ndarray) -> tuple[tuple[np.ndarray, np.ndarray], int]:
        batch = unpack(raw, self.head, self.dtype)
        return batch, batch[0].size

    def count(self, msg: np.ndarray) -> int:
        return count_records(msg)
