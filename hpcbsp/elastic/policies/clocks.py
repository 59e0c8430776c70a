"""Push counters with the slowest and fastest worker kept up to date in O(1) per push.

SSP and DSSP compare every worker with the slowest one; scanning all counters per push would
cost O(n) and make a 1,000-worker simulation crawl, so the minimum is maintained from a
histogram of counts (counts only ever grow by one, so the minimum rises one step at a time).
"""
from __future__ import annotations

from collections import defaultdict

__all__ = ["PushClock", "HeldByCount"]


class PushClock:
    """``t[i]``: how many gradients worker ``i`` has pushed; ``low``/``high``: min/max of ``t``."""

    def __init__(self, n_workers: int):
        self.t = [0] * n_workers
        self.low = 0
        self.high = 0
        self._at = defaultdict(int)  # count -> number of workers with that count
        self._at[0] = n_workers

    def tick(self, worker: int) -> bool:
        """Count one push of ``worker``; return True when this raised the minimum ``low``."""
        c = self.t[worker]
        self.t[worker] = c + 1
        self._at[c] -= 1
        self._at[c + 1] += 1
        if c + 1 > self.high:
            self.high = c + 1
        if c == self.low and self._at[c] == 0:
            del self._at[c]
            self.low = c + 1
            return True
        return False

    def ahead(self, worker: int) -> int:
        """How many pushes ``worker`` is ahead of the slowest worker."""
        return self.t[worker] - self.low

    def slowest(self) -> int:
        """The lowest-numbered worker among those with the fewest pushes (O(n); rare use)."""
        return min(i for i, c in enumerate(self.t) if c == self.low)


class HeldByCount:
    """Workers held back by a staleness bound, grouped by their push count.

    A worker held at count ``c`` with bound ``s`` may go once the slowest reaches ``c - s``; as
    the minimum rises one step at a time, :meth:`pop` of the exact count releases all of them.
    """

    def __init__(self) -> None:
        self._by_count: dict[int, list[int]] = defaultdict(list)

    def hold(self, worker: int, count: int) -> None:
        self._by_count[count].append(worker)

    def pop(self, count: int) -> list[int]:
        """Remove and return the workers held at exactly ``count``."""
        return self._by_count.pop(count, [])

    def __len__(self) -> int:
        return sum(len(v) for v in self._by_count.values())
