"""SSP(s): apply on arrival; hold a worker while it is more than ``s`` pushes ahead of the slowest."""
from __future__ import annotations

from .base import Decision, SyncPolicy
from .clocks import HeldByCount, PushClock

__all__ = ["SSP"]


class SSP(SyncPolicy):
    """Stale synchronous parallel, as the server-side rule of a push/pull parameter server.

    Invariant: a worker is released only when ``t[w] - min(t) <= s`` (``t`` = pushes so far), so
    no worker computes more than ``s + 1`` iterations ahead of the slowest. ``s = 0`` releases
    exactly like BSP, but gradients are applied one by one instead of averaged.
    """

    name = "ssp"
    PARAMETERS = {"s": "s"}

    def __init__(self, s: int):
        super().__init__()
        self.s = s

    def start(self, n_workers: int, now: float) -> None:
        self.clock = PushClock(n_workers)
        self.held = HeldByCount()

    def on_push(self, worker: int, now: float) -> Decision:
        release = []
        min_rose = self.clock.tick(worker)
        if self.clock.ahead(worker) <= self.s:
            release.append(worker)
        else:
            self.held.hold(worker, self.clock.t[worker])
        if min_rose:
            release.extend(self.held.pop(self.clock.low + self.s))
        return Decision(apply=(worker,), release=tuple(release))
