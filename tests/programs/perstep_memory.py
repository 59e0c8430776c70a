"""Resident-set growth of the package's per-step lists over a long run (issue 44, item 1).

    python tests/programs/perstep_memory.py runlog PUSHES
    mpiexec -n P python tests/programs/perstep_memory.py farm ITERATIONS

``runlog``: a parameter-server run log records PUSHES pushes (a worker and a time each, as the
coordinator does) and one evaluation per 100 of them, after a warm-up of a tenth of that; prints
``rss_growth_kib 0 GROWTH`` and the checksum ``pushes COUNT SUM_OF_WORKERS`` read back.
``farm``: a BSF farm (rank 0 the master) runs a warm-up of ``$HPCBSP_LEDGER_WINDOW`` iterations, then
ITERATIONS more of a problem that never stops (Map, Reduce and Compute of a 4-vector); every rank
prints ``rss_growth_kib RANK GROWTH``.  GROWTH: VmRSS (/proc/self/status) after the long phase
minus before it, in KiB.
"""
from __future__ import annotations

import os
import sys

import numpy as np

from hpcbsp.elastic.runlog import RunLog

sys.path.insert(0, os.path.dirname(__file__))
from ledger_memory import vm_rss_kib  # noqa: E402


def runlog(pushes: int) -> None:
    log = RunLog(8)
    warm = max(pushes // 10, 10_000)
    t = 0.0
    for phase, count in (("warm", warm), ("long", pushes)):
        if phase == "long":
            before = vm_rss_kib()
        for i in range(count):
            t += 1e-4
            log.push_times.append((i % 8, t))
            if i % 100 == 0:
                log.record_eval(t, 0.5, 1.0)
    after = vm_rss_kib()
    print(f"rss_growth_kib 0 {after - before}", flush=True)
    print(f"pushes {len(log.push_times)} {sum(w for w, _ in log.push_times)}", flush=True)


def farm(iterations: int) -> None:
    import hpcbsp
    from hpcbsp.farm.problem import BSFProblem
    from hpcbsp.farm.skeleton import run_farm

    problem = BSFProblem(items=lambda start, stop: slice(start, stop), list_length=8,
                         map=lambda x, sub: np.tile(x, (sub.stop - sub.start, 1)), reduce=np.add,
                         fold=lambda b: b.sum(axis=0), compute=lambda x, s: 0.5 * x + 1e-3 * s,
                         stop=lambda x_next, x: False)
    with hpcbsp.BSP() as bsp:
        warm = int(os.environ.get("HPCBSP_LEDGER_WINDOW") or 10_000)
        run_farm(bsp, problem, np.ones(4), max_iter=warm)
        before = vm_rss_kib()
        res = run_farm(bsp, problem, np.ones(4), max_iter=iterations)
        after = vm_rss_kib()
        assert res.iterations == iterations, res.iterations
        print(f"rss_growth_kib {bsp.pid} {after - before}", flush=True)


if __name__ == "__main__":
    {"runlog": runlog, "farm": farm}[sys.argv[1]](int(sys.argv[2]))
