"""Plain numpy (and math) reference implementations of every kernel: the tests' oracles.

Each function states the intended result as directly as numpy allows, with no attention to
speed; the compiled kernels must agree with it exactly (integer and indexing kernels, exact
summation) or to rounding (floating-point reductions and the Numba kernels).
"""
from __future__ import annotations

import builtins
import math
from fractions import Fraction

import numpy as np


def group_by_dest(dest: np.ndarray, nprocs: int) -> tuple[np.ndarray, np.ndarray]:
    """``(np.argsort(dest, kind="stable"), np.bincount(dest, minlength=nprocs))``."""
    dest = np.asarray(dest).reshape(-1)
    if dest.size and (dest.min() < 0 or dest.max() >= nprocs):
        raise ValueError("destination out of range")
    perm = np.argsort(dest, kind="stable").astype(np.int64)
    counts = np.bincount(dest.astype(np.int64), minlength=nprocs).astype(np.int64)
    return perm, counts


def wrap_envelopes(recs: np.ndarray, dests, me: int, wire: np.dtype) -> np.ndarray:
    """Envelopes by numpy's structured assignment: ``to`` = dests, ``from`` = me, ``rec`` = recs."""
    out = np.zeros(len(recs), dtype=wire)
    out["to"] = dests
    if "from" in (wire.names or ()):
        out["from"] = me
    out["rec"] = recs
    return out


def split_envelopes(env: np.ndarray, me: int, hops: np.ndarray, dtype: np.dtype):
    """``(mine, origins, passing, next_hops)`` by boolean masks (arrival order kept)."""
    here = env["to"] == me
    origins = env["from"][here].copy() if "from" in (env.dtype.names or ()) else None
    away = env[~here]
    return env["rec"][here].astype(dtype), origins, away, np.asarray(hops)[away["to"]]


def element_puts(tables: list[np.ndarray], dest: np.ndarray, offset: np.ndarray, values: np.ndarray) -> None:
    """What packing element puts by destination and applying them must do: one put at a time,
    in program order (the later of two puts to one element wins)."""
    for d, o, v in zip(dest.tolist(), offset.tolist(), values):
        tables[d][o] = v


def sgd_step(w: np.ndarray, g: np.ndarray, lr: float) -> None:
    """``w -= lr * g`` in numpy's two passes (the product rounded to ``w``'s dtype, then the
    difference)."""
    t = g * lr  # lr a Python float: rounded to the arrays' dtype first (NEP 50)
    w -= t


def scatter_add(table: np.ndarray, idx: np.ndarray, values) -> None:
    """``np.add.at(table, idx, values)``."""
    np.add.at(table, idx, values)


