"""Variable-size records of a ragged mailbox: the message format and the per-destination buffers.

A ragged mailbox's record is a 1-D array of its dtype of any length (zero included).  A batch of
records travels as ``(values, lengths)``: their values concatenated and the length of each.  One
message is::

    n (int64) | lengths (n x int64) | values (sum(lengths) x itemsize bytes)

so a record costs ``8 + length * itemsize`` bytes on the wire.  :class:`RaggedAggregator` keeps,
per destination, the records not sent yet and hands out a message as soon as they reach the
mailbox's ``capacity`` bytes, cutting only between records (a record is never split; one larger
than ``capacity - 16`` bytes is refused at the send by :func:`group_ragged`, which also checks
and groups a send's arguments).  Order is kept per destination.  No MPI in here: the mailbox
ships what :meth:`RaggedAggregator.add` and :meth:`RaggedAggregator.drain` return.
"""
from __future__ import annotations

from typing import Iterator

import numpy as np

from ..kernels import group_by_dest
from ..runtime.errors import UsageError
from ..runtime.records import check_pids, destination_slices

#: Bytes of the record count at the head of a message, and of each record's length.
WORD = 8


def pack(lengths: np.ndarray, values: np.ndarray) -> np.ndarray:
    """One message (uint8) of the records ``(values, lengths)``."""
    n = lengths.size
    head = WORD * (n + 1)
    msg = np.empty(head + values.nbytes, dtype=np.uint8)
    msg[:WORD].view(np.int64)[0] = n
    msg[WORD:head].view(np.int64)[:] = lengths
    msg[head:] = np.ascontiguousarray(values).view(np.uint8).reshape(-1)
    return msg


