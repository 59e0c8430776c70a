"""Slow, obviously-correct ZipLine solvers: the tests' oracles and the benchmark's baseline.

* :func:`brute_force` enumerates all ``R**n`` synchronisation sets (tiny instances only) and
  applies the tie rule of :mod:`hpcbsp.elastic.zipline` literally.
* :func:`heap_smallest_range` is the textbook "smallest range covering one element of each of k
  sorted lists" (a min-heap over the row pointers, pure Python ``heapq``): an independent
  ``O(nR log n)`` method for large instances. Its tie-breaking differs, so compare spreads.
"""
from __future__ import annotations

import heapq
import itertools

import numpy as np
from numpy.typing import ArrayLike

from .zipline import SyncSet, validate_matrix

__all__ = ["brute_force", "heap_smallest_range"]


def brute_force(predicted: ArrayLike) -> SyncSet:
    """Try every choice of one column per row; return the canonical optimal set.

    Canonical: smallest spread, then earliest barrier, then the component-wise largest counts
    among the sets with that spread and barrier (each worker runs all it can before the barrier).
    """
    m = validate_matrix(predicted)
    n, R = m.shape
    if R ** n > 2_000_000:
        raise ValueError(f"brute force over R**n = {R}**{n} sets is too large")
    best_key: tuple[float, float] | None = None
    best_counts = np.zeros(n, dtype=np.int64)
    rows = np.arange(n)
    for choice in itertools.product(range(R), repeat=n):
        cols = np.asarray(choice)
        times = m[rows, cols]
        key = (float(times.max() - times.min()), float(times.max()))
        if best_key is None or key < best_key:
            best_key, best_counts = key, cols + 1
        elif key == best_key:
            best_counts = np.maximum(best_counts, cols + 1)
    assert best_key is not None
    return SyncSet(spread=best_key[0], barrier=best_key[1], counts=best_counts.astype(np.int64))


def heap_smallest_range(predicted: ArrayLike) -> SyncSet:
    """Smallest range with one element per row, by advancing the row holding the minimum.

    Returns a set of optimal spread: for the best range found, each worker's last point at or
    before its upper end (which cannot widen it). On ties the barrier may differ from
    :func:`zipline`'s choice, so compare spreads.
    """
    m = validate_matrix(predicted)
    n, R = m.shape
    heap = [(float(m[i, 0]), i, 0) for i in range(n)]
    heapq.heapify(heap)
    high = max(t for t, _, _ in heap)
    best, barrier = np.inf, high
    while True:
        low, i, r = heap[0]
        if high - low < best:
            best, barrier = high - low, high
        if r + 1 == R:
            break  # row i is exhausted: every later range would lack row i's smaller times
        t = float(m[i, r + 1])
        heapq.heapreplace(heap, (t, i, r + 1))
        high = max(high, t)
    counts = np.array([np.searchsorted(row, barrier, side="right") for row in m], dtype=np.int64)
    return SyncSet(spread=float(best), barrier=float(barrier), counts=counts)
