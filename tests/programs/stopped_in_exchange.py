"""The last rank stops inside the data exchange of superstep 1 (after the control step agreed
that data moves, before it sends its counts); the others have a 2 s sync timeout.

The stop is injected by wrapping the exchange's first step (its count exchange) on that rank
with a 60 s sleep: what a rank whose node froze or whose link went down mid-exchange looks like
to the others.
"""
import time

import hpcbsp
from hpcbsp.runtime.superstep.exchange import counts

_counts = counts.exchange_counts


def _frozen(comm, *args):
    if comm.Get_rank() == comm.Get_size() - 1 and STEP[0] == 1:
        time.sleep(60)
    return _counts(comm, *args)


counts.exchange_counts = _frozen
STEP = [0]


def prog(bsp):
    a = bsp.coarray(4, name="a")
    for step in range(3):
        STEP[0] = step
        a.put((bsp.pid + 1) % bsp.nprocs, a.local)
        bsp.sync()


with hpcbsp.BSP(timeout=2.0) as ctx:
    from hpcbsp.runtime.failure.guards import install_excepthook
    install_excepthook()
    prog(ctx)
