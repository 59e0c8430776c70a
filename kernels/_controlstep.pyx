# cython: language_level=3
"""The control step's collective on a small int64 record, started and waited for without the interpreter.

:class:`RecordStep` is handed, once, two C functions of the form ``int start(void *request)`` and
``int wait(void *request, void *status)``, the address of a request handle and the address of a
record of ``2 * nfields`` int64 words that the request reduces in place.  Each call of
:meth:`RecordStep.agree` writes the fields and their negations into the record, calls ``start``
and then ``wait`` with the GIL released (a watchdog thread may run meanwhile), and reads the
reduced record back.

:func:`allreduce_step` makes the same step on a blocking collective instead: one call of a function
of ``MPI_Allreduce``'s form, ``allreduce(sendbuf, recvbuf, count, datatype, op, comm)``, with the
handles given as integers of the library's handle width (``int`` where the library's handles are
integers, as in MPICH's ABI; pointers where they are pointers, as in Open MPI's).  Some libraries'
persistent collectives are slower than their blocking ones (Open MPI 5: docs/performance.md).

This module knows nothing of MPI: which functions, request and handles it calls is the caller's
business (:mod:`hpcbsp.runtime.superstep.native` hands it ``MPI_Start`` and ``MPI_Wait`` with the control
step's persistent ``MPI_Allreduce_init(MAX)`` request, or ``MPI_Allreduce`` and the handles of
``MPI_IN_PLACE``, ``MPI_INT64_T``, ``MPI_MAX`` and the context's communicator).  The record layout is the control step's:
``[kind, step, sig, data, gets, -kind, -step, -sig, -data, -gets]``; after a MAX reduction,
field ``i`` agrees on every rank exactly when ``r[i] + r[i + 5] == 0``.  ``data`` and ``gets`` are
levels from 0 to 3 (what a rank has to move, the caller's business:
:class:`hpcbsp.runtime.superstep.outbox.Data` and :class:`~hpcbsp.runtime.superstep.outbox.Extra`); the step returns
their maxima over the ranks as ``data | gets << 2``, with 16 added where every rank gave the same
``data`` (its maximum is its minimum).

:meth:`RecordStep.agree_row` is the empty sync's whole step: it reads the clock before and after
the step (``CLOCK_MONOTONIC``, the clock of Python's ``time.perf_counter`` on Linux) and, when the
reduced record says that no rank has data for another, appends the superstep's row to the ledger's
``Rows`` itself; :func:`plain_sync` is a context's whole empty ``sync``, moving its superstep
``Counter`` too (both kept in C by ``kernels/_syncstate.pyx``, cimported through its ``.pxd``).
:func:`start_wait_loop` starts and waits for any request ``n`` times in a row: a collective's own
latency, without the interpreter between calls (what a benchmark compares the sync with).

With a :class:`Lateness` watch (:meth:`RecordStep.watch`, ``$HPCBSP_LATENESS``) the record has a
sixth field, ``late``: this rank's work since the ledger's last row ended, in microseconds, shifted
left by 20 bits, with the rank in the low 20 bits; its MAX over the ranks is the latest rank
and its work, the MAX of its negation the earliest's.  The record is then 12 words:
``[kind, step, sig, data, gets, late, -kind, ..., -late]``; the caller sizes the request so.
"""
from libc.stdint cimport int64_t, intptr_t, uintptr_t
from libc.string cimport memcpy
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec

from hpcbsp.kernels._syncstate cimport Counter, Rows

ctypedef int (*start_fn)(void *) noexcept nogil
ctypedef int (*wait_fn)(void *, void *) noexcept nogil
# MPI_Allreduce where the library's handles are ints (MPICH's ABI) or pointers (Open MPI's).
ctypedef int (*allreduce_int_fn)(const void *, void *, int, int, int, int) noexcept nogil
ctypedef int (*allreduce_ptr_fn)(const void *, void *, int, void *, void *, void *) noexcept nogil

# How a RecordStep reduces its record.
cdef enum:
    LATE_WINDOW_C = 10
    LATE_COUNT_C = 8
    RANK_BITS_C = 20

cdef enum:
    _CLOSED = 0
    _PERSISTENT = 1     # start(request), wait(request, status)
    _ALLREDUCE_INT = 2  # allreduce(in_place, record, 10, datatype, op, comm), int handles
    _ALLREDUCE_PTR = 3  # the same, pointer handles

#: Returned by :meth:`RecordStep.agree` when the ranks disagree on the kind, step or signature.
DIVERGED = -1
#: Supersteps a :class:`Lateness` watch looks back over, and how many of them one rank must
#: have arrived last in (later than :attr:`Lateness.threshold`) for its line.
LATE_WINDOW = LATE_WINDOW_C
LATE_COUNT = LATE_COUNT_C
#: Bits of the packed ``late`` field that hold the rank (ranks up to 2**20 - 1).
RANK_BITS = RANK_BITS_C


