"""Variable-size records of a ragged mailbox: their message layout and per-destination buffers.

A ragged mailbox's record is a 1-D array of its dtype of any length (zero included) with a
*head*: its length ``len`` (int64) and the address fields its relay needs (:mod:`.relay`: none
for direct routing; ``to``, and ``from`` with the source, int32 each, through other ranks),
padded to a multiple of 8 bytes (:func:`head_dtype`: 8 bytes direct, 16 routed).  A batch of
records is ``(heads, values)``: their heads and their values concatenated.  One message is::

    n (int64) | heads (n x head size) | values (sum(len) x itemsize bytes)

so a record costs its head plus ``len * itemsize`` bytes on the wire, and the values start
8-byte aligned.  :class:`RaggedAggregator` keeps, per destination, the records not sent yet and
hands out a message as soon as they reach the mailbox's ``capacity`` bytes, cutting only between
records (a record is never split; the format refuses one larger than a message can hold at the
send).  Order is kept per destination.  No MPI in here: the mailbox ships what
:meth:`RaggedAggregator.put`, :meth:`~RaggedAggregator.take` and :meth:`~RaggedAggregator.drain`
hand out.
"""
from __future__ import annotations

from typing import Any, Iterator

import numpy as np

from ..kernels import group_by_dest
from ..runtime.api.records import destination_slices
from ..runtime.errors import UsageError
from .aggregation import take_rows

#: Bytes of the record count at the head of a message.
WORD = 8

#: A batch of ragged records: their heads and their values concatenated.
Batch = tuple[np.ndarray, np.ndarray]


def head_dtype(fields: list[tuple[str, Any]]) -> np.dtype:
    """A record's head: its length, then the relay's address ``fields``, 8-byte aligned."""
    return np.dtype([("len", np.int64)] + fields, align=True)


def pack(heads: np.ndarray, values: np.ndarray) -> np.ndarray:
    """One message (uint8) of the records ``(heads, values)``."""
    head = WORD + heads.nbytes
    msg = np.empty(head + values.nbytes, dtype=np.uint8)
    msg[:WORD].view(np.int64)[0] = heads.size
    msg[WORD:head] = np.ascontiguousarray(heads).view(np.uint8).reshape(-1)
    msg[head:] = np.ascontiguousarray(values).view(np.uint8).reshape(-1)
    return msg


def unpack(raw: np.ndarray, head: np.dtype, dtype: np.dtype) -> Batch:
    """``(heads, values)`` of a message made by :func:`pack` (views of ``raw``)."""
    end = WORD + count_records(raw) * head.itemsize
    return raw[WORD:end].view(head), raw[end:].view(dtype)


def count_records(raw: np.ndarray) -> int:
    """The number of records in a message."""
    return int(raw[:WORD].view(np.int64)[0])


def gather_records(heads: np.ndarray, values: np.ndarray, order: np.ndarray) -> Batch:
    """The records in ``order`` (indices of records), as a new ``(heads, values)``."""
    lengths = heads["len"]
    starts = np.cumsum(lengths) - lengths
    out = take_rows(heads, order)
    lens = out["len"]
    total = int(lens.sum())
    if total == 0:
        return out, values[:0].copy()
    # Element j of the output record k comes from starts[order[k]] + j.
    out_starts = np.cumsum(lens) - lens
    index = np.repeat(starts[order] - out_starts, lens) + np.arange(total)
    return out, values[index]


def check_lengths(lengths: object, nvalues: int, limit: int, where: str) -> np.ndarray:
    """A ragged ``send``'s ``lengths`` (one per record, adding up to ``nvalues``; None: one
    record of all the values) as int64, each at most ``limit``; else :class:`UsageError`."""
    if lengths is None:
        lens = np.array([nvalues], dtype=np.int64)
    else:
        lens = np.asarray(lengths)
        if lens.ndim != 1 or lens.dtype.kind not in "iu" or (lens.size and int(lens.min()) < 0):
            raise UsageError(f"{where}: lengths must be a 1-D array of non-negative integers, "
                             f"got {lens.dtype} of shape {lens.shape}")
        lens = lens.astype(np.int64)
        if int(lens.sum()) != nvalues:
            raise UsageError(f"{where}: lengths add up to {int(lens.sum())} but {nvalues} "
                             "values were given")
    if lens.size and int(lens.max()) > limit:
        raise UsageError(f"{where}: a record of {int(lens.max())} values is larger than the "
                         f"mailbox's buffer allows ({limit} values); create it with a larger "
                         "buffer=")
    return lens


