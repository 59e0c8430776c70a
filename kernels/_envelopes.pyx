# cython: language_level=3
"""Envelopes of routed records: wrapping records with their address, and splitting an arrived
batch into the records for this rank and those passing on (FA-BSP's relay, compiled).

An envelope is ``to`` (int32), then ``from`` (int32) when it carries its origin, then the
record's bytes: ``rec_off`` (4 or 8) bytes of address before the record.  Nothing here knows
of MPI or of the mailbox; the buffers are numpy arrays of rows of bytes.
"""
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libc.string cimport memcpy, memmove


cdef inline void _copy(char* dst, const char* src, Py_ssize_t size) noexcept nogil:
    # Constant sizes let the compiler copy in registers (the common records: 4, 8, 12, 16 bytes).
    if size == 8:
        memcpy(dst, src, 8)
    elif size == 4:
        memcpy(dst, src, 4)
    elif size == 12:
        memcpy(dst, src, 12)
    elif size == 16:
        memcpy(dst, src, 16)
    else:
        memcpy(dst, src, size)


def wrap(const unsigned char[:, ::1] recs, const int64_t[::1] dests, int64_t dest, int32_t me,
         Py_ssize_t rec_off, unsigned char[:, ::1] out):
    """Write envelope i of ``out``: ``to`` = ``dests[i]`` (or ``dest`` for all when ``dests`` is
    empty), ``from`` = ``me`` when ``rec_off`` is 8, then record i's bytes.  One pass."""
    cdef Py_ssize_t n = recs.shape[0], size = recs.shape[1], i
    cdef bint one = dests.shape[0] == 0
    if rec_off != 4 and rec_off != 8:
        raise ValueError(f"wrap: rec_off must be 4 or 8, not {rec_off}")
    if out.shape[0] != n or out.shape[1] != size + rec_off:
        raise ValueError(f"wrap: {out.shape[0]} envelopes of {out.shape[1]} bytes for {n} records "
                         f"of {size} bytes with {rec_off} bytes of address")
    if not one and dests.shape[0] != n:
        raise ValueError(f"wrap: {dests.shape[0]} destinations for {n} records")
    if n == 0:
        return
    cdef char* o = <char*>&out[0, 0]
    cdef const char* r = <const char*>&recs[0, 0] if size else NULL
    cdef Py_ssize_t w = size + rec_off
    cdef int32_t to = <int32_t>dest
    with nogil:
        for i in range(n):
            if not one:
                to = <int32_t>dests[i]
            (<int32_t*>(o + i * w))[0] = to
            if rec_off == 8:
                (<int32_t*>(o + i * w + 4))[0] = me
            _copy(o + i * w + rec_off, r + i * size, size)


cdef inline void _move(char* dst, const char* src, Py_ssize_t size) noexcept nogil:
    # _copy for regions that may overlap (the records moved down within their own message).
    if size == 8:
        memmove(dst, src, 8)
    elif size == 4:
        memmove(dst, src, 4)
    elif size == 12:
        memmove(dst, src, 12)
    elif size == 16:
        memmove(dst, src, 16)
    else:
        memmove(dst, src, size)


