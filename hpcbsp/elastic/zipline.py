"""ZipLine: place the next ElasticBSP barrier where the predicted arrivals are closest together.

Input: an ``n x R`` matrix ``M`` whose row ``i`` holds the predicted end times of worker ``i``'s
next ``R`` iterations (non-decreasing along a row). A synchronisation set takes one column per
row, ``r_i`` in ``1..R`` (column ``r_i - 1``); its barrier is the largest chosen time and its
spread ``max - min`` is the longest time any worker would wait at that barrier. ZipLine returns
the set of smallest spread.

Ties are broken towards the *earliest* set: among the sets of smallest spread, the one whose
barrier is earliest, and for that barrier each worker runs as many iterations as it can finish
by then (the largest ``r_i`` with ``M[i, r_i - 1] <= barrier``). That set is unique, so every
correct solver (the tests' brute force included) returns the same counts.

The method is the ZipLineOptBS sweep of Zhao et al. (see ``shared/notes/elasticbsp.md`` §1.6-1.7):
merge the ``n`` sorted rows onto one time line with a tournament (loser) tree, ``log2 n``
comparisons per point, ``O(nR log n)`` in all, and keep the set ``Z`` of each worker's latest
point seen so far. The points enter ``Z`` in time order, so ``Z`` is a queue in which a worker's
older point is superseded rather than removed: ``min(Z)`` is the first still-current entry,
found by advancing a head pointer (amortised ``O(1)``), which replaces the paper's binary
search. ``O(nR)`` memory; compiled with Numba.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit
from numpy.typing import ArrayLike

__all__ = ["SyncSet", "zipline", "predict_end_times", "validate_matrix"]


@dataclass(frozen=True)
class SyncSet:
    """One synchronisation set chosen by ZipLine.

    Attributes
    ----------
    spread : float
        ``max - min`` of the chosen end times: the longest predicted wait at the barrier.
    barrier : float
        The predicted barrier time (the largest chosen end time).
    counts : numpy.ndarray
        int64, shape ``(n,)``: worker ``i`` runs ``counts[i]`` further iterations (1-based, so its
        chosen end time is ``M[i, counts[i] - 1]``).
    """

    spread: float
    barrier: float
    counts: np.ndarray

    def waits(self, predicted: ArrayLike) -> np.ndarray:
        """Predicted wait of each worker at the barrier: ``barrier - M[i, counts[i] - 1]``."""
        m = np.asarray(predicted, dtype=np.float64)
        return self.barrier - m[np.arange(m.shape[0]), self.counts - 1]


def validate_matrix(predicted: ArrayLike) -> np.ndarray:
    """Return ``predicted`` as a C-contiguous float64 ``n x R`` matrix, or raise ValueError.

    Rows must be finite and non-decreasing (they are end times of successive iterations), with
    ``n >= 1`` and ``R >= 1``.
    """
    m = np.ascontiguousarray(predicted, dtype=np.float64)
    if m.ndim != 2 or m.shape[0] < 1 or m.shape[1] < 1:
        raise ValueError(f"ZipLine needs an n x R matrix with n >= 1 and R >= 1, got shape {m.shape}")
    if not np.all(np.isfinite(m)):
        raise ValueError("ZipLine: predicted end times must be finite")
    if m.shape[1] > 1 and np.any(np.diff(m, axis=1) < 0):
        raise ValueError("ZipLine: each row of predicted end times must be non-decreasing")
    return m


def zipline(predicted: ArrayLike) -> SyncSet:
    """Find the synchronisation set of smallest spread (ties: the earliest), in ``O(nR log n)``.

    Parameters
    ----------
    predicted : array_like, shape (n, R)
        ``predicted[i, r]`` is the predicted end time of worker ``i``'s ``(r+1)``-th next
        iteration; rows non-decreasing.

    Returns
    -------
    SyncSet
        ``spread``, ``barrier`` and 1-based ``counts``.
    """
    m = validate_matrix(predicted)
    spread, barrier, counts = _sweep(m)
    return SyncSet(spread=float(spread), barrier=float(barrier), counts=counts)


def predict_end_times(start: ArrayLike, interval: ArrayLike, R: int) -> np.ndarray:
    """The constant-interval prediction ``M[i, r-1] = start[i] + r * interval[i]``, ``r = 1..R``.

    ``start`` is when each worker begins its next iteration and ``interval`` its predicted
    iteration time (the DSSP/ElasticBSP assumption: recent intervals repeat).
    """
    if R < 1:
        raise ValueError(f"R must be at least 1, got {R}")
    s = np.asarray(start, dtype=np.float64).reshape(-1, 1)
    d = np.asarray(interval, dtype=np.float64).reshape(-1, 1)
    return s + d * np.arange(1, R + 1, dtype=np.float64)


@njit(cache=True)
def _build(key, tree, n):
    # Loser tree over the rows: node k (1..n-1) has children 2k and 2k+1; position n+i is the
    # leaf of row i. Internal nodes keep the loser of their match, tree[0] the overall winner.
    win = np.empty(2 * n, dtype=np.int64)
    for i in range(n):
        win[n + i] = i
    for node in range(n - 1, 0, -1):
        a = win[2 * node]
        b = win[2 * node + 1]
        if key[b] < key[a]:
            win[node], tree[node] = b, a
        else:
            win[node], tree[node] = a, b
    tree[0] = win[1] if n > 1 else 0


@njit(cache=True)
def _replay(key, tree, n, i):
    # Row i's key changed: replay its matches up to the root, one comparison per level. The
    # selects instead of branches let the compiler emit conditional moves: the outcomes are
    # unpredictable, and mispredicted branches cost more than the comparisons themselves.
    node = (n + i) >> 1
    w = i
    kw = key[i]
    while node > 0:
        other = tree[node]
        ko = key[other]
        swap = ko < kw
        tree[node] = w if swap else other
        w = other if swap else w
        kw = ko if swap else kw
        node >>= 1
    tree[0] = w


@njit(cache=True)
def _sweep(m):
    n, R = m.shape
    ptr = np.zeros(n, dtype=np.int64)
    key = m[:, 0].copy()  # each row's next time; +inf once the row is exhausted
    tree = np.zeros(n, dtype=np.int64)
    _build(key, tree, n)
    # No barrier at time t can have min(Z) above the earliest last point of any row, so once
    # t - that bound reaches the best spread, no later barrier can improve on it.
    floor_of_min = m[0, R - 1]
    for i in range(1, n):
        floor_of_min = min(floor_of_min, m[i, R - 1])
    # Z as a queue in time order: entry k holds worker q_w[k]; cur[i] is the queue index of
    # worker i's current (latest) point, so entry k is stale once cur[q_w[k]] != k.
    q_w = np.empty(n * R, dtype=np.int64)
    cur = np.full(n, -1, dtype=np.int64)
    head = 0
    tail = 0
    seen = 0
    best = np.inf
    best_barrier = np.nan
    while True:
        i = tree[0]
        t = key[i]
        if t == np.inf or t - floor_of_min >= best:
            break
        q_w[tail] = i
        if cur[i] < 0:
            seen += 1
        cur[i] = tail
        tail += 1
        ptr[i] += 1
        key[i] = m[i, ptr[i]] if ptr[i] < R else np.inf
        if n > 1:
            _replay(key, tree, n, i)
        # Evaluate once all points at time t are in Z (equal times leave the tree in any order
        # across rows): Z is then each worker's last point at or before t, the canonical set
        # for barrier t, whose spread is at most that of any partial set at the same t.
        if seen < n or key[tree[0]] == t:
            continue
        while cur[q_w[head]] != head:
            head += 1
        d = t - m[q_w[head], ptr[q_w[head]] - 1]
        if d < best:  # strict: an equal spread later in time never replaces the earlier set
            best = d
            best_barrier = t
    # Recover the counts from the barrier instead of copying Z at every improvement: the
    # canonical set takes each worker's last point at or before the barrier.
    counts = np.empty(n, dtype=np.int64)
    for i in range(n):
        counts[i] = np.searchsorted(m[i], best_barrier, side="right")
    return best, best_barrier, counts
