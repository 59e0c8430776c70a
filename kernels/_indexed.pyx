# cython: language_level=3
"""Scatter-add and gather on a 1-D table with int64 indices (histogram update, index-gather).

The facade checks every index with :func:`first_bad_index` before anything is written (as
``np.add.at`` does), so a bad index leaves the table untouched; the loops here trust their
indices.  Negative indices are errors, not wrapped.  Tables and values may be strided views.
"""
import numpy as np
from libc.stdint cimport int32_t, int64_t, uint64_t

ctypedef fused elem_t:
    double
    float
    int64_t
    int32_t


cdef extern from "simd_blocks.h" nogil:
    bint hpcbsp_any_index_at_or_above(const int64_t* p, Py_ssize_t n, uint64_t limit)

cdef enum:
    CHECK_BLOCK = 4096     # indices tested per vectorised pass (32 KiB, stays in L1)


def first_bad_index(const int64_t[::1] idx, int64_t size):
    """Position of the first index outside ``[0, size)``, or -1 when all are valid."""
    cdef Py_ssize_t n = idx.shape[0], i, start = 0, stop, bad = -1
    cdef uint64_t usize = <uint64_t>size if size > 0 else 0
    if n == 0:
        return -1
    cdef const int64_t* p = &idx[0]
    with nogil:
        # A negative index is huge when read as unsigned: one comparison covers both bounds.
        # Each block is tested in one branch-free pass; only a block that fails is searched.
        while start < n and bad < 0:
            stop = n if n - start < CHECK_BLOCK else start + CHECK_BLOCK
            if hpcbsp_any_index_at_or_above(p + start, stop - start, usize):
                for i in range(start, stop):
                    if <uint64_t>p[i] >= usize:
                        bad = i
                        break
            start = stop
    return bad


cdef inline Py_ssize_t _stride(Py_ssize_t byte_stride, Py_ssize_t itemsize) except -1:
    if byte_stride % itemsize != 0:
        raise ValueError(f"array stride {byte_stride} is not a multiple of its item size {itemsize}")
    return byte_stride // itemsize


def scatter_add(elem_t[:] table, const int64_t[::1] idx, const elem_t[:] values):
    """``table[idx[k]] += values[k]`` for every k, in order (repeats accumulate).

    Indices must already be checked (:func:`first_bad_index`); ``values`` has ``len(idx)``
    entries of the table's dtype.
    """
    cdef Py_ssize_t n = idx.shape[0], k
    if values.shape[0] != n:
        raise ValueError(f"scatter_add: {values.shape[0]} values for {n} indices")
    if n == 0:
        return
    cdef Py_ssize_t st = _stride(table.strides[0], sizeof(elem_t))
    cdef Py_ssize_t sv = _stride(values.strides[0], sizeof(elem_t))
    cdef elem_t* t = &table[0]
    cdef const elem_t* v = &values[0]
    cdef const int64_t* ix = &idx[0]
    with nogil:
        if st == 1 and sv == 1:
            for k in range(n):
                t[ix[k]] += v[k]
        else:
            for k in range(n):
                t[ix[k] * st] += v[k * sv]


def scatter_add_scalar(elem_t[:] table, const int64_t[::1] idx, elem_t value):
    """``table[idx[k]] += value`` for every k (a histogram update when value == 1).

    Call a specialisation (``scatter_add_scalar["double"]``): a Python number alone does not
    tell which table dtype is meant.
    """
    cdef Py_ssize_t n = idx.shape[0], k
    if n == 0:
        return
    cdef Py_ssize_t st = _stride(table.strides[0], sizeof(elem_t))
    cdef elem_t* t = &table[0]
    cdef const int64_t* ix = &idx[0]
    with nogil:
        if st == 1:
            for k in range(n):
                t[ix[k]] += value
        else:
            for k in range(n):
                t[ix[k] * st] += value


def gather(const elem_t[:] table, const int64_t[::1] idx, elem_t[::1] out):
    """``out[k] = table[idx[k]]``; indices must already be checked."""
    cdef Py_ssize_t n = idx.shape[0], k
    if out.shape[0] != n:
        raise ValueError(f"gather: output has {out.shape[0]} entries for {n} indices")
    if n == 0:
        return
    cdef Py_ssize_t st = _stride(table.strides[0], sizeof(elem_t))
    cdef const elem_t* t = &table[0]
    cdef elem_t* o = &out[0]
    cdef const int64_t* ix = &idx[0]
    with nogil:
        if st == 1:
            for k in range(n):
                o[k] = t[ix[k]]
        else:
            for k in range(n):
                o[k] = t[ix[k] * st]
