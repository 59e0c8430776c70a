"""DSSP(s_L, s_U): SSP with bound ``s_L`` plus extra iterations granted to the fastest worker.

Zhao et al., ICDCS 2019 (``shared/notes/elasticbsp.md`` §3). When the fastest worker crosses the
lower bound, the synchronisation controller predicts its next iterations and the slowest
worker's, and lets it run the ``r*`` in ``0..s_U - s_L`` more iterations that bring one of its
push times closest to one of the slowest worker's: it then waits little when it is finally held.
Choosing ``r*`` is ZipLine on two rows, and is computed with :func:`hpcbsp.elastic.zipline.zipline`.
"""
from __future__ import annotations

import numpy as np

from ..zipline import zipline
from .base import Decision, SyncPolicy
from .clocks import HeldByCount, PushClock
from .intervals import IntervalTracker

__all__ = ["DSSP", "extra_iterations"]


def extra_iterations(now: float, fast_interval: float, slow_start: float, slow_interval: float,
                     r_cap: int) -> int:
    """The DSSP synchronisation controller: how many more iterations the fast worker may run.

    Rows for ZipLine: the fast worker's end times ``now + r * fast_interval`` for ``r = 0..r_cap``
    (``r = 0`` is holding it now) and the slowest worker's next ``r_cap + 1`` end times
    ``slow_start + k * slow_interval``, ``k = 1..r_cap+1``. The answer ``r*`` is the fast
    worker's column in the closest pair, the smallest ``|slow_k - fast_r|`` (ties: earliest).
    Returns 0 when ``r_cap <= 0`` or an interval is unknown (NaN).
    """
    if r_cap <= 0 or np.isnan(fast_interval) or np.isnan(slow_interval):
        return 0
    steps = np.arange(r_cap + 1, dtype=np.float64)
    rows = np.vstack([now + steps * fast_interval, slow_start + (steps + 1) * slow_interval])
    return int(zipline(rows).counts[0]) - 1


class DSSP(SyncPolicy):
    """Dynamic SSP. Invariant: a worker is released only when ``t[w] - min(t) <= s_U``.

    The paper re-runs the controller whenever the fastest worker is beyond ``s_L``; to keep the
    ``s_U`` bound when the same worker is granted again, a grant at gap ``g`` is capped at
    ``s_U - g + 1`` iterations (``s_U - s_L`` for the usual first crossing, ``g = s_L + 1``).
    """

    name = "dssp"
    PARAMETERS = {"s_lower": "s_L", "s_upper": "s_U", "window": None}

    def __init__(self, s_lower: int, s_upper: int, window: int = 1):
        super().__init__()
        self.s_lower = s_lower
        self.s_upper = s_upper
        self.window = window

    def start(self, n_workers: int, now: float) -> None:
        self.clock = PushClock(n_workers)
        self.held = HeldByCount()
        self.extra = [0] * n_workers
        self.intervals = IntervalTracker(n_workers, self.window, now)
        self._stats.update(grants=0, granted_iterations=0)

    def on_push(self, worker: int, now: float) -> Decision:
        self.intervals.pushed(worker, now)
        min_rose = self.clock.tick(worker)
        release = []
        if self.extra[worker] > 0:
            self.extra[worker] -= 1
            release.append(worker)
        elif self.clock.ahead(worker) <= self.s_lower:
            release.append(worker)
        elif self.clock.t[worker] == self.clock.high and (r := self.controller(worker, now)) > 0:
            self.extra[worker] = r - 1  # this release is the first of the r granted iterations
            self._stats["grants"] += 1
            self._stats["granted_iterations"] += r
            release.append(worker)
        else:
            self.held.hold(worker, self.clock.t[worker])
        if min_rose:
            release.extend(self.held.pop(self.clock.low + self.s_lower))
        for w in release:
            self.intervals.released(w, now)
        return Decision(apply=(worker,), release=tuple(release))

    def controller(self, fast: int, now: float) -> int:
        """Extra iterations for the fastest worker ``fast``, pushing at ``now`` (0 = hold it).

        The slowest worker is always computing (it is never beyond any bound), so its current
        iteration started at its last release.
        """
        r_cap = min(self.s_upper - self.s_lower, self.s_upper - self.clock.ahead(fast) + 1)
        slow = self.clock.slowest()
        return extra_iterations(now, self.intervals.estimate(fast), float(self.intervals.started[slow]),
                                self.intervals.estimate(slow), r_cap)
