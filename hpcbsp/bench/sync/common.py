"""What the measurements of ``python -m hpcbsp.bench sync`` share: how a block of calls is timed
(the slowest rank's mean per call, collective) and the sizes of the put rounds."""
from __future__ import annotations

import statistics
import time
from typing import Callable

from mpi4py import MPI

#: The bytes of each put of the small superstep (its fixed cost: the bulk exchange's).
SMALL_BYTES = 64 * 1024
#: The share of a block's timed calls that first run untimed in the put/pack rounds (a warm-up).
WARMUP_FRACTION = 0.5


def per_call(fn: Callable[[], object], iters: int, comm: MPI.Comm, warmup: int = 0) -> float:
    """Seconds per call of ``fn``, the slowest rank's mean over ``iters`` calls after ``warmup``
    untimed ones (collective)."""
    for _ in range(warmup):
        fn()
    comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    dt = (time.perf_counter() - t0) / iters
    return comm.allreduce(dt, op=MPI.MAX)


def put_iters(iters: int) -> int:
    """Supersteps in a timed block of the put rounds (they move megabytes: fewer than the syncs)."""
    return max(3, iters // 200)


def median_or_nan(values: list[float]) -> float:
    """The median of ``values``, NaN where nothing was measured."""
    return statistics.median(values) if values else float("nan")