def split(unsigned char[:, ::1] env, Py_ssize_t rec_off, int32_t me, const int64_t[::1] hops,
          int32_t[::1] origins, unsigned char[:, ::1] passing, int64_t[::1] next_hops):
    """Split arrived envelopes in place, in arrival order: the records addressed to ``me`` are
    moved, bare, to the front of ``env``'s own memory (record k at bytes ``k * size``, where
    ``size`` is the record's: ``env`` is consumed), with their ``from`` in ``origins`` when
    ``rec_off`` is 8; the others are copied whole to the rows of ``passing``, with ``hops[to]``
    in ``next_hops``.

    Returns ``(nmine, npassing)``.  Raises ``ValueError`` naming the first ``to`` outside
    ``[0, len(hops))`` (a corrupt message; ``env`` is then partly moved).
    """
    cdef Py_ssize_t n = env.shape[0], w = env.shape[1], size = env.shape[1] - rec_off
    cdef Py_ssize_t i, nm = 0, np_ = 0, bad = -1
    cdef uint64_t nprocs = <uint64_t>hops.shape[0]
    cdef int32_t to, frm = 0, bad_to = 0
    cdef bint with_from = rec_off == 8
    if rec_off != 4 and rec_off != 8:
        raise ValueError(f"split: rec_off must be 4 or 8, not {rec_off}")
    if size < 0 or passing.shape[0] < n or next_hops.shape[0] < n or passing.shape[1] != w \
            or (with_from and origins.shape[0] < n):
        raise ValueError("split: output arrays too small for the batch")
    if n == 0:
        return 0, 0
    cdef char* e = <char*>&env[0, 0]
    cdef char* p = <char*>&passing[0, 0]
    with nogil:
        for i in range(n):
            to = (<const int32_t*>(e + i * w))[0]
            if to == me:
                if with_from:
                    origins[nm] = (<const int32_t*>(e + i * w + 4))[0]
                # Moved down: the write ends at or before the next envelope's start.
                _move(e + nm * size, e + i * w + rec_off, size)
                nm += 1
            elif <uint64_t><int64_t>to >= nprocs:
                bad, bad_to = i, to
                break
            else:
                _copy(p + np_ * w, e + i * w, w)
                next_hops[np_] = hops[to]
                np_ += 1
    if bad >= 0:
        raise ValueError(f"split: envelope {bad} is addressed to rank {bad_to}, outside [0, {nprocs})")
    return nm, np_


def wrap_append(const int64_t[::1] dests, const int64_t[::1] nexts, const unsigned char[:, ::1] recs,
                Py_ssize_t start, int32_t me, Py_ssize_t rec_off, const uint64_t[::1] bufs,
                int64_t[::1] fill, Py_ssize_t capacity):
    """The porter (``_grouping.append_by_dest``) for records still to be wrapped: record i's
    envelope (``to`` = ``dests[i]``, ``from`` = ``me`` when ``rec_off`` is 8, the record) is
    written straight into the buffer of its next hop ``nexts[i]``, in order, from row
    ``start`` until a buffer fills or one is missing: no envelope array in between.

    ``bufs[h]``: the address of next hop h's buffer of ``capacity`` envelopes (0: none),
    ``fill[h]``: envelopes in it (updated).  Returns ``(next, h)`` as ``append_by_dest`` does
    (``h >= 0``: h's buffer became full; ``-h - 2``: row ``next`` needs a buffer for h; ``-1``:
    every row appended).  The caller checks the hops (they index ``bufs``).
    """
    cdef Py_ssize_t n = dests.shape[0], size = recs.shape[1], w = recs.shape[1] + rec_off, i
    cdef int64_t h, k
    cdef char* b
    if rec_off != 4 and rec_off != 8:
        raise ValueError(f"wrap_append: rec_off must be 4 or 8, not {rec_off}")
    if recs.shape[0] != n or nexts.shape[0] != n:
        raise ValueError(f"wrap_append: {recs.shape[0]} records and {nexts.shape[0]} next hops for "
                         f"{n} destinations")
    if n == 0 or start >= n:
        return n, -1
    cdef const char* src = <const char*>&recs[0, 0] if size else NULL
    with nogil:
        for i in range(start, n):
            h = nexts[i]
            b = <char*>bufs[h]
            if b == NULL:
                break
            k = fill[h]
            b += k * w
            (<int32_t*>b)[0] = <int32_t>dests[i]
            if rec_off == 8:
                (<int32_t*>(b + 4))[0] = me
            _copy(b + rec_off, src + i * size, size)
            fill[h] = k + 1
            if k + 1 == capacity:
                break
        else:
            i = n
    if i == n:
        return n, -1
    if <char*>bufs[nexts[i]] == NULL:
        return i, -nexts[i] - 2
    return i + 1, nexts[i]
