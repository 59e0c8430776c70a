"""What a parameter-server run records: per-worker waits and pushes, staleness, the accuracy curve.

The staleness of every applied gradient is kept as a histogram (:class:`Staleness`: one count
per staleness value, so its memory grows with the largest staleness, not with the updates); its
summary (:func:`staleness_summary`) is exact.  The push times and the accuracy curve are kept
whole, in bounded memory (:class:`~hpcbsp.util.spooled.Spooled`: the newest 4096 rows in memory, older
ones in an unnamed temporary file, 16 or 32 bytes a row): every push time is an output of the
experiment (``pushes.csv``, written from them after the run, row by row), and the curve has one
point per evaluation (``eval_every``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..util.spooled import Spooled

#: A push: (worker, seconds since the run started).
PUSH = np.dtype([("worker", np.int64), ("time_s", np.float64)])
#: A point of the accuracy curve: (seconds, accuracy, loss, updates).
POINT = np.dtype([("time_s", np.float64), ("accuracy", np.float64), ("loss", np.float64), ("updates", np.int64)])

__all__ = ["RunLog", "Staleness", "staleness_summary"]


class Staleness:
    """Staleness values (non-negative ints) as a histogram: ``counts[s]`` values equal ``s``.

    ``extend(values)`` adds values (a Python loop: the coordinator adds one or a few per update,
    where numpy's per-call cost would dominate); ``len`` is how many; ``values()`` gives them back
    sorted (for small runs and tests); two are equal when their histograms are."""

    def __init__(self) -> None:
        self.counts: list[int] = []

    def extend(self, values: Any) -> None:
        counts = self.counts
        for value in values:
            s = int(value)
            if s < 0:
                raise ValueError(f"a staleness below 0 ({s})")
            if s >= len(counts):
                counts.extend([0] * (s + 1 - len(counts)))
            counts[s] += 1

    def __len__(self) -> int:
        return sum(self.counts)

    def values(self) -> np.ndarray:
        """Every value, sorted."""
        return np.repeat(np.arange(len(self.counts), dtype=np.int64), np.asarray(self.counts, dtype=np.int64))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Staleness):
            return NotImplemented
        mine, theirs = list(self.counts), list(other.counts)
        while mine and not mine[-1]:
            mine.pop()
        while theirs and not theirs[-1]:
            theirs.pop()
        return mine == theirs

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Staleness({ {k: c for k, c in enumerate(self.counts) if c} })"


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
    staleness: Staleness = field(default_factory=Staleness)  #: of every applied gradient (a histogram)
    #: (worker, time) per push, in bounded memory (:class:`~hpcbsp.util.spooled.Spooled`, like a list)
    push_times: Spooled = field(default_factory=lambda: Spooled(PUSH))
    updates: int = 0
    #: (time, accuracy, loss, updates) per evaluation, the same way
    curve: Spooled = field(default_factory=lambda: Spooled(POINT))
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


def _at(cumulative: np.ndarray, k: int) -> int:
    """The ``k``-th smallest value (from 0) of a histogram whose cumulative counts are given."""
    return int(np.searchsorted(cumulative, k, side="right"))


def staleness_summary(values: "list[int] | np.ndarray | Staleness") -> dict[str, Any]:
    """Mean, median, 95th percentile, max and a histogram (value -> count) of staleness values
    (numpy's ``mean``, ``median`` and linear ``percentile``, computed from the histogram)."""
    hist = (np.asarray(values.counts, dtype=np.int64) if isinstance(values, Staleness)
            else np.bincount(np.asarray(values, dtype=np.int64)))
    n = int(hist.sum())
    if n == 0:
        return {"count": 0}
    cum = np.cumsum(hist)
    middle = (_at(cum, (n - 1) // 2) + _at(cum, n // 2)) / 2
    pos = 0.95 * (n - 1)
    lo = int(np.floor(pos))
    p95 = float(np.quantile(np.array([_at(cum, lo), _at(cum, min(lo + 1, n - 1))], dtype=np.float64), pos - lo))
    return {
        "count": n,
        "mean": float(np.dot(np.arange(hist.size, dtype=np.int64), hist) / n),
        "median": float(middle),
        "p95": p95,
        "max": int(np.flatnonzero(hist)[-1]),
        "histogram": {int(k): int(c) for k, c in enumerate(hist) if c},
    }
