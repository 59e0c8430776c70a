"""Resident-set growth of a rank over many supersteps (run under mpiexec -n P).

    python tests/programs/ledger_memory.py EMPTY DATA

Runs a warm-up (twice ``$HPCBSP_LEDGER_WINDOW`` empty supersteps, and a tenth of that with
data), reads VmRSS from /proc/self/status, then EMPTY empty supersteps and DATA
supersteps that each put 8 bytes to the next rank, and reads VmRSS again.  Every rank prints
one line ``rss_growth_kib RANK EMPTY_GROWTH DATA_GROWTH`` (KiB: VmRSS after the phase minus
VmRSS before it).
"""
from __future__ import annotations

import os
import sys

import numpy as np

import hpcbsp


def vm_rss_kib() -> int:
    """This process's resident set (``VmRSS`` of /proc/self/status), in KiB."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS line in /proc/self/status")


def main(empty: int, data: int) -> None:
    with hpcbsp.BSP() as bsp:
        x = bsp.coarray(1, dtype=np.int64)
        right = (bsp.pid + 1) % bsp.nprocs
        # warm-up: the pools, the caches, twice the ledger's window (so that it has wrapped)
        warm = 2 * int(os.environ.get("HPCBSP_LEDGER_WINDOW") or 10_000)
        for _ in range(warm):
            bsp.sync()
        for i in range(warm // 10):
            x.put(right, [i])
            bsp.sync()
        before = vm_rss_kib()
        for _ in range(empty):
            bsp.sync()
        middle = vm_rss_kib()
        for i in range(data):
            x.put(right, [i])
            bsp.sync()
        after = vm_rss_kib()
        print(f"rss_growth_kib {bsp.pid} {middle - before} {after - middle}", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