cdef inline double _now() noexcept nogil:
    """Seconds on CLOCK_MONOTONIC, computed as CPython's ``time.perf_counter`` does on Linux."""
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <double>(<int64_t>ts.tv_sec * 1000000000 + ts.tv_nsec) / 1e9


def start_wait_loop(uintptr_t start, uintptr_t wait, uintptr_t request, Py_ssize_t n):
    """Call ``start(request)`` then ``wait(request, status)`` ``n`` times, the GIL released;
    return the first nonzero code, or 0.  A persistent request's latency without the interpreter."""
    cdef start_fn start_ = <start_fn>start
    cdef wait_fn wait_ = <wait_fn>wait
    cdef void *req = <void *>request
    cdef char status[256]
    cdef int code = 0
    cdef Py_ssize_t i
    if not (start and wait and request):
        raise ValueError("start_wait_loop: a null function or request address")
    with nogil:
        for i in range(n):
            code = start_(req)
            if code == 0:
                code = wait_(req, status)
            if code != 0:
                break
    return code


include "controlstep_lateness.pxi"


cdef class RecordStep:
    """The control step on a 10-word int64 record, compiled: ``start(request)`` + ``wait(request,
    status)`` on a persistent collective (this constructor), or one blocking ``MPI_Allreduce``
    (:func:`allreduce_step`).

    Parameters
    ----------
    start, wait : int
        Addresses of the two C functions.
    request : int
        Address of the request handle (what ``start`` and ``wait`` take a pointer to).
    record : int
        Address of the 10 int64 words the request reduces in place.
    owners : object
        Whatever owns the memory behind ``request`` and ``record``; kept alive with this object.
    error : callable
        ``error(code)`` returns the exception to raise when a call returns ``code != 0``.
    """

    cdef int _mode
    cdef start_fn _start
    cdef wait_fn _wait
    cdef void *_request
    cdef void *_allreduce
    cdef const void *_in_place
    cdef intptr_t _datatype
    cdef intptr_t _op
    cdef intptr_t _comm
    cdef int64_t *_record
    cdef char _status[256]  # larger than any MPI library's status object
    cdef object _owners
    cdef object _error
    #: When the last :meth:`agree_row` began (seconds, ``time.perf_counter``'s clock).
    cdef public double started
    cdef int _nf  # fields in the record: 5, or 6 with a lateness watch
    cdef Lateness _late

    def __init__(self, uintptr_t start, uintptr_t wait, uintptr_t request, uintptr_t record,
                 object owners, object error):
        if not (start and wait and request and record):
            raise ValueError("RecordStep: a null function, request or record address")
        self._start = <start_fn>start
        self._wait = <wait_fn>wait
        self._request = <void *>request
        self._record = <int64_t *>record
        self._owners = owners
        self._error = error
        self._mode = _PERSISTENT
        self._nf = 5

    def watch(self, Lateness late not None):
        """Carry ``late``'s field in the record from now on (12 words: the caller's request and
        record must be of that size) and have it observe every step."""
        self._late = late
        self._nf = 6

    @property
    def collective(self):
        """``"persistent"``, ``"blocking"`` (one ``MPI_Allreduce``), or ``"closed"``."""
        return ("closed", "persistent", "blocking", "blocking")[self._mode]

    def close(self):
        """Forget the functions, the request and the handles (before the request or the
        communicator is freed): calling :meth:`agree` afterwards raises instead of starting a
        freed request."""
        self._mode = _CLOSED
        self._start = NULL
        self._wait = NULL
        self._request = NULL
        self._allreduce = NULL

    cdef int _step(self, int64_t kind, int64_t step, int64_t sig, int64_t data, int64_t gets, double now) except -2:
        """The step; ``now``: the clock when it began (read by the caller, for the lateness field)."""
        cdef int64_t *r = self._record
        cdef int code, i
        cdef int mode = self._mode
        cdef int nf = self._nf
        if mode == _CLOSED:
            raise ValueError("RecordStep.agree: the step was closed (its request was freed)")
        r[0] = kind
        r[1] = step
        r[2] = sig
        r[3] = data
        r[4] = gets
        if nf == 6:
            r[5] = self._late._packed(now)
        for i in range(nf):
            r[nf + i] = -r[i]
        with nogil:
            if mode == _PERSISTENT:
                code = self._start(self._request)
                if code == 0:
                    code = self._wait(self._request, self._status)
            elif mode == _ALLREDUCE_INT:
                code = (<allreduce_int_fn>self._allreduce)(self._in_place, r, 2 * nf, <int>self._datatype,
                                                           <int>self._op, <int>self._comm)
            else:
                code = (<allreduce_ptr_fn>self._allreduce)(self._in_place, r, 2 * nf, <void *>self._datatype,
                                                           <void *>self._op, <void *>self._comm)
        if code != 0:
            raise self._error(code)
        if r[0] + r[nf] or r[1] + r[nf + 1] or r[2] + r[nf + 2]:
            return DIVERGED
        if nf == 6:
            self._late._observe(r[5], -r[11])
        return <int>((r[3] & 3) | (r[4] & 3) << 2 | (r[3] + r[nf + 3] == 0) << 4)

    def agree(self, int64_t kind, int64_t step, int64_t sig, int64_t data, int64_t gets):
        """Reduce the record; return ``data | gets << 2`` as reduced by MAX (each a level from 0
        to 3, the caller's business), plus 16 where every rank gave the same ``data``; or
        ``DIVERGED``."""
        if not (0 <= data <= 3 and 0 <= gets <= 3):
            raise ValueError(f"RecordStep.agree: data and gets are levels from 0 to 3, not {data} and {gets}")
        return self._step(kind, step, sig, data, gets, _now() if self._nf == 6 else 0.0)

    def agree_row(self, int64_t kind, int64_t step, object label, Rows rows not None):
        """``agree(kind, step, 0, 0, 0)`` for a rank with nothing pending, timed: when no rank has
        data for another (the reduced data field is 0: whatever the others have for themselves,
        this rank has nothing more to do), ``(step, label, t_start, t_end, None)`` is appended to
        ``rows``, the two times read just before and after the step, and 0 is returned;
        otherwise nothing is appended, ``t_start`` is kept in :attr:`started`, and ``agree``'s
        code is returned."""
        return self._agree_row(kind, step, label, rows)

    cdef int _agree_row(self, int64_t kind, int64_t step, object label, Rows rows) except -2:
        cdef double t0 = _now()
        cdef int code = self._step(kind, step, 0, 0, 0, t0)
        if code >= 0 and (code & 3) == 0:
            rows.push(step, label, t0, _now(), None)
            return 0
        self.started = t0
        return code


