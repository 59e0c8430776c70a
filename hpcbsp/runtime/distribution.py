"""Block distribution of n items over p ranks (the first n mod p ranks get one more)."""
from __future__ import annotations

import numpy as np


def block_sizes(n: int, p: int) -> np.ndarray:
    """Number of items on each of the p ranks."""
    base, extra = divmod(n, p)
    return np.array([base + (1 if r < extra else 0) for r in range(p)], dtype=np.int64)


def block_range(n: int, p: int, rank: int) -> tuple[int, int]:
    """``(start, stop)`` of rank's block of ``range(n)``."""
    base, extra = divmod(n, p)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)
