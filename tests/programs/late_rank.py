"""The last rank never reaches the sync; the others have a 2 s sync timeout."""
import time

import hpcbsp


def prog(bsp):
    bsp.sync()
    if bsp.pid == bsp.nprocs - 1:
        time.sleep(60)
    bsp.sync()


hpcbsp.BSP  # noqa: B018  (import check)
with hpcbsp.BSP(timeout=2.0) as ctx:
    from hpcbsp.runtime.failure.guards import install_excepthook
    install_excepthook()
    prog(ctx)
