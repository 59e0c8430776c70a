"""Wait modes (:mod:`hpcbsp.runtime.superstep.waiting`): two contexts on the same ranks, one
``wait="spin"`` and one ``wait="yield"``, measured alternately: the empty sync's latency, and a
sync in which the last rank arrives W ms late, for which the other ranks' CPU time during the
wait (``time.process_time``) and the time the sync ends after that rank's arrival are reported
(the worst rank's, medians over the rounds)."""
from __future__ import annotations

import time
from typing import Any

from mpi4py import MPI

import hpcbsp
from hpcbsp.util.choices import RESOLVED_WAIT_MODES

from .common import median_or_nan, per_call


def wait_modes(bsp: "hpcbsp.BSP", iters: int, rounds: int, nap_s: float) -> dict[str, Any]:
    """Empty sync latency and a late rank's wait, spinning vs yielding (medians over rounds)."""
    ctx = {mode: hpcbsp.BSP(bsp.comm, wait=mode) for mode in RESOLVED_WAIT_MODES}
    comm = bsp.comm
    late = bsp.nprocs - 1
    out: dict[str, list[float]] = {f"{m}_{k}": [] for m in ctx for k in ("sync_us", "cpu", "after_us")}
    try:
        for _ in range(rounds):
            for mode, c in ctx.items():
                out[f"{mode}_sync_us"].append(1e6 * per_call(c.sync, iters, comm))
                comm.Barrier()
                cpu0, t0 = time.process_time(), time.perf_counter()
                if bsp.pid == late:
                    time.sleep(nap_s)
                arrived = time.perf_counter()
                c.sync()
                t1, cpu1 = time.perf_counter(), time.process_time()
                arrived = comm.bcast(arrived, root=late)  # one node: one perf_counter clock
                if bsp.pid != late:
                    out[f"{mode}_cpu"].append((cpu1 - cpu0) / (t1 - t0))
                    out[f"{mode}_after_us"].append(1e6 * (t1 - arrived))
    finally:
        for c in ctx.values():
            c.close()
    res = {k: median_or_nan(v) for k, v in out.items()}
    # The worst rank's figures: the largest CPU share and the latest end.
    worst = {k: comm.allreduce(v if v == v else -1.0, op=MPI.MAX) for k, v in res.items()}
    return {**worst, "default": bsp.wait}  # the mode this run's context chose
