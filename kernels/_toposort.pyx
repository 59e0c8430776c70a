# cython: language_level=3, boundscheck=False, wraparound=False
"""toposort's local elimination, one record at a time in C (``hpcbsp.kernels.toposort``).

The state of one rank's rows and columns (rows and columns ``me, me + p, ...``, by local index
``i // p``): ``rows``, four int64 per row, ``(colsum, count, level, pivot_col)``: the sum of the
columns of its nonzeros left, how many are left, the highest level of the shrinks that reached
it, the column it takes once ready; ``claimed`` (the row was found ready); and the rows of each
local column as CSR (``col_ptr``, ``col_rows``, global row numbers).  A row's numbers share one
32-byte record because a shrink touches three of them at a random row: one cache line instead
of three (at 100,000 rows a rank, 4 MiB of state, that halved the elimination's time).
Records are rows of three int64, the first field the owner's key: a shrink ``(row, col,
level)`` with level >= 0, a pivot ``(col, level, -1 - row)`` (so one mailbox carries both).
"""
from libc.stdint cimport int64_t

cdef enum:
    COLSUM = 0
    COUNT = 1
    LEVEL = 2
    PIVOT = 3


cdef inline bint _take(int64_t[:, ::1] rows, unsigned char[::1] claimed, int64_t lr, int64_t col,
                       int64_t lvl) noexcept nogil:
    """Take the nonzero in column ``col`` out of local row ``lr``, its level at least ``lvl``;
    True if that left the row with one nonzero, unclaimed (it is claimed now, and its pivot
    column set)."""
    cdef int64_t *row = &rows[lr, 0]
    row[COUNT] -= 1
    row[COLSUM] -= col
    if lvl > row[LEVEL]:
        row[LEVEL] = lvl
    if row[COUNT] == 1 and not claimed[lr]:
        claimed[lr] = 1
        row[PIVOT] = row[COLSUM]
        return True
    return False


def shrink(int64_t[:, ::1] rows, unsigned char[::1] claimed, const int64_t[:, ::1] shrinks, int64_t p,
           int64_t[::1] ready):
    """Apply the shrinks (rows of this rank) in order; the local rows they left with one
    nonzero, unclaimed, go to ``ready`` (claimed now) in the order they became so; returns
    how many; -1 if ``ready`` was too small (one per local row is enough), -2 for a row outside
    ``[0, p * len(rows))`` (the state is then partly updated)."""
    cdef Py_ssize_t k, nready = 0, nrows = rows.shape[0], status = 0
    cdef int64_t lr
    with nogil:
        for k in range(shrinks.shape[0]):
            lr = shrinks[k, 0] // p
            if shrinks[k, 0] < 0 or lr >= nrows:
                status = -2
                break
            if _take(rows, claimed, lr, shrinks[k, 1], shrinks[k, 2]):
                if nready == ready.shape[0]:
                    status = -1
                    break
                ready[nready] = lr
                nready += 1
    return status if status else nready


def settle(int64_t[:, ::1] rows, unsigned char[::1] claimed, const int64_t[::1] col_ptr,
           const int64_t[::1] col_rows, int64_t p, int64_t me, const int64_t[:, ::1] recs,
           int64_t[:, ::1] out, int64_t[:, ::1] queue):
    """Handle ``recs``, shrinks of this rank's rows and pivots of its columns in any mix (a
    shrink ``(row, col, level)``, level >= 0; a pivot ``(col, level, -1 - row)``), and
    everything they cause on this rank, first in first out: a pivot of this rank's column
    shrinks every other row of the column (at the pivot's level + 1), a row left with one
    nonzero pivots its last column (at its level).  Records for other ranks go to ``out`` in the
    order they were made (a pivot passed in for another rank's column too); returns how many,
    -1 if ``queue`` or ``out`` was too small, -2 for a shrink's row, a pivot's column or a
    column's row outside this rank's (the state is then partly updated).  Enough: ``queue`` one
    row per local row plus one per record passed in, ``out`` that plus one per nonzero of this
    rank's columns (each column is pivoted once in a valid elimination)."""
    cdef Py_ssize_t k, head = 0, tail = 0, nout = 0
    cdef Py_ssize_t qcap = queue.shape[0], ocap = out.shape[0], nrows = rows.shape[0]
    cdef int64_t c, r, lv, o, lr, pc
    cdef bint full = False, bad = False
    with nogil:
        for k in range(recs.shape[0]):
            if recs[k, 2] >= 0:        # a shrink; if its row became ready, its pivot
                lr = recs[k, 0] // p
                if recs[k, 0] < 0 or lr >= nrows:
                    bad = True
                    break
                if not _take(rows, claimed, lr, recs[k, 1], recs[k, 2]):
                    continue
                c, lv, r = rows[lr, PIVOT], rows[lr, LEVEL], lr * p + me
            else:                      # a pivot
                c, lv, r = recs[k, 0], recs[k, 1], -1 - recs[k, 2]
            if c < 0:
                bad = True
                break
            if c % p == me:
                if tail == qcap:
                    full = True
                    break
                queue[tail, 0], queue[tail, 1], queue[tail, 2] = c, lv, r
                tail += 1
            else:
                if nout == ocap:
                    full = True
                    break
                out[nout, 0], out[nout, 1], out[nout, 2] = c, lv, -1 - r
                nout += 1
        while head < tail and not (full or bad):
            c, lv, r = queue[head, 0], queue[head, 1] + 1, queue[head, 2]
            head += 1
            if c < 0 or c // p >= nrows:
                bad = True
                break
            for k in range(col_ptr[c // p], col_ptr[c // p + 1]):
                o = col_rows[k]
                if o == r:
                    continue
                if o < 0 or o // p >= nrows and o % p == me:
                    bad = True
                    break
                if o % p != me:        # another rank's row: a shrink for it
                    if nout == ocap:
                        full = True
                        break
                    out[nout, 0], out[nout, 1], out[nout, 2] = o, c, lv
                    nout += 1
                    continue
                lr = o // p
                if not _take(rows, claimed, lr, c, lv):
                    continue
                pc = rows[lr, PIVOT]
                if pc % p == me:
                    if tail == qcap:
                        full = True
                        break
                    queue[tail, 0], queue[tail, 1], queue[tail, 2] = pc, rows[lr, LEVEL], o
                    tail += 1
                else:                  # another rank's column: the row's pivot for it
                    if nout == ocap:
                        full = True
                        break
                    out[nout, 0], out[nout, 1], out[nout, 2] = pc, rows[lr, LEVEL], -1 - o
                    nout += 1
    if bad:
        return -2
    if full:
        return -1
    return nout