def unpack(raw: np.ndarray, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """``(values, lengths)`` of a message made by :func:`pack` (views of ``raw``)."""
    n = count_records(raw)
    head = WORD * (n + 1)
    return raw[head:].view(dtype), raw[WORD:head].view(np.int64)


def count_records(raw: np.ndarray) -> int:
    """The number of records in a message."""
    return int(raw[:WORD].view(np.int64)[0])


def gather_records(values: np.ndarray, lengths: np.ndarray, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The records in ``order`` (indices of records), as a new ``(values, lengths)``."""
    starts = np.cumsum(lengths) - lengths
    lens = lengths[order]
    total = int(lens.sum())
    if total == 0:
        return values[:0].copy(), lens
    # Element j of the output record k comes from starts[order[k]] + j.
    out_starts = np.cumsum(lens) - lens
    index = np.repeat(starts[order] - out_starts, lens) + np.arange(total)
    return values[index], lens


def group_ragged(pid: int | np.ndarray, values: np.ndarray, lengths: object, limit: int, nprocs: int,
                 me: int, where: str, call: str) -> tuple[int, list[tuple[int, np.ndarray, np.ndarray]]]:
    """A ragged ``send``'s arguments checked and its records grouped by destination.

    ``values``: the records' values (1-D, the mailbox's dtype); ``lengths``: one per record, or
    None for one record of all of ``values`` (then ``pid`` must be an int); ``limit``: the most
    values a record may have.  Returns ``(records, [(dest, values, lengths), ...])`` in
    ascending destination, record order kept within one, every array fresh (the caller's may
    change).  Raises :class:`UsageError` (``where``: the rank and call; ``call`` for the pid
    check) before anything is sent.
    """
    if lengths is None:
        if np.ndim(pid) != 0:
            raise UsageError(f"{where}: without lengths= the array is one record, for one pid; "
                             "give lengths= to send several records")
        lens = np.array([values.size], dtype=np.int64)
    else:
        lens = np.asarray(lengths)
        if lens.ndim != 1 or lens.dtype.kind not in "iu" or (lens.size and int(lens.min()) < 0):
            raise UsageError(f"{where}: lengths must be a 1-D array of non-negative integers, "
                             f"got {lens.dtype} of shape {lens.shape}")
        lens = lens.astype(np.int64)
        if int(lens.sum()) != values.size:
            raise UsageError(f"{where}: lengths add up to {int(lens.sum())} but {values.size} "
                             "values were given")
    if lens.size and int(lens.max()) > limit:
        raise UsageError(f"{where}: a record of {int(lens.max())} values is larger than the "
                         f"mailbox's buffer allows ({limit} values); create it with a larger "
                         "buffer=")
    dests = check_pids(pid, nprocs, lens.size, me, call)
    if isinstance(dests, int):
        return lens.size, [(dests, values.copy(), lens)]
    perm, counts = group_by_dest(dests, nprocs)
    vals, lns = gather_records(values, lens, perm)
    ends = np.cumsum(lns)
    groups = []
    for dest, start, stop in destination_slices(counts):
        v0 = int(ends[start - 1]) if start else 0
        groups.append((dest, vals[v0:int(ends[stop - 1])], lns[start:stop]))
    return lens.size, groups


class RaggedAggregator:
    """Per-destination records of ``dtype`` for ``nprocs`` ranks, in messages of up to
    ``capacity`` bytes (the same interface as :class:`~.aggregation.Aggregator`)."""

    def __init__(self, nprocs: int, dtype: np.dtype, capacity: int):
        self.capacity = capacity
        self.dtype = dtype
        self._lengths: list[list[np.ndarray]] = [[] for _ in range(nprocs)]
        self._values: list[list[np.ndarray]] = [[] for _ in range(nprocs)]
        self._bytes = [0] * nprocs
        self._count = [0] * nprocs
        self._partial = 0
        #: Records added but not yet handed out, over all destinations.
        self.nbuffered = 0
        #: The most destinations holding records at once (as buffers of up to ``capacity``).
        self.peak_buffers = 0

    def add(self, dest: int, values: np.ndarray, lengths: np.ndarray) -> list[np.ndarray]:
        """Append the records ``(values, lengths)`` for ``dest``; return the messages that filled.

        The arrays are kept until they leave (the caller must not change them)."""
        n = lengths.size
        if not n:
            return []
        if not self._count[dest]:
            self._partial += 1
            self.peak_buffers = max(self.peak_buffers, self._partial)
        self._lengths[dest].append(lengths)
        self._values[dest].append(values)
        self._bytes[dest] += WORD * n + values.nbytes
        self._count[dest] += n
        self.nbuffered += n
        if self._bytes[dest] + WORD < self.capacity:
            return []
        lens = np.concatenate(self._lengths[dest])
        vals = np.concatenate(self._values[dest])
        cost = np.cumsum(WORD + lens * self.dtype.itemsize)   # bytes up to each record
        ends = np.cumsum(lens)
        out: list[np.ndarray] = []
        first, spent = 0, 0
        while int(cost[-1]) - spent + WORD >= self.capacity:
            # As many records as fit in one message after the count word (at least one).
            last = max(first + 1, int(np.searchsorted(cost, spent + self.capacity - WORD, side="right")))
            v0 = int(ends[first - 1]) if first else 0
            out.append(pack(lens[first:last], vals[v0:int(ends[last - 1])]))
            spent = int(cost[last - 1])
            first = last
            if first == lens.size:
                break
        left = lens.size - first
        self.nbuffered -= self._count[dest] - left
        self._count[dest] = left
        if left:
            v0 = int(ends[first - 1]) if first else 0
            self._lengths[dest] = [lens[first:]]
            self._values[dest] = [vals[v0:]]
            self._bytes[dest] = int(cost[-1]) - spent
        else:
            self._lengths[dest], self._values[dest], self._bytes[dest] = [], [], 0
            self._partial -= 1
        return out

    def drain(self) -> Iterator[tuple[int, np.ndarray]]:
        """Hand out every destination's records not sent yet, one message each."""
        for dest, n in enumerate(self._count):
            if n:
                msg = pack(np.concatenate(self._lengths[dest]), np.concatenate(self._values[dest]))
                self._lengths[dest], self._values[dest], self._bytes[dest] = [], [], 0
                self._count[dest] = 0
                self._partial -= 1
                self.nbuffered -= n
                yield dest, msg

    def recycle(self, msg: np.ndarray) -> None:
        """Messages are made to measure: nothing to reuse."""
