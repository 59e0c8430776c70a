# cython: language_level=3
"""Stable grouping of items by destination rank (a counting sort)."""
import numpy as np
from libc.stdint cimport int64_t, uint32_t, uint64_t
from libc.string cimport memcpy

cdef enum:
    # The items are cut into NPART contiguous parts, counted and placed by one interleaved loop
    # with a counter row per part.  With few ranks, consecutive items mostly share a
    # destination, and a single counter row would make every increment wait for the previous
    # one (a store-to-load chain); NPART rows give NPART independent chains.
    NPART = 4
    # Below this many items the plain two-pass loop is as fast and allocates less.
    MIN_PARTED = 4096


cdef Py_ssize_t _first_bad(const int64_t* dest, Py_ssize_t n, uint64_t nprocs) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        # A negative destination is huge when read as unsigned: one test for both bounds.
        if <uint64_t>dest[i] >= nprocs:
            return i
    return -1


cdef bint _count_parts(const int64_t* dest, Py_ssize_t n, uint64_t nprocs, int64_t* cnt,
                       Py_ssize_t* lo, Py_ssize_t* hi) noexcept nogil:
    """cnt[p * nprocs + d] = items of part p bound for d; False on a bad destination."""
    cdef Py_ssize_t i, p, m = hi[0] - lo[0]
    cdef uint64_t d
    for p in range(1, NPART):
        if hi[p] - lo[p] < m:
            m = hi[p] - lo[p]
    for i in range(m):
        for p in range(NPART):
            d = <uint64_t>dest[lo[p] + i]
            if d >= nprocs:
                return False
            cnt[p * nprocs + d] += 1
    for p in range(NPART):
        for i in range(lo[p] + m, hi[p]):
            d = <uint64_t>dest[i]
            if d >= nprocs:
                return False
            cnt[p * nprocs + d] += 1
    return True


cdef void _place_parts(const int64_t* dest, uint64_t nprocs, int64_t* pos, int64_t* perm,
                       Py_ssize_t* lo, Py_ssize_t* hi) noexcept nogil:
    """perm[pos[p * nprocs + d]++] = i for every item i of part p, parts interleaved."""
    cdef Py_ssize_t i, p, j, m = hi[0] - lo[0]
    for p in range(1, NPART):
        if hi[p] - lo[p] < m:
            m = hi[p] - lo[p]
    for i in range(m):
        for p in range(NPART):
            j = lo[p] + i
            perm[pos[p * nprocs + dest[j]]] = j
            pos[p * nprocs + dest[j]] += 1
    for p in range(NPART):
        for j in range(lo[p] + m, hi[p]):
            perm[pos[p * nprocs + dest[j]]] = j
            pos[p * nprocs + dest[j]] += 1


