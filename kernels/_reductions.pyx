# cython: language_level=3
"""One-pass reductions over a 1-D array of any stride: sum, dot, squared norm, min/max.

Each loop keeps ``LANES`` independent accumulators so that the compiler can vectorise it and the
floating-point additions do not form one long dependency chain; floating-point sums are formed
block by block and the block sums are added with Neumaier compensation, so the rounding error
grows with the block length rather than with the array length.  Strided views are read in place
(no copy).  The numpy oracle of each function is in ``hpcbsp/kernels/reference.py``.
"""
from libc.stdint cimport int32_t, int64_t, uint64_t
from libc.math cimport fabs

cdef extern from "simd_blocks.h" nogil:
    # The contiguous float64 blocks, multi-versioned for AVX2 (same bits as the loops below).
    double hpcbsp_block_sum_f64(const double* p, Py_ssize_t n)
    double hpcbsp_block_dot_f64(const double* p, const double* q, Py_ssize_t n)
    double hpcbsp_block_sqnorm_f64(const double* p, Py_ssize_t n)

ctypedef fused real_t:
    double
    float

ctypedef fused num_t:
    double
    float
    int64_t
    int32_t

# Loops step by literal 8 (== LANES) and 1024 (== BLOCK): range() needs a literal step to become
# a C loop.
cdef enum:
    LANES = 8
    # Elements added with plain accumulators before the compensated add of the block sum: long
    # enough that the compensation costs nothing, short enough to keep the error small.
    BLOCK = 1024

# Which reduction a shared loop computes.
cdef enum:
    OP_SUM = 0
    OP_DOT = 1
    OP_SQNORM = 2


cdef inline Py_ssize_t _elem_stride(Py_ssize_t byte_stride, Py_ssize_t itemsize) except -1:
    if byte_stride % itemsize != 0:
        raise ValueError(f"array stride {byte_stride} is not a multiple of its item size {itemsize}")
    return byte_stride // itemsize


cdef inline double _block(const real_t* p, Py_ssize_t sp, const real_t* q, Py_ssize_t sq,
                          Py_ssize_t n, int op) noexcept nogil:
    """Plain sum of ``n`` terms (x, x*y or x*x) with LANES accumulators."""
    cdef double acc[LANES]
    cdef double tail = 0.0, v
    cdef Py_ssize_t i, j, m = n - n % LANES
    if real_t is double and sp == 1 and sq == 1:
        if op == OP_SUM:
            return hpcbsp_block_sum_f64(p, n)
        elif op == OP_DOT:
            return hpcbsp_block_dot_f64(p, q, n)
        return hpcbsp_block_sqnorm_f64(p, n)
    for j in range(LANES):
        acc[j] = 0.0
    if sp == 1 and sq == 1:
        # Contiguous: written separately so that the compiler vectorises it.
        if op == OP_SUM:
            for i in range(0, m, 8):
                for j in range(LANES):
                    acc[j] += <double>p[i + j]
        elif op == OP_DOT:
            for i in range(0, m, 8):
                for j in range(LANES):
                    acc[j] += <double>p[i + j] * <double>q[i + j]
        else:
            for i in range(0, m, 8):
                for j in range(LANES):
                    acc[j] += <double>p[i + j] * <double>p[i + j]
    else:
        for i in range(0, m, 8):
            for j in range(LANES):
                v = <double>p[(i + j) * sp]
                if op == OP_SUM:
                    acc[j] += v
                elif op == OP_DOT:
                    acc[j] += v * <double>q[(i + j) * sq]
                else:
                    acc[j] += v * v
    for i in range(m, n):
        v = <double>p[i * sp]
        if op == OP_SUM:
            tail += v
        elif op == OP_DOT:
            tail += v * <double>q[i * sq]
        else:
            tail += v * v
    return (((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))) + tail


cdef double _reduce(const real_t* p, Py_ssize_t sp, const real_t* q, Py_ssize_t sq,
                    Py_ssize_t n, int op) noexcept nogil:
    """Blocked sum with Neumaier compensation between blocks."""
    cdef double s = 0.0, c = 0.0, b, t
    cdef Py_ssize_t i, m
    for i in range(0, n, 1024):
        m = n - i if n - i < 1024 else 1024
        b = _block(p + i * sp, sp, q + i * sq, sq, m, op)
        t = s + b
        if fabs(s) >= fabs(b):
            c += (s - t) + b
        else:
            c += (b - t) + s
        s = t
    return s + c


cdef int64_t _isum(const num_t* p, Py_ssize_t sp, Py_ssize_t n) noexcept nogil:
    """Integer sum, wrapping modulo 2**64 like numpy's int64 sum."""
    cdef uint64_t acc[LANES]
    cdef uint64_t tail = 0
    cdef Py_ssize_t i, j, m = n - n % LANES
    for j in range(LANES):
        acc[j] = 0
    if sp == 1:
        for i in range(0, m, 8):
            for j in range(LANES):
                acc[j] += <uint64_t><int64_t>p[i + j]
    else:
        for i in range(0, m, 8):
            for j in range(LANES):
                acc[j] += <uint64_t><int64_t>p[(i + j) * sp]
    for i in range(m, n):
        tail += <uint64_t><int64_t>p[i * sp]
    for j in range(LANES):
        tail += acc[j]
    return <int64_t>tail


