"""The block split of n items over p ranks: rank r gets ``n // p`` items, plus one if
``r < n mod p``, in rank order.

This module is the one home of that arithmetic: the runtime's ring collectives, checkpoints and
the block-row apps call :func:`block_range` directly (a pair of ints, no objects), and the
partitioning :class:`hpcbsp.runtime.api.partition.Block`, which adds owners, local indices and
redistribution, takes its sizes from :func:`block_sizes`.
"""
from __future__ import annotations

import numpy as np


def block_sizes(n: int, p: int) -> np.ndarray:
    """Number of items on each of the p ranks, an int64 array of length p."""
    base, extra = divmod(n, p)
    sizes = np.full(p, base, dtype=np.int64)
    sizes[:extra] += 1
    return sizes


def block_range(n: int, p: int, rank: int) -> tuple[int, int]:
    """``(start, stop)`` of rank's block of ``range(n)``."""
    base, extra = divmod(n, p)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)
