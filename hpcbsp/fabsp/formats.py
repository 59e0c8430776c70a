"""Record formats of FA-BSP mailboxes: how a send's records are laid out, buffered and handed over.

A mailbox composes one format with its routing's relay (:mod:`.relay`); the relay's address
fields (none for direct routing) are part of the format's wire layout, and the relay reads and
fills them through :meth:`addresses`.  Two formats, one interface (:class:`RecordFormat`):

* :class:`Fixed`: records of one numpy dtype.  A batch is a 1-D array of wire records: the
  records themselves, or with address fields an envelope ``(to, [from,] rec)`` (4 or 8 bytes
  more); buffers of ``buffer`` wire records (:class:`~.aggregation.Aggregator`, whose compiled
  porter fills them from a send to many destinations).
* :class:`Ragged`: variable-size records, a 1-D array of the dtype of any length each.  A batch
  is ``(heads, values)`` (:mod:`.ragged`: a head is the record's length and its address fields,
  8 bytes direct, 16 routed); messages of up to ``buffer`` values' bytes, never splitting a
  record (:class:`~.ragged.RaggedAggregator`).

No MPI in here.
"""
from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from ..runtime.errors import UsageError
from ..runtime.records import as_records, check_pids
from .aggregation import Aggregator, Buffers, take_rows
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
        address fields still to fill, ``owned`` if it is a fresh array the buffers may keep."""

    def size(self, batch: Any) -> int:
        """Records in a batch."""

    def addresses(self, batch: Any) -> np.ndarray:
        """The structured array that holds a batch's address fields (one row per record)."""

    def take(self, batch: Any, index: np.ndarray) -> Any:
        """The records ``index`` of a batch, in that order, as a new batch."""

    def concat(self, batches: list[Any]) -> Any:
        """Batches as one, in order."""

    def handler_args(self, batch: Any) -> tuple[np.ndarray, ...]:
        """What the handler gets of a batch (before the source)."""

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

    def check_buffer(self, buffer: int, where: str) -> None:
        pass  # one record always fits

    def buffers(self, nprocs: int, buffer: int) -> Aggregator:
        return Aggregator(nprocs, self.wire, buffer)

    def outgoing(self, pid: int | np.ndarray, records: object, lengths: object, nprocs: int, me: int,
                 where: str, call: str) -> tuple[int, int | np.ndarray, np.ndarray, bool]:
        recs = as_records(records, self.dtype, where)
        if lengths is not None:
            raise UsageError(f"{where}: lengths= is for ragged mailboxes (bsp.mailbox(..., ragged=True))")
        n = recs.shape[0]
        dests = check_pids(pid, nprocs, n, me, call)
        if self._bare:
            return n, dests, recs, False
        env = np.empty(n, dtype=self.wire)
        env["rec"] = recs
        return n, dests, env, True

    def size(self, batch: np.ndarray) -> int:
        return batch.shape[0]

    def addresses(self, batch: np.ndarray) -> np.ndarray:
        return batch

    def take(self, batch: np.ndarray, index: np.ndarray) -> np.ndarray:
        return take_rows(batch, index)

    def concat(self, batches: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(batches)

    def handler_args(self, batch: np.ndarray) -> tuple[np.ndarray, ...]:
        return (batch,) if self._bare else (np.ascontiguousarray(batch["rec"]),)

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
        return lens.size, dests, (heads, values), False

    def size(self, batch: tuple[np.ndarray, np.ndarray]) -> int:
        return batch[0].size

    def addresses(self, batch: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        return batch[0]

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
