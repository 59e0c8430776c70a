"""Synchronous SGD with backup workers (Chen et al. 2016): apply the first ``n - b`` gradients of each step."""
from __future__ import annotations

from .base import Decision, PolicyError, SyncPolicy

__all__ = ["Backup"]


class Backup(SyncPolicy):
    """``N + b`` workers; each step averages the first ``N`` gradients computed on its weights.

    The ``b`` workers still computing when a step closes are "late": their gradient, computed on
    the previous weights, is dropped when it arrives (never applied stale) and the worker is
    released at once with the current weights. With ``b = 0`` this is BSP.
    """

    name = "backup"
    PARAMETERS = {"backup": "b"}

    def __init__(self, backup: int):
        super().__init__()
        self.backup = backup

    def start(self, n_workers: int, now: float) -> None:
        if self.backup >= n_workers:
            raise PolicyError(f"backup workers b={self.backup} must be fewer than the {n_workers} workers")
        self.needed = n_workers - self.backup
        self.step = 0
        self.started_step = [0] * n_workers  # the step whose weights each worker computes on
        self._arrived: list[int] = []
        self._stats.update(steps=0, dropped=0)

    def on_push(self, worker: int, now: float) -> Decision:
        if self.started_step[worker] < self.step:
            self.started_step[worker] = self.step
            self._stats["dropped"] += 1
            return Decision(drop=(worker,), release=(worker,))
        self._arrived.append(worker)
        if len(self._arrived) < self.needed:
            return Decision()
        first = tuple(sorted(self._arrived))
        self._arrived.clear()
        self.step += 1
        self._stats["steps"] += 1
        for w in first:
            self.started_step[w] = self.step
        return Decision(apply=first, release=first)
