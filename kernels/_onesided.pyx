# cython: language_level=3
"""One MPI one-sided operation per update, issued from C: the fine-grained baseline's loop.

:class:`Updates` is handed, once, the addresses of two C functions of MPI's signatures
``MPI_Accumulate`` and ``MPI_Get`` and the handles of a window, of the element datatype and of
the reduction op.  :meth:`Updates.accumulate` then issues one accumulate of the value 1 per
(rank, offset) pair, :meth:`Updates.get` one get per pair into the caller's array, each a
plain C loop with the GIL released: no Python per update.  Completion (``MPI_Win_flush_all``,
``MPI_Win_unlock_all``) is the caller's business, through mpi4py.

This module includes no MPI header and links no MPI library: which functions, window and types
it calls with is the caller's business (:mod:`hpcbsp.apps.irregular.rma` finds them in the MPI
library the process already runs, through :func:`hpcbsp.runtime.superstep.native.mpi_symbols`).  MPI
handles are ``int`` in MPICH's ABI and pointers in Open MPI's; ``handle_size`` (4 or 8, what
``MPI._sizeof(MPI.Win)`` says) chooses the signature the functions are called with.
"""
from libc.stdint cimport int64_t, intptr_t, uintptr_t

# MPI_Accumulate(origin, count, type, rank, disp, count, type, op, win) and
# MPI_Get(origin, count, type, rank, disp, count, type, win), with MPI_Aint = intptr_t.
ctypedef int (*acc_int_fn)(const void *, int, int, int, intptr_t, int, int, int, int) noexcept nogil
ctypedef int (*get_int_fn)(void *, int, int, int, intptr_t, int, int, int) noexcept nogil
ctypedef int (*acc_ptr_fn)(const void *, int, intptr_t, int, intptr_t, int, intptr_t, intptr_t,
                           intptr_t) noexcept nogil
ctypedef int (*get_ptr_fn)(void *, int, intptr_t, int, intptr_t, int, intptr_t, intptr_t) noexcept nogil


cdef class Updates:
    """One ``MPI_Accumulate`` or ``MPI_Get`` of one element per update, compiled.

    Parameters
    ----------
    accumulate, get : int
        Addresses of ``MPI_Accumulate`` and ``MPI_Get``.
    handle_size : int
        Bytes of an MPI handle: 4 (``int`` handles, MPICH and Intel MPI) or 8 (pointers, Open MPI).
    win, dtype, op : int
        The handles (as ``MPI._handleof`` gives them) of the window (displacement unit: one element), of the element datatype
        (8 bytes, the window's and the origin's) and of the accumulate's op (``MPI_SUM``).
    owners : object
        Whatever must stay alive while this object may call (the window, the types).
    """

    cdef void *_acc
    cdef void *_get
    cdef int _wide
    cdef intptr_t _win, _dtype, _op
    cdef int64_t _one
    cdef object _owners

    def __init__(self, uintptr_t accumulate, uintptr_t get, int handle_size, uintptr_t win,
                 uintptr_t dtype, uintptr_t op, object owners):
        if not (accumulate and get):
            raise ValueError("Updates: a null function address")
        if handle_size not in (4, 8):
            raise ValueError(f"Updates: an MPI handle of {handle_size} bytes (4 or 8 expected)")
        self._acc = <void *>accumulate
        self._get = <void *>get
        self._wide = handle_size == 8
        # A narrow handle is the low 32 bits (mpi4py gives MPICH's negative ints as unsigned).
        self._win, self._dtype, self._op = <intptr_t>win, <intptr_t>dtype, <intptr_t>op
        self._one = 1
        self._owners = owners

    def close(self):
        """Forget the functions (before the window is freed): later calls raise."""
        self._acc = NULL
        self._get = NULL

    def accumulate(self, const int64_t[::1] ranks, const int64_t[::1] offsets):
        """``MPI_Accumulate(+1)`` of one element at ``offsets[i]`` on ``ranks[i]``, for every i in
        order.  Returns ``(code, i)``: MPI's error code of update i and i, or ``(0, n)``."""
        cdef Py_ssize_t n = ranks.shape[0], i = 0
        cdef int code = 0
        if self._acc == NULL:
            raise ValueError("Updates: closed (its window was freed)")
        if offsets.shape[0] != n:
            raise ValueError(f"Updates.accumulate: {offsets.shape[0]} offsets for {n} ranks")
        cdef const void *one = &self._one
        with nogil:
            if self._wide:
                for i in range(n):
                    code = (<acc_ptr_fn>self._acc)(one, 1, self._dtype, <int>ranks[i], <intptr_t>offsets[i],
                                                   1, self._dtype, self._op, self._win)
                    if code:
                        break
            else:
                for i in range(n):
                    code = (<acc_int_fn>self._acc)(one, 1, <int>self._dtype, <int>ranks[i],
                                                   <intptr_t>offsets[i], 1, <int>self._dtype,
                                                   <int>self._op, <int>self._win)
                    if code:
                        break
        if code:
            return code, i
        return 0, n

    def get(self, const int64_t[::1] ranks, const int64_t[::1] offsets, int64_t[::1] out):
        """``MPI_Get`` of the element at ``offsets[i]`` on ``ranks[i]`` into ``out[i]``, for every
        i (complete only when the caller flushes or ends the epoch).  Returns as
        :meth:`accumulate`."""
        cdef Py_ssize_t n = ranks.shape[0], i = 0
        cdef int code = 0
        if self._get == NULL:
            raise ValueError("Updates: closed (its window was freed)")
        if offsets.shape[0] != n or out.shape[0] != n:
            raise ValueError(f"Updates.get: {offsets.shape[0]} offsets and {out.shape[0]} outputs "
                             f"for {n} ranks")
        if n == 0:
            return 0, 0
        cdef int64_t *o = &out[0]
        with nogil:
            if self._wide:
                for i in range(n):
                    code = (<get_ptr_fn>self._get)(o + i, 1, self._dtype, <int>ranks[i], <intptr_t>offsets[i],
                                                   1, self._dtype, self._win)
                    if code:
                        break
            else:
                for i in range(n):
                    code = (<get_int_fn>self._get)(o + i, 1, <int>self._dtype, <int>ranks[i],
                                                   <intptr_t>offsets[i], 1, <int>self._dtype,
                                                   <int>self._win)
                    if code:
                        break
        if code:
            return code, i
        return 0, n
