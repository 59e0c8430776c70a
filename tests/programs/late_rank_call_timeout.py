"""The last rank never reaches the second sync; every rank gives that sync a 2 s timeout
(``bsp.sync(label, timeout=2)``, the per-call form; the context has no timeout)."""
import time

import numpy as np

import hpcbsp


def prog(bsp):
    x = bsp.coarray(1, dtype=np.int64)
    x.put((bsp.pid + 1) % bsp.nprocs, [bsp.pid])
    bsp.sync("in time", timeout=30)  # every rank arrives: data moves, the program goes on
    assert x.local[0] == (bsp.pid - 1) % bsp.nprocs
    if bsp.pid == bsp.nprocs - 1:
        time.sleep(60)
    bsp.sync("x", timeout=2)


hpcbsp.run(prog)
