"""ASP: no synchronisation; every gradient is applied on arrival and its worker released."""
from __future__ import annotations

from .base import Decision, SyncPolicy

__all__ = ["ASP"]


class ASP(SyncPolicy):
    """Apply each push at once and send the worker the current weights: nobody ever waits.

    Gradients are stale by the number of updates others made while the worker computed
    (about ``n - 1`` with equal speeds), unbounded in general.
    """

    name = "asp"

    def start(self, n_workers: int, now: float) -> None:
        pass

    def on_push(self, worker: int, now: float) -> Decision:
        return Decision(apply=(worker,), release=(worker,))