def allreduce_step(uintptr_t allreduce, int handle_bytes, intptr_t in_place, intptr_t datatype,
                   intptr_t op, intptr_t comm, uintptr_t record, object owners, object error):
    """A :class:`RecordStep` whose step is one blocking ``allreduce(in_place, record, 10,
    datatype, op, comm)``: ``allreduce`` is the address of a function of ``MPI_Allreduce``'s
    form, ``handle_bytes`` the width of the library's datatype, op and communicator handles (4:
    C ints; 8: pointers), passed as such; ``in_place`` the value of ``MPI_IN_PLACE``; the rest as
    for :class:`RecordStep`.  ``close()`` before the communicator is freed."""
    cdef RecordStep step
    if not (allreduce and record):
        raise ValueError("allreduce_step: a null function or record address")
    if handle_bytes not in (4, 8):
        raise ValueError(f"allreduce_step: handles of {handle_bytes} bytes (4 or 8 are known)")
    if handle_bytes == 4 and not all(-2**31 <= h < 2**31 for h in (datatype, op, comm)):
        raise ValueError("allreduce_step: a handle out of the range of a C int")
    step = RecordStep.__new__(RecordStep)
    step._allreduce = <void *>allreduce
    step._in_place = <const void *>in_place
    step._datatype = datatype
    step._op = op
    step._comm = comm
    step._record = <int64_t *>record
    step._owners = owners
    step._error = error
    step._mode = _ALLREDUCE_INT if handle_bytes == 4 else _ALLREDUCE_PTR
    step._nf = 5
    return step


def plain_sync(RecordStep step not None, Rows rows not None, int64_t kind, Counter counter not None,
               object outbox, list queues not None, object method, object finish):
    """A context's ``sync`` while it is plain: the empty superstep without a Python frame.

    Returns a compiled function of the method's signature, ``sync(label=None, *, timeout=None,
    _step=None)``, that stands in for the method ``sync`` of a
    :class:`hpcbsp.runtime.superstep.supersteps.Supersteps` (as the instance attribute of that name) whose
    superstep counter is ``counter``, while the context is open, without sync hooks or timeout,
    and its blocking control step ``step`` is compiled; the context installs and removes it
    (``Supersteps._fast_sync``).  ``sync()`` or ``sync(label)`` on a rank with no record pending
    (``outbox.nrecords == 0``) and no queue (``queues`` empty) is :meth:`RecordStep.agree_row`
    of kind ``kind`` at superstep ``counter.value`` and, when it returns 0 (no rank has data for
    another),
    ``counter.value += 1``: the method's own empty path, the same record, agreement and ledger
    row, without the interpreter in between.  Everything else (a timeout, records pending, a
    queue, the step closed) is ``method(...)``, the method itself; when another rank has data,
    or the ranks diverged, ``finish(code, label)`` completes the superstep the step began.  (A
    function, not an object with ``__call__``: its arguments are parsed without building a
    tuple and a dict per call.)
    """
    def sync(label=None, *, timeout=None, _step=None):
        cdef int64_t superstep
        cdef int code
        if timeout is not None or _step is not None or queues or step._mode == _CLOSED or outbox.nrecords:
            return method(label, timeout=timeout, _step=_step)
        superstep = counter.value
        code = step._agree_row(kind, superstep, label, rows)
        if code == 0:
            counter.value = superstep + 1
        else:
            finish(code, label)
    return sync
