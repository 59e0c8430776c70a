"""toposort's local elimination in C (``kernels/_toposort.pyx``): one rank's rows and columns.

bale's toposort removes, for each row left with one nonzero (the *pivot* of that row's last
column), the column's nonzero from every other row (a *shrink*); a row left with one nonzero
pivots in turn.  Rows and columns are distributed cyclically over ``p`` ranks (global index
``i`` is local index ``i // p`` of rank ``i % p``).  :class:`Elimination` holds one rank's
state and does everything a batch of pivots and shrinks causes on that rank, record by record,
handing back the records other ranks must handle (``hpcbsp.apps.irregular.toposort``).

Records are rows of three int64 whose first field is the key of the rank that handles them
(its owner: ``key % p``): a shrink ``(row, col, level)`` with level >= 0, a pivot ``(col,
level, -1 - row)`` (:func:`pivots`), so that one mailbox (one message per destination and
wave) carries both.  A row's level is the highest level of the shrinks that reached it (0 if
none); a pivot carries its row's level, the shrinks it makes one more.  The result (which row
takes which column, every row's level) does not depend on the order in which batches arrive,
only the work's order does.

Numpy oracle: :func:`hpcbsp.kernels.reference.toposort_settle`, the same elimination a whole
frontier at a time (tests/test_kernels_toposort.py).
"""
from __future__ import annotations

import numpy as np

from ._extensions import MODULES

_EMPTY = np.empty((0, 3), dtype=np.int64)
#: The columns of :attr:`Elimination.rows`, one record per local row.
ROW_FIELDS = ("colsum", "count", "level", "pivot_col")


def _records(recs: np.ndarray | None, what: str) -> np.ndarray:
    """``recs`` (structured records of three int64 fields, or an (n, 3) int64 array) as a
    C-contiguous (n, 3) int64 array."""
    if recs is None:
        return _EMPTY
    if recs.dtype != np.int64:
        names = recs.dtype.names or ()
        if recs.dtype.itemsize != 24 or len(names) != 3 or any(recs.dtype[f] != np.int64 for f in names):
            raise TypeError(f"toposort {what}: records of three int64, not {recs.dtype}")
        recs = np.ascontiguousarray(recs).view(np.int64)
    return np.ascontiguousarray(recs).reshape(-1, 3)


class Elimination:
    """The elimination state of one rank, updated in place (the caller's arrays, shared):
    ``rows``, an (n, 4) int64 array with one record per local row, :data:`ROW_FIELDS` (the sum
    of the columns of its nonzeros left, how many are left, its level, the column it takes once
    ready); ``claimed`` (bool, per row: found ready); the rows of each local column (CSR:
    ``col_ptr`` of length n + 1, ``col_rows`` global rows).  ``p`` ranks, this one ``me``.
    A row's numbers are kept together because every shrink reads and writes three of them at
    a random row: one cache line instead of three."""

    def __init__(self, rows: np.ndarray, claimed: np.ndarray, col_ptr: np.ndarray, col_rows: np.ndarray,
                 p: int, me: int):
        if rows.dtype != np.int64 or rows.ndim != 2 or rows.shape[1] != len(ROW_FIELDS) \
                or not rows.flags.c_contiguous:
            raise TypeError(f"Elimination: rows must be a C-contiguous (n, {len(ROW_FIELDS)}) int64 array")
        n = rows.shape[0]
        for name, a in (("col_ptr", col_ptr), ("col_rows", col_rows)):
            if a.dtype != np.int64 or a.ndim != 1 or not a.flags.c_contiguous:
                raise TypeError(f"Elimination: {name} must be a 1-D C-contiguous int64 array")
        if claimed.dtype != np.bool_ or claimed.shape != (n,) or not claimed.flags.c_contiguous:
            raise TypeError("Elimination: claimed must be a C-contiguous bool array, one per row")
        if col_ptr.shape != (n + 1,) or col_ptr[0] != 0 or col_ptr[-1] != col_rows.size \
                or np.any(np.diff(col_ptr) < 0):
            raise ValueError("Elimination: col_ptr must have one entry per row and one more, rising "
                             "from 0 to len(col_rows)")
        if not 0 <= me < p:
            raise ValueError(f"Elimination: rank {me} of {p}")
        self.rows, self.claimed = rows, claimed.view(np.uint8)
        self.col_ptr, self.col_rows, self.p, self.me = col_ptr, col_rows, p, me
        # Scratch, reused by every call (see settle): enough for a whole valid elimination.
        self._queue = np.empty((n, 3), dtype=np.int64)
        self._out = np.empty((n + col_rows.size, 3), dtype=np.int64)
        self._ready = np.empty(n, dtype=np.int64)

    def settle(self, records: np.ndarray | None) -> np.ndarray:
        """Handle ``records`` (shrinks of this rank's rows and pivots of its columns, mixed),
        and everything they cause here, first in first out, until only other ranks' records are
        left: returns those as a (k, 3) int64 array in the order they were made, valid until
        the next call (copy or send it first).  A pivot passed in for another rank's column is
        handed back as it is.  Raises ``ValueError`` for a record outside this rank's rows or
        columns, or an elimination that pivots a column twice (not a permuted triangular
        matrix); the state is then partly updated."""
        recs = _records(records, "records")
        need = self.rows.shape[0] + recs.shape[0]
        if self._queue.shape[0] < need:  # room for the records passed in too
            self._queue = np.empty((need, 3), dtype=np.int64)
            self._out = np.empty((need + self.col_rows.size, 3), dtype=np.int64)
        n = MODULES["_toposort"].settle(self.rows, self.claimed, self.col_ptr, self.col_rows, self.p, self.me,
                                        recs, self._out, self._queue)
        if n == -2:
            raise ValueError(f"toposort settle: a record outside rank {self.me}'s rows or columns")
        if n < 0:
            raise ValueError("toposort settle: more pivots or shrinks than one elimination makes "
                             "(a column pivoted twice: not a permuted triangular matrix)")
        return self._out[:n]

    def shrink(self, shrinks: np.ndarray | None) -> np.ndarray:
        """Apply ``shrinks`` (of this rank's rows) in order; return the local rows they left
        with one nonzero, not claimed before (claimed now), in the order they became so (a
        view valid until the next call).  Raises ``ValueError`` for a row not of this rank."""
        shr = _records(shrinks, "shrinks")
        n = MODULES["_toposort"].shrink(self.rows, self.claimed, shr, self.p, self._ready)
        if n == -2:
            raise ValueError(f"toposort shrink: a row outside rank {self.me}'s rows")
        if n < 0:
            raise ValueError("toposort shrink: more ready rows than rows")
        return self._ready[:n]


def pivots(cols: np.ndarray, levels: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Pivot records ``(col, level, -1 - row)``: row ``rows[k]`` takes column ``cols[k]`` at
    level ``levels[k]`` (global indices)."""
    out = np.empty((len(cols), 3), dtype=np.int64)
    out[:, 0], out[:, 1], out[:, 2] = cols, levels, -1 - np.asarray(rows)
    return out
