"""Non-negative least squares, min ||A x − b||₂ subject to x >= 0 (Lawson–Hanson active set).

scipy is not a dependency of hpcbsp, and the cost fits are tiny (a handful of columns), so the
classical active-set method in plain numpy is exact and fast enough.
"""
from __future__ import annotations

import numpy as np


def nnls(a: np.ndarray, b: np.ndarray, *, max_iter: int | None = None,
         tol: float | None = None) -> tuple[np.ndarray, float]:
    """Solve min ||a @ x − b|| with every x_j >= 0.

    Parameters
    ----------
    a : (m, n) array
        Design matrix.  Collinear columns are allowed: the sub-problems are solved with
        ``numpy.linalg.lstsq`` (minimum norm), and a column whose gradient is zero never enters.
    b : (m,) array
        Right-hand side.
    max_iter : int, optional
        Bound on outer iterations (default 3·n); the active-set method terminates far sooner.
    tol : float, optional
        Gradient tolerance for the optimality test (default scaled from machine epsilon).

    Returns
    -------
    x : (n,) array
        The non-negative solution.
    rnorm : float
        The residual norm ||a @ x − b||.
    """
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    if a.ndim != 2 or b.ndim != 1 or a.shape[0] != b.shape[0]:
        raise ValueError(f"nnls needs a (m, n) matrix and an (m,) vector, got {a.shape} and {b.shape}")
    m, n = a.shape
    if tol is None:
        tol = 10.0 * max(m, n) * np.finfo(float).eps * max(1.0, np.abs(a).max(initial=0.0)) \
            * max(1.0, np.abs(b).max(initial=0.0))
    max_iter = 3 * n if max_iter is None else max_iter
    x = np.zeros(n)
    passive = np.zeros(n, dtype=bool)
    w = a.T @ (b - a @ x)  # negative gradient of ½||ax − b||²
    outer = 0
    while (~passive).any() and (w[~passive] > tol).any() and outer < max_iter:
        outer += 1
        # Move the column that most improves the fit into the passive (free) set.
        j = np.flatnonzero(~passive)[np.argmax(w[~passive])]
        passive[j] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if (z[passive] > 0).all():
                break
            # Step from x toward z as far as feasibility allows, then drop the columns that hit 0.
            blocking = passive & (z <= 0)
            alpha = np.min(x[blocking] / (x[blocking] - z[blocking]))
            x = x + alpha * (z - x)
            passive &= x > tol
            x[~passive] = 0.0
        x = z
        w = a.T @ (b - a @ x)
    return x, float(np.linalg.norm(a @ x - b))