def reduce_sum(const num_t[:] x):
    """Sum of a 1-D array: a float (accumulated in float64) or, for integers, an int (int64,
    wrapping on overflow like numpy)."""
    cdef Py_ssize_t n = x.shape[0]
    cdef Py_ssize_t sp = _elem_stride(x.strides[0], sizeof(num_t))
    cdef double fs = 0.0
    cdef int64_t iss = 0
    if num_t is double or num_t is float:
        if n > 0:
            with nogil:
                fs = _reduce(&x[0], sp, &x[0], sp, n, OP_SUM)
        return fs
    else:
        if n > 0:
            with nogil:
                iss = _isum(&x[0], sp, n)
        return iss


def reduce_dot(const real_t[:] x, const real_t[:] y):
    """Dot product of two 1-D float arrays of the same length and dtype (accumulated in float64)."""
    cdef Py_ssize_t n = x.shape[0]
    if y.shape[0] != n:
        raise ValueError(f"dot: lengths differ ({n} and {y.shape[0]})")
    cdef Py_ssize_t sp = _elem_stride(x.strides[0], sizeof(real_t))
    cdef Py_ssize_t sq = _elem_stride(y.strides[0], sizeof(real_t))
    cdef double r = 0.0
    if n > 0:
        with nogil:
            r = _reduce(&x[0], sp, &y[0], sq, n, OP_DOT)
    return r


def reduce_sqnorm(const real_t[:] x):
    """Sum of squares of a 1-D float array (accumulated in float64)."""
    cdef Py_ssize_t n = x.shape[0]
    cdef Py_ssize_t sp = _elem_stride(x.strides[0], sizeof(real_t))
    cdef double r = 0.0
    if n > 0:
        with nogil:
            r = _reduce(&x[0], sp, &x[0], sp, n, OP_SQNORM)
    return r


cdef void _minmax(const num_t* p, Py_ssize_t sp, Py_ssize_t n, num_t* lo, num_t* hi,
                  int* nan) noexcept nogil:
    """Minimum and maximum of n >= 1 elements; ``nan`` is set when a float NaN is present."""
    cdef num_t mn[LANES]
    cdef num_t mx[LANES]
    cdef int bad[LANES]
    cdef num_t v
    cdef Py_ssize_t i, j, m = n - n % LANES
    for j in range(LANES):
        mn[j] = p[0]
        mx[j] = p[0]
        bad[j] = 0
    if sp == 1:
        for i in range(0, m, 8):
            for j in range(LANES):
                v = p[i + j]
                # ``v < mn ? v : mn`` is what a vector min instruction computes; NaNs are
                # ignored here and flagged separately (v != v only for NaN).
                mn[j] = v if v < mn[j] else mn[j]
                mx[j] = v if v > mx[j] else mx[j]
                if num_t is double or num_t is float:
                    bad[j] |= v != v
    else:
        for i in range(0, m, 8):
            for j in range(LANES):
                v = p[(i + j) * sp]
                mn[j] = v if v < mn[j] else mn[j]
                mx[j] = v if v > mx[j] else mx[j]
                if num_t is double or num_t is float:
                    bad[j] |= v != v
    for i in range(m, n):
        v = p[i * sp]
        mn[0] = v if v < mn[0] else mn[0]
        mx[0] = v if v > mx[0] else mx[0]
        if num_t is double or num_t is float:
            bad[0] |= v != v
    nan[0] = 0
    lo[0] = mn[0]
    hi[0] = mx[0]
    for j in range(LANES):
        lo[0] = mn[j] if mn[j] < lo[0] else lo[0]
        hi[0] = mx[j] if mx[j] > hi[0] else hi[0]
        nan[0] |= bad[j]
    if num_t is double or num_t is float:
        # p[0] seeded every lane, so a NaN there is caught by this check as well.
        nan[0] |= p[0] != p[0]


def reduce_minmax(const num_t[:] x):
    """``(min, max)`` of a non-empty 1-D array; ``(nan, nan)`` if a float NaN is present."""
    cdef Py_ssize_t n = x.shape[0]
    if n == 0:
        raise ValueError("minmax of an empty array (min and max have no identity)")
    cdef Py_ssize_t sp = _elem_stride(x.strides[0], sizeof(num_t))
    cdef num_t lo, hi
    cdef int nan = 0
    with nogil:
        _minmax(&x[0], sp, n, &lo, &hi, &nan)
    if nan:
        return float("nan"), float("nan")
    return lo, hi
