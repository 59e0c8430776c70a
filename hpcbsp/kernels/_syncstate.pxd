# The C-level interface of hpcbsp.kernels._syncstate (its source: kernels/_syncstate.pyx), for the
# compiled control step (kernels/_controlstep.pyx), which appends rows and moves the counter
# without Python.  Here, beside the module it declares, so that Cython finds it by the module's
# package path and the cimport imports hpcbsp.kernels._syncstate at run time (beside the .pyx in
# kernels/, which is no package, it would declare a top-level module _syncstate).
from libc.stdint cimport int64_t


cdef struct _Row:
    int64_t index
    int64_t label  # an index into Rows._label_list; -1: None; -2: kept in Rows._odd_labels
    double t_sync
    double t_end


cdef class Rows:
    cdef _Row *_rows
    cdef Py_ssize_t _n
    cdef Py_ssize_t _cap
    cdef dict _label_ids
    cdef list _label_list
    cdef dict _odd_labels
    cdef dict _traffic

    cdef int push(self, int64_t index, object label, double t_sync, double t_end, object traffic) except -1
    cdef int64_t _label_id(self, object label) except -3
    cdef object _label(self, Py_ssize_t i)


cdef class Counter:
    cdef public int64_t value
