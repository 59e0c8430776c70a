"""A mailbox handler raises on rank 1; the job must end with that traceback, not hang.

    fabsp_handler_fails.py quiesce   deep in handler-generated traffic, inside the sync
    fabsp_handler_fails.py control   rank 1 waits in the sync while the others still send
    fabsp_handler_fails.py compute   rank 1 is still sending; the others wait in the sync
"""
import sys
import time

import numpy as np

import hpcbsp

WHERE = sys.argv[1]


def prog(bsp):
    me, p = bsp.pid, bsp.nprocs

    def forward(hops):
        if me == 1 and np.any(hops == 7):
            raise ValueError(f"handler on rank one got hop 7 ({WHERE})")
        rest = hops[hops > 0] - 1
        if rest.size:
            box.send((me + 1) % p, rest)

    box = bsp.mailbox(forward, np.int64, buffer=2, max_pending=2)
    bsp.sync()
    if WHERE == "quiesce":
        box.send((me + 1) % p, np.full(4, 3 * p + 8))   # the chain reaches hop 7 inside the sync
    elif WHERE == "control":
        if me != 1:
            time.sleep(0.5)                              # rank 1 is already waiting in the sync
            box.send(1, np.full(3, 7))
    elif WHERE == "compute":
        if me != 1:
            box.send(1, np.full(3, 7))
        else:
            time.sleep(0.5)                              # the others are waiting in the sync
            for _ in range(50):
                bsp.progress()                           # the handler fails here, in user code
                time.sleep(0.01)
    bsp.sync()
    bsp.sync()


hpcbsp.run(prog)
print("UNREACHABLE")
