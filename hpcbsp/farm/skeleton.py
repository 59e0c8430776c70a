"""The BSF master/worker skeleton on the BSP runtime (Sokolinsky's Algorithm 2).

Layout: rank 0 is the master, ranks 1..K the workers (K = nprocs − 1), as in the BSF model's
K + 1 nodes; the master does not Map.  On one rank the master is its own single worker (K = 1,
no communication).  The list of length l is split into K contiguous sublists of equal length
(the first l mod K workers hold one more), each built only on its worker.

One iteration is two supersteps:

1. ``farm:order``: the master puts the order (x and an exit flag) to every worker, one by one;
2. ``farm:result``: each worker maps its sublist, folds it and puts its partial result (and
   its Map and fold times) to the master's slot for it.

The master then folds the K partial results, computes the next x and runs the stop test; the
next order carries the exit flag.  A final ``broadcast`` gives every rank the same
:class:`FarmResult`.

BSP cost per iteration (h-relations): ``farm:order`` K·(n + 1)·8 bytes and K messages out of the
master, (n + 1)·8 bytes into each worker (n = x.size); ``farm:result`` (r + 2)·8 bytes out of each
worker and K·(r + 2)·8 bytes into the master (r = reduce element size).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..runtime import BSP, BSPError
from ..runtime.distribution import block_range
from .checkpointing import FarmCheckpoint
from .problem import BSFProblem
from .timings import SAMPLE_FIELDS, FarmTimings, append_report, summarise

#: One-byte supersteps timed to measure L.
LATENCY_REPEATS = 7


@dataclass
class FarmResult:
    """The outcome of :func:`run_farm`, the same on every rank."""

    x: np.ndarray
    iterations: int
    converged: bool
    timings: FarmTimings

    @property
    def workers(self) -> int:
        return self.timings.workers


def run_farm(bsp: BSP, problem: BSFProblem, x0: Any, *, max_iter: int = 1000, report: str | None = None,
             label: str | None = None, checkpoint: FarmCheckpoint | None = None) -> FarmResult:
    """Run a BSF program on this BSP context (collective: every rank calls it).

    Parameters
    ----------
    bsp
        The BSP context; rank 0 becomes the master.
    problem
        The map list, Map, Reduce, Compute and StopCond.
    x0
        The initial approximation (a real array; the same on every rank is not required, the
        master's is used).
    max_iter
        Stop after this many iterations even if ``stop`` never holds.
    report
        File to append the run's timings to as a JSON line (default ``$HPCBSP_FARM_REPORT``);
        ``hpcbsp-cost calibrate`` collects these.
    label
        A name for the run in the report.
    checkpoint
        Save x and the iteration count every ``checkpoint.every`` iterations, and resume from an
        earlier checkpoint when ``checkpoint.restart`` (see :mod:`hpcbsp.farm.checkpointing`).

    Returns
    -------
    FarmResult
        Final x, iteration count, whether ``stop`` held, and the measured BSF parameters.
    """
    workers = max(1, bsp.nprocs - 1)
    length = int(problem.list_length)
    if workers > length:
        raise BSPError(f"rank {bsp.pid}: the farm has {workers} workers but the map list only {length} "
                       f"element(s); run with at most {length + 1} ranks")
    x = np.array(x0, dtype=np.float64).reshape(-1)
    # Every rank learns the reduce element's size from one element of its own: no message needed.
    probe = problem.map_block(x, problem.sublist(0, 1))
    r_shape = probe.shape[1:]
    r_size = int(np.prod(r_shape, dtype=np.int64))
    iterations, done = 0, False
    if checkpoint is not None:
        x, iterations, done = checkpoint.resume(bsp, x)
    if bsp.nprocs == 1:
        return _run_alone(bsp, problem, x, r_shape, max_iter, report, label, checkpoint, iterations, done)

    master = bsp.pid == 0
    n = x.size
    slot = r_size + 2  # partial result, Map time, fold time
    # Per-iteration buffers: scratch, so checkpoints do not save them.
    order = bsp.coarray(0 if master else n + 1, dtype=np.float64, name="farm:order", scratch=True)
    results = bsp.coarray(workers * slot if master else 0, dtype=np.float64, name="farm:results",
                          scratch=True)
    ping = bsp.coarray(1 if bsp.pid == 1 else 0, dtype=np.uint8, name="farm:ping", scratch=True)
    latency = _measure_latency(bsp, ping)

    samples: dict[str, list[float]] = {k: [] for k in SAMPLE_FIELDS}
    sub = None
    if not master:
        start, stop = block_range(length, workers, bsp.pid - 1)
        sub = problem.sublist(start, stop)
    converged = done
    t_loop = time.perf_counter()
    while True:
        t_iter = time.perf_counter()
        if master:
            finish = done or iterations >= max_iter
            message = np.append(x, 1.0 if finish else 0.0)
            for w in range(1, workers + 1):
                order.put(w, message)
        bsp.sync("farm:order")
        if master:
            if finish:
                break
        else:
            x = order.local[:n].copy()
            if order.local[n] != 0.0:
                break
            t0 = time.perf_counter()
            b = problem.map_block(x, sub)
            t1 = time.perf_counter()
            s = problem.fold_block(b).reshape(-1)
            t2 = time.perf_counter()
            results.put(0, np.concatenate([s, [t1 - t0, t2 - t1]]), offset=(bsp.pid - 1) * slot)
        bsp.sync("farm:result")
        if master:
            part = results.local.reshape(workers, slot)
            t0 = time.perf_counter()
            s = problem.fold_block(part[:, :r_size].reshape((workers, *r_shape)))
            t1 = time.perf_counter()
            x_next = np.asarray(problem.compute(x, s), dtype=np.float64).reshape(-1)
            done = bool(problem.stop(x_next, x))
            t2 = time.perf_counter()
            x = x_next
            converged = done
            _record(samples, t2 - t_iter, part[:, r_size].sum(), part[:, r_size + 1].sum(), t1 - t0, t2 - t1)
        iterations += 1  # every rank counts, so that all agree when a checkpoint is due
        if checkpoint is not None:
            checkpoint.maybe_save(bsp, x if master else None, iterations, done)
    total = time.perf_counter() - t_loop
    timings = None
    if master:
        timings = summarise(samples, workers=workers, list_length=length, iterations=iterations,
                            total_s=total, latency=latency)
        append_report(timings, report, label=label, nprocs=bsp.nprocs)
    timings, iterations, converged = bsp.broadcast((timings, iterations, converged) if master else None)
    return FarmResult(x, iterations, converged, timings)


def _record(samples: dict[str, list[float]], seconds: float, map_s: float, fold_s: float,
            master_fold_s: float, compute_s: float) -> None:
    for key, value in zip(SAMPLE_FIELDS, (seconds, map_s, fold_s, master_fold_s, compute_s)):
        samples[key].append(float(value))


def _measure_latency(bsp: BSP, ping: Any) -> float:
    """L: the median time of a superstep in which the master puts one byte to worker 1.

    h-relation of each: 1 byte, one message, out of rank 0 and into rank 1.
    """
    times = []
    for _ in range(LATENCY_REPEATS):
        t0 = time.perf_counter()
        if bsp.pid == 0:
            ping.put(1, np.ones(1, dtype=np.uint8))
        bsp.sync("farm:latency")
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def _run_alone(bsp: BSP, problem: BSFProblem, x: np.ndarray, r_shape: tuple[int, ...], max_iter: int,
               report: str | None, label: str | None, checkpoint: FarmCheckpoint | None,
               iterations: int, converged: bool) -> FarmResult:
    """One rank: the master is its own only worker (K = 1, no exchange, L = 0)."""
    length = int(problem.list_length)
    sub = problem.sublist(0, length)
    samples: dict[str, list[float]] = {k: [] for k in SAMPLE_FIELDS}
    t_loop = time.perf_counter()
    while iterations < max_iter and not converged:
        t0 = time.perf_counter()
        b = problem.map_block(x, sub)
        t1 = time.perf_counter()
        s = problem.fold_block(b)
        t2 = time.perf_counter()
        x_next = np.asarray(problem.compute(x, s.reshape(r_shape)), dtype=np.float64).reshape(-1)
        converged = bool(problem.stop(x_next, x))
        t3 = time.perf_counter()
        x = x_next
        iterations += 1
        _record(samples, t3 - t0, t1 - t0, t2 - t1, 0.0, t3 - t2)
        if checkpoint is not None:
            checkpoint.maybe_save(bsp, x, iterations, converged)
    timings = summarise(samples, workers=1, list_length=length, iterations=iterations,
                        total_s=time.perf_counter() - t_loop, latency=0.0)
    append_report(timings, report, label=label, nprocs=1)
    bsp.sync("farm:done")  # keep the superstep structure visible in the ledger
    return FarmResult(x, iterations, converged, timings)
