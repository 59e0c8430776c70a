"""Numba-compiled sparse and dense linear algebra of the applications: the CSR matrix-vector
product and Jacobi sweeps on a block of rows (dense and CSR).

Every kernel is ``@njit(cache=True)`` (compiled once per machine, cached on disk; the cache
folder follows ``NUMBA_CACHE_DIR``) and is wrapped by a function that checks shapes, indices
and diagonals and converts its input to the one compiled signature (float64 values, int64
indices, contiguous), so a bad input raises a clear error instead of reading out of bounds.
With ``NUMBA_DISABLE_JIT=1`` the same code runs as plain Python.  Oracles:
:mod:`hpcbsp.kernels.reference`.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from ._arrays import as_float64, as_index_array, output_array


@njit(cache=True)
def _first_bad_csr_index(indices, ncols):  # pragma: no cover - compiled
    for k in range(indices.shape[0]):
        if indices[k] < 0 or indices[k] >= ncols:
            return k
    return -1


@njit(cache=True)
def _csr_matvec_kernel(indptr, indices, data, x, out):  # pragma: no cover - compiled
    for i in range(out.shape[0]):
        acc = 0.0
        for k in range(indptr[i], indptr[i + 1]):
            acc += data[k] * x[indices[k]]
        out[i] = acc


@njit(cache=True)
def _jacobi_dense_kernel(a_rows, b, x, row0, out):  # pragma: no cover - compiled
    n = a_rows.shape[1]
    for r in range(a_rows.shape[0]):
        i = row0 + r
        acc = 0.0
        # Two loops around the diagonal rather than subtracting it afterwards: no cancellation.
        for j in range(i):
            acc += a_rows[r, j] * x[j]
        for j in range(i + 1, n):
            acc += a_rows[r, j] * x[j]
        out[r] = (b[r] - acc) / a_rows[r, i]


@njit(cache=True)
def _jacobi_csr_kernel(indptr, indices, data, b, x, row0, out):  # pragma: no cover - compiled
    """Returns -1, or the first local row whose diagonal is missing or zero."""
    for r in range(out.shape[0]):
        i = row0 + r
        acc = 0.0
        diag = 0.0
        for k in range(indptr[r], indptr[r + 1]):
            j = indices[k]
            if j == i:
                diag += data[k]  # duplicate entries add up, as in the matrix they describe
            else:
                acc += data[k] * x[j]
        if diag == 0.0:
            return r
        out[r] = (b[r] - acc) / diag
    return -1


def _csr(indptr: Any, indices: Any, data: Any, ncols: int, nrows: int | None, what: str,
         check: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    ptr = as_index_array(indptr, "indptr")
    ind = as_index_array(indices, "column index")
    val = as_float64(data, "data", 1)
    if ptr.shape[0] < 1 or (nrows is not None and ptr.shape[0] != nrows + 1):
        raise ValueError(f"{what}: indptr has {ptr.shape[0]} entries"
                         + (f", expected {nrows + 1}" if nrows is not None else ""))
    if ind.shape[0] != val.shape[0] or ptr[-1] != ind.shape[0] or ptr[0] != 0:
        raise ValueError(f"{what}: inconsistent CSR arrays (indptr[0]={ptr[0]}, "
                         f"indptr[-1]={ptr[-1]}, {ind.shape[0]} indices, {val.shape[0]} values)")
    if check:
        if ptr.shape[0] > 1 and np.any(ptr[1:] < ptr[:-1]):
            raise ValueError(f"{what}: indptr is not non-decreasing")
        bad = _first_bad_csr_index(ind, ncols)
        if bad >= 0:
            raise IndexError(f"{what}: column index {ind[bad]} at position {bad} is out of "
                             f"bounds for {ncols} columns")
    return ptr, ind, val


def csr_matvec(indptr: Any, indices: Any, data: Any, x: Any, out: np.ndarray | None = None,
               *, check: bool = True) -> np.ndarray:
    """Sparse matrix-vector product ``y = A @ x`` with A in CSR form.

    Parameters
    ----------
    indptr, indices, data : array_like
        The CSR arrays of A (as ``scipy.sparse.csr_matrix`` holds them): row ``i`` has the
        entries ``data[indptr[i]:indptr[i+1]]`` in columns ``indices[...]``; duplicates add.
    x : array_like
        Vector of length ``ncols`` (the column count of A).
    out : ndarray of float64, optional
        Where to write ``y`` (length ``len(indptr) - 1``).
    check : bool
        Check that indptr is non-decreasing and every column index lies in ``[0, len(x))``
        (one pass over the indices; turn off for a matrix already checked).

    Returns
    -------
    ndarray of float64
        ``y``.
    """
    vec = as_float64(x, "x", 1)
    ptr, ind, val = _csr(indptr, indices, data, vec.shape[0], None, "csr_matvec", check)
    y = output_array(out, (ptr.shape[0] - 1,), "csr_matvec")
    _csr_matvec_kernel(ptr, ind, val, vec, y)
    return y


def jacobi_sweep_dense(a_rows: Any, b: Any, x: Any, row0: int,
                       out: np.ndarray | None = None) -> np.ndarray:
    """One Jacobi sweep over a block of rows of a dense system ``A x = b``.

    For the block's rows ``i = row0 .. row0 + nb - 1``:
    ``x_new[i] = (b[i] - sum_{j != i} A[i, j] x[j]) / A[i, i]``.

    Parameters
    ----------
    a_rows : array_like, shape (nb, n)
        Rows ``row0 ..`` of A, with global column numbering.
    b : array_like, shape (nb,)
        The block's right-hand side.
    x : array_like, shape (n,)
        The current iterate (all of it).
    row0 : int
        Global index of the block's first row.
    out : ndarray of float64, optional
        Where to write the block's new values.

    Returns
    -------
    ndarray of float64, shape (nb,)
        The new values of ``x[row0 : row0 + nb]``.

    Raises
    ------
    ValueError
        For mismatched shapes, a block outside A, or a zero diagonal (naming the row).
    """
    a = as_float64(a_rows, "a_rows", 2)
    rhs, vec = as_float64(b, "b", 1), as_float64(x, "x", 1)
    nb, n = a.shape
    if vec.shape[0] != n or rhs.shape[0] != nb or not 0 <= row0 <= n - nb:
        raise ValueError(f"jacobi_sweep_dense: block of {nb} rows at row {row0} with {n} "
                         f"columns, b of length {rhs.shape[0]}, x of length {vec.shape[0]}")
    rows = np.arange(nb)
    zero = np.flatnonzero(a[rows, row0 + rows] == 0)
    if zero.size:
        raise ValueError(f"jacobi_sweep_dense: zero diagonal in row {row0 + zero[0]}")
    y = output_array(out, (nb,), "jacobi_sweep_dense")
    _jacobi_dense_kernel(a, rhs, vec, row0, y)
    return y


def jacobi_sweep_csr(indptr: Any, indices: Any, data: Any, b: Any, x: Any, row0: int,
                     out: np.ndarray | None = None, *, check: bool = True) -> np.ndarray:
    """One Jacobi sweep over a block of rows held in CSR form (global column numbering).

    The same update as :func:`jacobi_sweep_dense`; the CSR arrays describe the block's
    ``nb = len(b)`` rows, and duplicate entries add up (also on the diagonal).  ``check``
    as in :func:`csr_matvec`.

    Raises
    ------
    ValueError
        For inconsistent arrays or a missing or zero diagonal (naming the global row).
    IndexError
        For a column index outside ``[0, len(x))`` (when ``check``).
    """
    rhs, vec = as_float64(b, "b", 1), as_float64(x, "x", 1)
    nb, n = rhs.shape[0], vec.shape[0]
    if not 0 <= row0 <= n - nb:
        raise ValueError(f"jacobi_sweep_csr: block of {nb} rows at row {row0} outside {n} rows")
    ptr, ind, val = _csr(indptr, indices, data, n, nb, "jacobi_sweep_csr", check)
    y = output_array(out, (nb,), "jacobi_sweep_csr")
    bad = _jacobi_csr_kernel(ptr, ind, val, rhs, vec, row0, y)
    if bad >= 0:
        raise ValueError(f"jacobi_sweep_csr: zero or missing diagonal in row {row0 + bad}")
    return y
