"""Numba-compiled kernels of model training: the softmax-regression loss and its gradient.

Compiled with ``@njit(cache=True)`` and wrapped by a function that checks shapes and labels,
as in :mod:`.linear`.  Oracle: :mod:`hpcbsp.kernels.reference`.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from ._arrays import as_float64, as_index_array


@njit(cache=True)
def _softmax_kernel(w, x, y, grad):  # pragma: no cover - compiled
    """Adds the summed gradient into ``grad``; returns the summed loss.  When ``w`` has one row
    more than ``x`` has columns, that row is the intercept (a feature that is always 1)."""
    m, d = x.shape
    c = w.shape[1]
    intercept = w.shape[0] > d
    z = np.empty(c)
    loss = 0.0
    for i in range(m):
        for k in range(c):
            z[k] = w[d, k] if intercept else 0.0
        for j in range(d):
            xij = x[i, j]
            for k in range(c):
                z[k] += xij * w[j, k]
        zmax = z[0]
        for k in range(1, c):
            if z[k] > zmax:
                zmax = z[k]
        # loss_i = log(sum_k exp z_k) - z_{y_i}, with the max shifted out so exp cannot overflow
        zy = z[y[i]] - zmax
        total = 0.0
        for k in range(c):
            z[k] = np.exp(z[k] - zmax)
            total += z[k]
        loss += np.log(total) - zy
        for k in range(c):
            z[k] /= total
        z[y[i]] -= 1.0
        for j in range(d):
            xij = x[i, j]
            for k in range(c):
                grad[j, k] += xij * z[k]
        if intercept:
            for k in range(c):
                grad[d, k] += z[k]
    return loss


#: The compiled softmax kernel itself, for callers whose arrays are already right (a training
#: loop on mini-batches of a checked data set): contiguous float64 ``w`` of shape (d, C), or
#: (d + 1, C) with its last row the intercept, and ``x`` (m, d); integer labels in ``[0, C)``;
#: ``grad`` zeroed, shaped like ``w``.  Adds the summed gradient into ``grad`` and returns the
#: summed loss, without :func:`softmax_loss_grad`'s checks and conversions (a bad label reads
#: out of bounds).
softmax_loss_grad_sum_into = _softmax_kernel


def softmax_loss_grad(w: Any, x: Any, y: Any, *, average: bool = True, intercept: bool = False,
                      check: bool = True) -> tuple[float, np.ndarray]:
    """Cross-entropy loss and its gradient for softmax regression.

    The model gives class probabilities ``softmax(x[i] @ w)`` (plus the intercept row of ``w``
    with ``intercept``); the loss of sample i is ``-log p[i, y[i]]``.

    Parameters
    ----------
    w : array_like, shape (d, C), or (d + 1, C) with ``intercept``
        Weights; with ``intercept`` the last row is the bias, as if ``x`` had a last column of
        ones (the layout ``W`` then ``b`` of a flat parameter vector, reshaped).
    x : array_like, shape (m, d)
        Data, one sample per row.
    y : array_like of int, shape (m,)
        Labels in ``[0, C)``.
    average : bool
        True: the mean over the m samples (the usual loss); False: the sums, which add up
        across data shards (allreduce them, then divide by the global m).
    intercept : bool
        Whether ``w`` carries a bias row.
    check : bool
        Check every label (one pass; turn off for labels already checked, as a training loop
        calling this on mini-batches of a checked data set may).

    Returns
    -------
    loss : float
    grad : ndarray of float64, shape of ``w``
        ``x.T @ (P - Y)`` (divided by m when ``average``), P the probabilities, Y one-hot; with
        ``intercept`` its last row is the bias's gradient, the column sums of ``P - Y``.
    """
    wm, xm = as_float64(w, "w", 2), as_float64(x, "x", 2)
    labels = as_index_array(y, "label")
    (rows, c), m = wm.shape, xm.shape[0]
    d = rows - 1 if intercept else rows
    if xm.shape[1] != d or labels.shape[0] != m or c < 1 or d < 0:
        need = "w (d + 1, C) with intercept" if intercept else "w (d, C)"
        raise ValueError(f"softmax_loss_grad: w {wm.shape}, x {xm.shape}, y {labels.shape}: "
                         f"need {need}, x (m, d), y (m,)")
    if check:
        bad = np.flatnonzero((labels < 0) | (labels >= c))
        if bad.size:
            raise ValueError(f"softmax_loss_grad: label {labels[bad[0]]} at position {bad[0]} "
                             f"is outside [0, {c})")
    grad = np.zeros((rows, c))
    loss = _softmax_kernel(wm, xm, labels, grad)
    if average and m:
        loss /= m
        grad /= m
    return float(loss), grad
