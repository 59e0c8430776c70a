# cython: language_level=3
"""Scatter-add and gather on a 1-D table with int64 indices (histogram update, index-gather).

A bad index leaves the table untouched (as ``np.add.at`` does): :func:`scatter_add_checked`
either tests every index before it writes anything or, when the updates outnumber the table
entries, keeps a copy of the table, tests and applies the indices a block at a time (the block
is still in L1 when it is applied, so the indices stream from memory once, not twice) and puts
the copy back if a block holds a bad index.  :func:`scatter_add` and :func:`gather` trust their
indices.  Negative indices are errors, not wrapped.  Tables and values may be strided views.
"""
import numpy as np
from libc.stdint cimport int32_t, int64_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

ctypedef fused elem_t:
    double
    float
    int64_t
    int32_t


cdef extern from "simd_blocks.h" nogil:
    bint hpcbsp_any_index_at_or_above(const int64_t* p, Py_ssize_t n, uint64_t limit)

cdef enum:
    CHECK_BLOCK = 4096     # indices tested per vectorised pass (32 KiB, stays in L1)
    APPLY_BLOCK = 1024     # indices tested, then applied, at a time (8 KiB: with their values
                           # and the table they stay in L1 between the test and the update)


cdef Py_ssize_t _first_bad(const int64_t* p, Py_ssize_t n, uint64_t usize) noexcept nogil:
    """Position of the first ``p[i]`` outside ``[0, usize)``, or -1.  A negative index is huge
    when read as unsigned: one comparison covers both bounds.  Each block is tested in one
    branch-free pass; only a block that fails is searched."""
    cdef Py_ssize_t i, start = 0, stop
    while start < n:
        stop = n if n - start < CHECK_BLOCK else start + CHECK_BLOCK
        if hpcbsp_any_index_at_or_above(p + start, stop - start, usize):
            for i in range(start, stop):
                if <uint64_t>p[i] >= usize:
                    return i
        start = stop
    return -1


def first_bad_index(const int64_t[::1] idx, int64_t size):
    """Position of the first index outside ``[0, size)``, or -1 when all are valid."""
    cdef Py_ssize_t n = idx.shape[0], bad
    cdef uint64_t usize = <uint64_t>size if size > 0 else 0
    if n == 0:
        return -1
    with nogil:
        bad = _first_bad(&idx[0], n, usize)
    return bad


cdef inline Py_ssize_t _stride(Py_ssize_t byte_stride, Py_ssize_t itemsize) except -1:
    if byte_stride % itemsize != 0:
        raise ValueError(f"array stride {byte_stride} is not a multiple of its item size {itemsize}")
    return byte_stride // itemsize


cdef Py_ssize_t _add_checked(elem_t* t, Py_ssize_t m, Py_ssize_t st, const int64_t* ix,
                             Py_ssize_t n, const elem_t* v, Py_ssize_t sv, elem_t value) noexcept nogil:
    """``t[ix[k]*st] += v[k*sv]`` (or ``+= value`` where v is NULL) for every k if every index
    is in ``[0, m)``; else the position of the first bad one, with the table unchanged."""
    cdef Py_ssize_t k, start = 0, stop, bad
    cdef uint64_t usize = <uint64_t>m
    cdef elem_t* saved = NULL
    if st == 1 and (v == NULL or sv == 1) and n >= 2 * m:
        saved = <elem_t*>malloc(m * sizeof(elem_t))
    if saved == NULL:  # few updates for the table (or no memory): test them all, then add
        bad = _first_bad(ix, n, usize)
        if bad >= 0:
            return bad
        if v == NULL:
            for k in range(n):
                t[ix[k] * st] += value
        else:
            for k in range(n):
                t[ix[k] * st] += v[k * sv]
        return -1
    memcpy(saved, t, m * sizeof(elem_t))
    while start < n:
        stop = n if n - start < APPLY_BLOCK else start + APPLY_BLOCK
        if hpcbsp_any_index_at_or_above(ix + start, stop - start, usize):
            memcpy(t, saved, m * sizeof(elem_t))
            free(saved)
            return _first_bad(ix + start, stop - start, usize) + start
        if v == NULL:
            for k in range(start, stop):
                t[ix[k]] += value
        else:
            for k in range(start, stop):
                t[ix[k]] += v[k]
        start = stop
    free(saved)
    return -1


def scatter_add_checked(elem_t[:] table, const int64_t[::1] idx, const elem_t[:] values):
    """``table[idx[k]] += values[k]`` for every k, in order, if every index is in bounds.

    Returns -1, or the position of the first bad index with the table unchanged.  ``values``
    has ``len(idx)`` entries of the table's dtype.
    """
    cdef Py_ssize_t n = idx.shape[0], bad
    if values.shape[0] != n:
        raise ValueError(f"scatter_add: {values.shape[0]} values for {n} indices")
    if n == 0:
        return -1
    cdef Py_ssize_t st = _stride(table.strides[0], sizeof(elem_t))
    cdef Py_ssize_t sv = _stride(values.strides[0], sizeof(elem_t))
    with nogil:
        bad = _add_checked(&table[0], table.shape[0], st, &idx[0], n, &values[0], sv, 0)
    return bad


def scatter_add_scalar_checked(elem_t[:] table, const int64_t[::1] idx, elem_t value):
    """``table[idx[k]] += value`` for every k if every index is in bounds (a histogram update
    when value == 1); returns -1, or the position of the first bad index, table unchanged.

    Call a specialisation (``scatter_add_scalar_checked["double"]``): a Python number alone
    does not tell which table dtype is meant.
    """
    cdef Py_ssize_t n = idx.shape[0], bad
    if n == 0:
        return -1
    cdef Py_ssize_t st = _stride(table.strides[0], sizeof(elem_t))
    with nogil:
        bad = _add_checked(&table[0], table.shape[0], st, &idx[0], n, NULL, 0, value)
    return bad


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
