# cython: language_level=3
"""Envelopes of routed records: wrapping records with their address, and splitting an arrived
batch into the records for this rank and those passing on (FA-BSP's relay, compiled).

An envelope is ``to`` (int32), then ``from`` (int32) when it carries its origin, then the
record's bytes: ``rec_off`` (4 or 8) bytes of address before the record.  Nothing here knows
of MPI or of the mailbox; the buffers are numpy arrays of rows of bytes.
"""
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libc.string cimport memcpy


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


def split(const unsigned char[:, ::1] env, Py_ssize_t rec_off, int32_t me, const int64_t[::1] hops,
          unsigned char[:, ::1] mine, int32_t[::1] origins, unsigned char[:, ::1] passing,
          int64_t[::1] next_hops):
    """Split arrived envelopes, in arrival order: those addressed to ``me`` give their record's
    bytes to the rows of ``mine`` (and their ``from`` to ``origins`` when ``rec_off`` is 8);
    the others are copied whole to the rows of ``passing``, with ``hops[to]`` in ``next_hops``.

    Returns ``(nmine, npassing)``.  Raises ``ValueError`` naming the first ``to`` outside
    ``[0, len(hops))`` (a corrupt message), having split nothing usable.
    """
    cdef Py_ssize_t n = env.shape[0], w = env.shape[1], size = env.shape[1] - rec_off
    cdef Py_ssize_t i, nm = 0, np_ = 0, bad = -1
    cdef uint64_t nprocs = <uint64_t>hops.shape[0]
    cdef int32_t to
    cdef bint with_from = rec_off == 8
    if rec_off != 4 and rec_off != 8:
        raise ValueError(f"split: rec_off must be 4 or 8, not {rec_off}")
    if size < 0 or mine.shape[0] < n or passing.shape[0] < n or next_hops.shape[0] < n \
            or mine.shape[1] != size or passing.shape[1] != w or (with_from and origins.shape[0] < n):
        raise ValueError("split: output arrays too small for the batch")
    if n == 0:
        return 0, 0
    cdef const char* e = <const char*>&env[0, 0]
    cdef char* m = <char*>&mine[0, 0] if size else NULL
    cdef char* p = <char*>&passing[0, 0]
    with nogil:
        for i in range(n):
            to = (<const int32_t*>(e + i * w))[0]
            if to == me:
                if with_from:
                    origins[nm] = (<const int32_t*>(e + i * w + 4))[0]
                _copy(m + nm * size, e + i * w + rec_off, size)
                nm += 1
            elif <uint64_t><int64_t>to >= nprocs:
                bad = i
                break
            else:
                _copy(p + np_ * w, e + i * w, w)
                next_hops[np_] = hops[to]
                np_ += 1
    if bad >= 0:
        raise ValueError(f"split: envelope {bad} is addressed to rank {(<const int32_t*>(e + bad * w))[0]}, "
                         f"outside [0, {nprocs})")
    return nm, np_