def group_by_dest(const int64_t[::1] dest, Py_ssize_t nprocs):
    """Stable counting sort of items by destination rank.

    Returns ``(perm, counts)``: ``perm`` lists item indices grouped by ascending destination,
    in their original order within a destination; ``counts[d]`` is the number of items for d.
    Raises ``ValueError`` naming the first destination outside ``[0, nprocs)``.
    """
    if nprocs < 0:
        raise ValueError(f"number of ranks must be >= 0, not {nprocs}")
    cdef Py_ssize_t n = dest.shape[0], i, p, d, bad = -1
    cdef uint64_t up = <uint64_t>nprocs
    cdef int64_t run
    cdef bint ok = True
    cdef Py_ssize_t lo[NPART]
    cdef Py_ssize_t hi[NPART]
    cdef Py_ssize_t parts = NPART if n >= MIN_PARTED else 1
    counts_arr = np.zeros(nprocs, dtype=np.int64)
    perm_arr = np.empty(n, dtype=np.int64)
    cnt_arr = np.zeros(parts * nprocs, dtype=np.int64)   # per part, then its start positions
    cdef int64_t[::1] counts = counts_arr
    cdef int64_t[::1] perm = perm_arr
    cdef int64_t[::1] cnt = cnt_arr
    if n == 0:
        return perm_arr, counts_arr
    for p in range(NPART):
        lo[p] = n * p // NPART
        hi[p] = n * (p + 1) // NPART
    with nogil:
        if parts == 1:
            for i in range(n):
                if <uint64_t>dest[i] >= up:
                    ok = False
                    break
                cnt[dest[i]] += 1
        else:
            ok = _count_parts(&dest[0], n, up, &cnt[0], lo, hi)
        if not ok:
            bad = _first_bad(&dest[0], n, up)
    if bad >= 0:
        raise ValueError(f"destination {dest[bad]} at position {bad} is outside [0, {nprocs})")
    with nogil:
        # Start of (part p, destination d): all items for smaller d, then those of earlier
        # parts for d.  That keeps the original order within a destination (stable).
        run = 0
        for d in range(nprocs):
            for p in range(parts):
                counts[d] += cnt[p * nprocs + d]
                cnt[p * nprocs + d], run = run, run + cnt[p * nprocs + d]
        if parts == 1:
            for i in range(n):
                perm[cnt[dest[i]]] = i
                cnt[dest[i]] += 1
        else:
            _place_parts(&dest[0], up, &cnt[0], &perm[0], lo, hi)
    return perm_arr, counts_arr


def append_by_dest(const int64_t[::1] dest, const unsigned char[:, ::1] rows, Py_ssize_t start,
                   const uint64_t[::1] bufs, int64_t[::1] fill, Py_ssize_t capacity):
    """Append rows ``start``, ``start + 1``, ... (a record's bytes each) to per-destination
    buffers, in order, until a buffer fills or one is missing (the aggregation "porter").

    ``bufs[d]`` is the address of destination d's buffer of ``capacity`` records (0: none),
    ``fill[d]`` how many it holds (updated here).  Returns ``(next, d)``: ``next`` is the first
    row not appended; ``d >= 0``: d's buffer became full with row ``next - 1``; ``d < -1``:
    row ``next`` needs a buffer for destination ``-d - 2``; ``d == -1``: every row appended.
    The caller checks the destinations first (they index ``bufs``).
    """
    cdef Py_ssize_t n = dest.shape[0], size = rows.shape[1], i
    cdef int64_t d, k
    cdef char* b
    if rows.shape[0] != n:
        raise ValueError(f"{rows.shape[0]} records for {n} destinations")
    if n == 0 or start >= n:
        return n, -1
    cdef const char* src = <const char*>&rows[0, 0]
    with nogil:
        for i in range(start, n):
            d = dest[i]
            b = <char*>bufs[d]
            if b == NULL:
                break
            k = fill[d]
            if size == 8:
                (<uint64_t*>b)[k] = (<const uint64_t*>src)[i]
            elif size == 4:
                (<uint32_t*>b)[k] = (<const uint32_t*>src)[i]
            elif size == 12:  # an int64 record in an envelope (to): a constant-size copy
                memcpy(b + k * 12, src + i * 12, 12)
            elif size == 16:  # ... with its origin, or a 16-byte record
                memcpy(b + k * 16, src + i * 16, 16)
            else:
                memcpy(b + k * size, src + i * size, size)
            fill[d] = k + 1
            if k + 1 == capacity:
                break
        else:
            i = n
    if i == n:
        return n, -1
    if <char*>bufs[dest[i]] == NULL:
        return i, -dest[i] - 2
    return i + 1, dest[i]


def first_outside(const int64_t[::1] dest, Py_ssize_t nprocs):
    """The position of the first destination outside ``[0, nprocs)``, or -1 (one pass)."""
    if dest.shape[0] == 0:
        return -1
    cdef Py_ssize_t bad
    with nogil:
        bad = _first_bad(&dest[0], dest.shape[0], <uint64_t>nprocs)
    return bad
