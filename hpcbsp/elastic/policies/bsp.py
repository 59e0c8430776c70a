"""BSP: a barrier after every iteration; the mean of all ``n`` gradients is one update."""
from __future__ import annotations

from .base import Decision, SyncPolicy

__all__ = ["BSP"]


class BSP(SyncPolicy):
    """Hold every worker until all have pushed, then apply their mean and release everyone.

    All workers always compute on the same weights (staleness 0); each step lasts as long as
    the slowest worker's iteration.
    """

    name = "bsp"

    def start(self, n_workers: int, now: float) -> None:
        self._arrived: list[int] = []
        self._stats["barriers"] = 0

    def on_push(self, worker: int, now: float) -> Decision:
        self._arrived.append(worker)
        if len(self._arrived) < self.n_workers:
            return Decision()
        everyone = tuple(sorted(self._arrived))
        self._arrived.clear()
        self._stats["barriers"] += 1
        return Decision(apply=everyone, release=everyone)
