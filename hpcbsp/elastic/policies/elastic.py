"""ElasticBSP(R): bulk barriers placed by ZipLine, each worker running its own number of iterations.

Zhao et al., ICDM 2019 / Machine Learning 2021 (``shared/notes/elasticbsp.md`` §1). At every
barrier the server predicts each worker's next ``R`` iteration end times from its compute
interval, runs ZipLine, and gives worker ``i`` a target of ``counts[i]`` further iterations. Until
a worker reaches its target its gradients are applied on arrival and it is released at once
(ASP inside a superstep); at its target it is held; when all are held, everyone is released
together with the same weights: the bulk barrier.

Choices the papers leave open (documented in the notes' §9), made here:

* the first superstep is one iteration each (a BSP step) to observe every worker's interval;
* all workers leave a barrier at the same moment, so the prediction starts from the barrier
  time: ``M[i, r-1] = barrier + r * I_i``;
* the final gradient at a worker's target is applied on arrival like the others.

So a worker runs at most ``R`` iterations per superstep and every superstep starts from weights
identical on all workers.
"""
from __future__ import annotations

import time

import numpy as np

from ..zipline import predict_end_times, zipline
from .base import Decision, SyncPolicy
from .intervals import IntervalTracker

__all__ = ["ElasticBSP"]


class ElasticBSP(SyncPolicy):
    """Elastic bulk synchronisation with lookahead ``R``.

    ``stats`` reports the number of barriers, the mean iterations per worker and superstep, and
    how the ZipLine plan compared with what happened: mean absolute error of the predicted
    barrier time, mean predicted spread and mean actual spread (longest wait) per barrier.
    """

    name = "elastic"
    PARAMETERS = {"R": "R", "window": None}

    def __init__(self, R: int, window: int = 3):
        super().__init__()
        self.R = R
        self.window = window

    def start(self, n_workers: int, now: float) -> None:
        self.t = np.zeros(n_workers, dtype=np.int64)
        self.target = np.ones(n_workers, dtype=np.int64)  # monitoring superstep: one iteration
        self.intervals = IntervalTracker(n_workers, self.window, now)
        self._arrivals: list[float] = []
        self._plan: tuple[float, float] | None = None  # (predicted barrier, predicted spread)
        self.history: list[dict[str, float]] = []
        self.last_counts = self.target.copy()
        self._zipline_s = 0.0
        self._iterations = 0

    def on_push(self, worker: int, now: float) -> Decision:
        self.intervals.pushed(worker, now)
        self.t[worker] += 1
        if self.t[worker] < self.target[worker]:
            self.intervals.released(worker, now)
            return Decision(apply=(worker,), release=(worker,))
        self._arrivals.append(now)
        if len(self._arrivals) < self.n_workers:
            return Decision(apply=(worker,))
        self._record_barrier(now)
        self._plan_next(now)
        everyone = tuple(range(self.n_workers))
        for w in everyone:
            self.intervals.released(w, now)
        return Decision(apply=(worker,), release=everyone)

    def _record_barrier(self, now: float) -> None:
        entry = {"time": now, "actual_spread": now - min(self._arrivals),
                 "iterations": float(self.last_counts.sum())}
        if self._plan is not None:
            entry["predicted_time"], entry["predicted_spread"] = self._plan
        self.history.append(entry)
        self._iterations += int(self.last_counts.sum())
        self._arrivals.clear()

    def _plan_next(self, now: float) -> None:
        interval = self.intervals.estimate()
        tic = time.perf_counter()
        sync = zipline(predict_end_times(np.full(self.n_workers, now), interval, self.R))
        self._zipline_s += time.perf_counter() - tic
        self.target = self.t + sync.counts
        self.last_counts = sync.counts
        self._plan = (sync.barrier, sync.spread)

    @property
    def stats(self) -> dict[str, float]:
        planned = [h for h in self.history if "predicted_time" in h]
        out: dict[str, float] = {"barriers": len(self.history), "zipline_seconds": self._zipline_s}
        if self.history:
            out["iterations_per_worker_per_superstep"] = self._iterations / (len(self.history) * self.n_workers)
            out["mean_actual_spread"] = float(np.mean([h["actual_spread"] for h in self.history]))
        if planned:
            out["mean_predicted_spread"] = float(np.mean([h["predicted_spread"] for h in planned]))
            out["mean_abs_barrier_error"] = float(np.mean([abs(h["time"] - h["predicted_time"]) for h in planned]))
        return out