class RaggedAggregator:
    """Per-destination records for ``nprocs`` ranks, with heads of dtype ``head`` and values of
    ``dtype``, in messages of up to ``capacity`` bytes (the :class:`~.aggregation.Buffers`
    interface)."""

    def __init__(self, nprocs: int, head: np.dtype, dtype: np.dtype, capacity: int):
        self.capacity = capacity
        self.nprocs = nprocs
        self.dtype = dtype
        self._heads: list[list[np.ndarray]] = [[] for _ in range(nprocs)]
        self._values: list[list[np.ndarray]] = [[] for _ in range(nprocs)]
        self._head_bytes = head.itemsize
        self._bytes = [0] * nprocs
        self._count = [0] * nprocs
        self._partial = 0
        #: Records added but not yet handed out, over all destinations.
        self.nbuffered = 0
        #: The most destinations holding records at once (as buffers of up to ``capacity``).
        self.peak_buffers = 0

    def put(self, dests: int | np.ndarray, batch: Batch, owned: bool) -> Iterator[tuple[int, np.ndarray]]:
        """Append record i of ``batch`` for ``dests`` or ``dests[i]`` (checked ranks), in order;
        yield ``(dest, message)`` for every message that filled.  ``owned``: the caller gives
        the arrays up (else the values are copied)."""
        heads, values = batch
        if isinstance(dests, int):
            for msg in self.add(dests, heads, values if owned else values.copy()):
                yield dests, msg
            return
        perm, counts = group_by_dest(dests, self.nprocs)
        heads, values = gather_records(heads, values, perm)
        ends = np.cumsum(heads["len"])
        for dest, start, stop in destination_slices(counts):
            v0 = int(ends[start - 1]) if start else 0
            for msg in self.add(dest, heads[start:stop], values[v0:int(ends[stop - 1])]):
                yield dest, msg

    def add(self, dest: int, heads: np.ndarray, values: np.ndarray) -> list[np.ndarray]:
        """Append the records ``(heads, values)`` for ``dest``; return the messages that filled.

        The arrays are kept until they leave (the caller must not change them)."""
        n = heads.size
        if not n:
            return []
        if not self._count[dest]:
            self._partial += 1
            self.peak_buffers = max(self.peak_buffers, self._partial)
        self._heads[dest].append(heads)
        self._values[dest].append(values)
        self._bytes[dest] += heads.nbytes + values.nbytes
        self._count[dest] += n
        self.nbuffered += n
        if self._bytes[dest] + WORD < self.capacity:
            return []
        heads = np.concatenate(self._heads[dest])
        vals = np.concatenate(self._values[dest])
        lens = heads["len"]
        cost = np.cumsum(self._head_bytes + lens * self.dtype.itemsize)   # bytes up to each record
        ends = np.cumsum(lens)
        out: list[np.ndarray] = []
        first, spent = 0, 0
        while int(cost[-1]) - spent + WORD >= self.capacity:
            # As many records as fit in one message after the count word (at least one).
            last = max(first + 1, int(np.searchsorted(cost, spent + self.capacity - WORD, side="right")))
            v0 = int(ends[first - 1]) if first else 0
            out.append(pack(heads[first:last], vals[v0:int(ends[last - 1])]))
            spent = int(cost[last - 1])
            first = last
            if first == heads.size:
                break
        left = heads.size - first
        self.nbuffered -= self._count[dest] - left
        self._count[dest] = left
        if left:
            v0 = int(ends[first - 1]) if first else 0
            self._heads[dest] = [heads[first:]]
            self._values[dest] = [vals[v0:]]
            self._bytes[dest] = int(cost[-1]) - spent
        else:
            self._heads[dest], self._values[dest], self._bytes[dest] = [], [], 0
            self._partial -= 1
        return out

    def take(self, dest: int) -> np.ndarray | None:
        """Hand out ``dest``'s records not sent yet as one message, if it has any."""
        n = self._count[dest]
        if not n:
            return None
        msg = pack(np.concatenate(self._heads[dest]), np.concatenate(self._values[dest]))
        self._heads[dest], self._values[dest], self._bytes[dest] = [], [], 0
        self._count[dest] = 0
        self._partial -= 1
        self.nbuffered -= n
        return msg

    def drain(self) -> Iterator[tuple[int, np.ndarray]]:
        """Hand out every destination's records not sent yet, one message each."""
        for dest in [d for d, n in enumerate(self._count) if n]:
            msg = self.take(dest)
            assert msg is not None
            yield dest, msg

    def recycle(self, msg: np.ndarray) -> None:
        """Messages are made to measure: nothing to reuse."""

