"""How long each worker's iteration takes: per-worker speed, jitter, a speed change, rare stalls.

One model serves both the virtual-clock simulator (where the sample *is* the iteration time) and
the MPI workers (which sleep until the sample has elapsed), so a real run reproduces the
simulated heterogeneity as closely as a shared 2-core machine allows.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["TimingModel", "WorkerTimes"]


@dataclass(frozen=True)
class TimingModel:
    """Iteration time of worker ``i`` started at time ``t``::

        base_s * slowdown[i] * lognormal(0, jitter) * (change_factor if i == change_worker and
        t >= change_at) * (stall_factor with probability stall_prob)

    Attributes
    ----------
    base_s : float
        Iteration time of a worker with slowdown 1, in seconds.
    slowdown : tuple of float
        One multiplier per worker (its length is the number of workers).
    jitter : float
        Sigma of the multiplicative lognormal noise (0: deterministic).
    change_at : float or None
        Time of the mid-run speed change (None: none).
    change_worker, change_factor : int, float
        Which worker changes speed, and by what factor.
    stall_prob, stall_factor : float
        Probability that an iteration stalls, and how much longer a stalled iteration takes.
    seed : int
        Seed; worker ``i`` draws from its own stream, so the draws do not depend on event order.
    """

    base_s: float = 0.02
    slowdown: tuple[float, ...] = (1.0, 1.0, 1.5, 3.0)
    jitter: float = 0.1
    change_at: float | None = None
    change_worker: int = 0
    change_factor: float = 2.0
    stall_prob: float = 0.0
    stall_factor: float = 10.0
    seed: int = 0

    def __post_init__(self) -> None:
        if not (np.isfinite(self.base_s) and self.base_s >= 0):
            raise ValueError(f"base iteration time must be a finite number >= 0, got {self.base_s}")
        if not self.slowdown or any(not np.isfinite(x) or x <= 0 for x in self.slowdown):
            raise ValueError(f"slowdowns must be positive numbers, got {list(self.slowdown)}")
        if not (np.isfinite(self.jitter) and self.jitter >= 0):
            raise ValueError(f"jitter must be a finite number >= 0, got {self.jitter}")
        if self.change_at is not None and not np.isfinite(self.change_at):
            raise ValueError(f"the time of the speed change must be finite, got {self.change_at}")
        if not 0 <= self.stall_prob <= 1:
            raise ValueError(f"stall probability must be in [0, 1], got {self.stall_prob}")
        if not all(np.isfinite(f) and f > 0 for f in (self.change_factor, self.stall_factor)):
            raise ValueError("speed-change and stall factors must be positive finite numbers, got "
                             f"{self.change_factor} and {self.stall_factor}")
        if not 0 <= self.change_worker < len(self.slowdown):
            raise ValueError(f"the worker that changes speed ({self.change_worker}) must be in "
                             f"0..{len(self.slowdown) - 1}")

    @property
    def n_workers(self) -> int:
        return len(self.slowdown)

    def shortest_s(self, until: float = np.inf) -> float:
        """The shortest iteration time (before jitter) that any worker can draw before ``until``:
        the slowest-changing part of a virtual clock.  0 means that time can stand still."""
        d = self.base_s * min(self.slowdown)
        if self.change_at is not None and self.change_at < until:
            d *= min(1.0, self.change_factor)
        if self.stall_prob > 0:
            d *= min(1.0, self.stall_factor)
        return d

    def worker(self, i: int) -> "WorkerTimes":
        """The iteration-time stream of worker ``i``."""
        return WorkerTimes(self, i)


class WorkerTimes:
    """Draws the successive iteration times of one worker."""

    def __init__(self, model: TimingModel, worker: int):
        self.model = model
        self.worker = worker
        self.rng = np.random.default_rng([model.seed, worker])  # its draws so far are its state

    def next(self, start: float) -> float:
        """Duration of the iteration that starts at time ``start``."""
        m = self.model
        d = m.base_s * m.slowdown[self.worker]
        if m.jitter > 0:
            d *= float(np.exp(self.rng.normal(0.0, m.jitter)))
        if m.change_at is not None and self.worker == m.change_worker and start >= m.change_at:
            d *= m.change_factor
        if m.stall_prob > 0 and self.rng.random() < m.stall_prob:
            d *= m.stall_factor
        return d