def gather(table: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``table[idx]``."""
    return table[np.asarray(idx)]


def sum(x: np.ndarray) -> float | int:  # noqa: A001 - mirrors the kernel's name
    """``np.sum`` in float64 for floats; exact Python-int sum modulo 2**64 for integers."""
    x = np.asarray(x)
    if x.dtype.kind == "f":
        return float(np.sum(x, dtype=np.float64))
    total = int(np.sum(x.astype(object))) if x.size else 0
    if x.dtype == np.uint64:
        return total % (1 << 64)
    return (total + (1 << 63)) % (1 << 64) - (1 << 63)  # int64 wrap-around


def dot(x: np.ndarray, y: np.ndarray) -> float:
    """``np.dot`` of the flattened arrays in float64."""
    return float(np.dot(np.asarray(x, dtype=np.float64).ravel(), np.asarray(y, dtype=np.float64).ravel()))


def sqnorm(x: np.ndarray) -> float:
    """``np.dot(x, x)`` in float64."""
    return dot(x, x)


def minmax(x: np.ndarray) -> tuple:
    """``(np.min(x), np.max(x))`` (NaN if any NaN)."""
    x = np.asarray(x)
    return x.min(), x.max()


def exact_sum(x: np.ndarray) -> float:
    """The correctly rounded sum: ``math.fsum``, with IEEE special values and no spurious
    overflow (an exact rational sum when ``math.fsum`` overflows in an intermediate step)."""
    vals = [float(v) for v in np.asarray(x, dtype=np.float64).ravel()]
    if any(math.isnan(v) for v in vals):
        return math.nan
    pos, neg = math.inf in vals, -math.inf in vals
    if pos and neg:
        return math.nan
    if pos or neg:
        return math.inf if pos else -math.inf
    try:
        return math.fsum(vals)
    except OverflowError:
        exact = builtins.sum(Fraction(v) for v in vals)
        try:
            return float(exact)  # Fraction -> float is correctly rounded
        except OverflowError:
            return math.inf if exact > 0 else -math.inf


def csr_matvec(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``A @ x`` for the CSR matrix ``(indptr, indices, data)``, via a dense matrix."""
    return csr_to_dense(indptr, indices, data, len(x)) @ np.asarray(x, dtype=np.float64)


def csr_to_dense(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, ncols: int) -> np.ndarray:
    """The dense matrix of a CSR triple (duplicate entries add up)."""
    nrows = len(indptr) - 1
    dense = np.zeros((nrows, ncols))
    rows = np.repeat(np.arange(nrows), np.diff(indptr))
    np.add.at(dense, (rows, np.asarray(indices)), np.asarray(data, dtype=np.float64))
    return dense


def jacobi_sweep_dense(a_rows: np.ndarray, b: np.ndarray, x: np.ndarray, row0: int) -> np.ndarray:
    """``(b - (A x - diag * x_diag)) / diag`` for the rows ``row0 ..`` of A held in ``a_rows``."""
    a_rows = np.asarray(a_rows, dtype=np.float64)
    rows = np.arange(a_rows.shape[0])
    diag = a_rows[rows, row0 + rows]
    off = a_rows @ x - diag * x[row0 + rows]
    return (np.asarray(b, dtype=np.float64) - off) / diag


def jacobi_sweep_csr(indptr, indices, data, b, x, row0: int) -> np.ndarray:
    """The Jacobi sweep of a row block held in CSR form (see :func:`jacobi_sweep_dense`)."""
    return jacobi_sweep_dense(csr_to_dense(indptr, indices, data, len(x)), b, x, row0)


def softmax_loss_grad(w: np.ndarray, x: np.ndarray, y: np.ndarray, average: bool = True,
                      intercept: bool = False):
    """Cross-entropy loss and gradient of softmax regression ``softmax(x @ w)``; with
    ``intercept``, ``x`` gets a last column of ones (the bias row of ``w``)."""
    x = np.asarray(x, dtype=np.float64)
    if intercept:
        x = np.hstack([x, np.ones((x.shape[0], 1))])
    z = x @ np.asarray(w, dtype=np.float64)
    z = z - z.max(axis=1, keepdims=True)
    lse = np.log(np.exp(z).sum(axis=1))
    m = x.shape[0]
    loss = float(np.sum(lse - z[np.arange(m), y]))
    p = np.exp(z - lse[:, None])
    p[np.arange(m), y] -= 1.0
    grad = x.T @ p
    if average and m:
        loss, grad = loss / m, grad / m
    return loss, grad



def toposort_settle(rows, claimed, col_ptr, col_rows, p: int, me: int, records: np.ndarray) -> np.ndarray:
    """toposort's local elimination a whole frontier at a time (``Elimination.settle``): ``rows``
    (columns colsum, count, level, pivot_col) and ``claimed`` are updated in place; returns the
    other ranks' records (shrinks ``(row, col, level)``, pivots ``(col, level, -1 - row)``) as a
    (k, 3) int64 array, in frontier order (the kernel's order may differ within one)."""
    colsum, count, level, pivot_col = (rows[:, i] for i in range(4))
    recs = np.asarray(records, dtype=np.int64).reshape(-1, 3)
    shr, piv = recs[recs[:, 2] >= 0], recs[recs[:, 2] < 0].copy()
    piv[:, 2] = -1 - piv[:, 2]                         # (col, level, row) from here on
    out = [np.empty((0, 3), dtype=np.int64)]
    while piv.size or shr.size:
        if shr.size:
            local = shr[:, 0] // p
            np.subtract.at(count, local, 1)
            np.subtract.at(colsum, local, shr[:, 1])
            np.maximum.at(level, local, shr[:, 2])
            ready = np.unique(local[(count[local] == 1) & ~claimed[local]])
            claimed[ready] = True
            pivot_col[ready] = colsum[ready]
            piv = np.concatenate([piv, np.stack([colsum[ready], level[ready], ready * p + me], axis=1)])
        mine = piv[:, 0] % p == me
        away = piv[~mine].copy()
        away[:, 2] = -1 - away[:, 2]
        out.append(away)
        piv = piv[mine]
        c = piv[:, 0] // p
        lens = col_ptr[c + 1] - col_ptr[c]
        others = col_rows[np.concatenate([np.empty(0, dtype=np.int64)]
                                         + [np.arange(col_ptr[k], col_ptr[k + 1]) for k in c])]
        new = np.stack([others, np.repeat(piv[:, 0], lens), np.repeat(piv[:, 1] + 1, lens)], axis=1)
        new = new[others != np.repeat(piv[:, 2], lens)]
        mine = new[:, 0] % p == me
        out.append(new[~mine])
        shr, piv = new[mine], np.empty((0, 3), dtype=np.int64)
    return np.concatenate(out)
