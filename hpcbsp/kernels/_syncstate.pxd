# The C-level interface of hpcbsp.kernels._syncstate (its source: kernels/_syncstate.pyx), for the
# compiled control step (kernels/_controlstep.pyx), which appends rows and moves the counter
# without Python.  Here, beside the module it declares, so that Cython finds it by the module's
# package path and the cimport imports hpcbsp.kernels._syncstate at run time (beside the .pxi in
# kernels/, which is no package, it would declare a top-level module _syncstate).
from libc.stdint cimport int64_t

# The metrics a row carries, aggregated over every row (totals, maxima, per label): a new one is a
# field of _Row (and of _syncstate.FIELDS and FIELD_TYPES, which the stream's files follow), a
# column here and in _syncstate.METRICS, its value in Rows._store, and a field of the ledger's
# SuperstepRecord (runtime/superstep/ledger.py, Ledger._record and ledgerfiles.read_stream).
cdef enum:
    NMETRICS = 7


cdef struct _Row:
    int64_t index
    int64_t label  # an index into Rows._label_list; -1: None; -2: kept in Rows._odd_labels
    double t_began  # when the superstep's work began (the previous row's t_end, or the origin)
    double t_sync
    double t_end
    int64_t bytes_out
    int64_t bytes_in
    int64_t msgs_out
    int64_t msgs_in
    int64_t records


cdef class Rows:
    cdef _Row *_rows
    cdef Py_ssize_t _n
    cdef Py_ssize_t _cap
    cdef Py_ssize_t _head  # the slot the next row goes to (_n % _cap, kept without a division)
    cdef readonly Py_ssize_t window
    cdef public double origin
    cdef double _last_end
    cdef dict _label_ids
    cdef list _label_list
    cdef dict _odd_labels
    cdef double _total[NMETRICS]
    cdef double _max[NMETRICS]
    cdef double *_by_label  # per label slot: count, then NMETRICS sums, then NMETRICS maxima
    cdef Py_ssize_t _slots
    cdef public object sink
    cdef public Py_ssize_t flushed
    cdef public Py_ssize_t flush_every

    cdef int push(self, int64_t index, object label, double t_sync, double t_end, object traffic) except -1
    cdef int _store(self, int64_t index, object label, double t_sync, double t_end, int64_t bytes_out,
                    int64_t bytes_in, int64_t msgs_out, int64_t msgs_in, int64_t records) except -1
    cdef double *_slot(self, int64_t label) except NULL
    cdef int64_t _label_id(self, object label) except -3
    cdef object _label(self, Py_ssize_t i)


cdef class Counter:
    cdef public int64_t value
