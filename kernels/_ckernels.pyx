# cython: language_level=3
"""Compiled local kernels of hpcbsp (no MPI in here).

Each function has a numpy reference implementation in ``hpcbsp/kernels/reference.py`` that the
tests use as the oracle.
"""
import numpy as np
cimport numpy as cnp
from libc.stdint cimport int64_t

cnp.import_array()


def group_by_dest(const int64_t[::1] dest, Py_ssize_t nprocs):
    """Stable counting sort of items by destination rank.

    Returns ``(perm, counts)``: ``perm`` lists item indices grouped by ascending destination,
    in their original order within a destination; ``counts[d]`` is the number of items for d.
    Raises ``ValueError`` naming the first destination outside ``[0, nprocs)``.
    """
    cdef Py_ssize_t n = dest.shape[0], i
    cdef int64_t d
    counts_arr = np.zeros(nprocs, dtype=np.int64)
    perm_arr = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] counts = counts_arr
    cdef int64_t[::1] perm = perm_arr
    cdef int64_t[::1] start = np.empty(nprocs + 1, dtype=np.int64)
    cdef Py_ssize_t bad = -1
    with nogil:
        for i in range(n):
            d = dest[i]
            if d < 0 or d >= nprocs:
                bad = i
                break
            counts[d] += 1
    if bad >= 0:
        raise ValueError(f"destination {dest[bad]} at position {bad} is outside [0, {nprocs})")
    with nogil:
        start[0] = 0
        for i in range(nprocs):
            start[i + 1] = start[i] + counts[i]
        for i in range(n):
            d = dest[i]
            perm[start[d]] = i
            start[d] += 1
    return perm_arr, counts_arr
