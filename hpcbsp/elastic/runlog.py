"""What a parameter-server run records: per-worker waits and pushes, staleness, the accuracy curve."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["RunLog", "staleness_summary"]


@dataclass
class RunLog:
    """Counters filled by :class:`hpcbsp.elastic.coordinator.Coordinator` and the run drivers.

    Times are seconds since the run started (virtual seconds in the simulator). A worker's wait
    is the time from its push until the server released it (or told it to stop).
    """

    n_workers: int
    pushes: np.ndarray = field(init=False)
    applied: np.ndarray = field(init=False)
    dropped: np.ndarray = field(init=False)
    wait_s: np.ndarray = field(init=False)
    staleness: list[int] = field(default_factory=list)
    push_times: list[tuple[int, float]] = field(default_factory=list)  # (worker, time) per push
    updates: int = 0
    curve: list[tuple[float, float, float, int]] = field(default_factory=list)  # (time, acc, loss, updates)
    duration_s: float = 0.0

    def __post_init__(self) -> None:
        self.pushes = np.zeros(self.n_workers, dtype=np.int64)
        self.applied = np.zeros(self.n_workers, dtype=np.int64)
        self.dropped = np.zeros(self.n_workers, dtype=np.int64)
        self.wait_s = np.zeros(self.n_workers, dtype=np.float64)

    def record_eval(self, time_s: float, accuracy: float, loss: float, updates: int | None = None) -> None:
        """Append one point of the accuracy-versus-time curve (``updates``: the version of the
        weights evaluated; default the current count)."""
        self.curve.append((float(time_s), float(accuracy), float(loss),
                           int(self.updates if updates is None else updates)))

    def summary(self) -> dict[str, Any]:
        """JSON-ready totals: per-worker lists, staleness statistics, final accuracy."""
        dur = self.duration_s if self.duration_s > 0 else float("nan")
        out: dict[str, Any] = {
            "duration_s": self.duration_s,
            "updates": self.updates,
            "pushes": self.pushes.tolist(),
            "applied": self.applied.tolist(),
            "dropped": self.dropped.tolist(),
            "wait_s": self.wait_s.tolist(),
            "wait_fraction": (self.wait_s / dur).tolist(),
            "staleness": staleness_summary(self.staleness),
        }
        if self.curve:
            out["final_accuracy"] = self.curve[-1][1]
            out["final_loss"] = self.curve[-1][2]
        return out


def staleness_summary(values: list[int] | np.ndarray) -> dict[str, Any]:
    """Mean, median, 95th percentile, max and a histogram (value -> count) of staleness values."""
    v = np.asarray(values, dtype=np.int64)
    if v.size == 0:
        return {"count": 0}
    hist = np.bincount(v)
    return {
        "count": int(v.size),
        "mean": float(v.mean()),
        "median": float(np.median(v)),
        "p95": float(np.percentile(v, 95)),
        "max": int(v.max()),
        "histogram": {int(k): int(c) for k, c in enumerate(hist) if c},
    }
