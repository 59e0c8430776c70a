"""Per-worker compute intervals, the input of the DSSP and ElasticBSP predictions.

The papers take a worker's "iteration interval" between two consecutive pushes. A push-to-push
interval also contains the time the worker was held by the server, so here the interval is
measured from the worker's release to its next push: its compute (plus communication) time,
which is what the prediction of its *future* iterations needs. The estimate is the median of the
last ``window`` intervals (``window = 1`` is the papers' latest-interval rule): with 3 or more,
one rare stall does not inflate the next predictions, which a mean or the latest interval would.
"""
from __future__ import annotations

from typing import overload

import numpy as np

__all__ = ["IntervalTracker"]


class IntervalTracker:
    """Release and push times of each worker, and its predicted iteration time."""

    def __init__(self, n_workers: int, window: int, now: float):
        self.window = window
        self.started = np.full(n_workers, now, dtype=np.float64)  # last release time
        self.last_push = np.full(n_workers, np.nan, dtype=np.float64)
        self._ring = np.full((n_workers, window), np.nan, dtype=np.float64)
        self._seen = np.zeros(n_workers, dtype=np.int64)

    def released(self, worker: int, now: float) -> None:
        """Worker ``worker`` starts a new iteration at ``now``."""
        self.started[worker] = now

    def pushed(self, worker: int, now: float) -> None:
        """Worker ``worker`` finished an iteration at ``now``."""
        self._ring[worker, self._seen[worker] % self.window] = now - self.started[worker]
        self._seen[worker] += 1
        self.last_push[worker] = now

    def known(self, worker: int) -> bool:
        """Whether at least one interval of ``worker`` has been observed."""
        return bool(self._seen[worker] > 0)

    @overload
    def estimate(self, worker: None = None) -> np.ndarray: ...

    @overload
    def estimate(self, worker: int) -> float: ...

    def estimate(self, worker: int | None = None) -> np.ndarray | float:
        """Median of the last ``window`` intervals (NaN where none was seen); all workers if None."""
        if worker is None:
            ring = self._ring
            out = np.full(ring.shape[0], np.nan)
            seen = self._seen > 0
            out[seen] = np.nanmedian(ring[seen], axis=1)
            return out
        if self._seen[worker] == 0:
            return float("nan")
        return float(np.nanmedian(self._ring[worker]))
