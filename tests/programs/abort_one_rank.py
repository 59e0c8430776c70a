"""Rank 1 calls bsp.abort at superstep 2; the others sync (and would wait there)."""
import time

import hpcbsp


def prog(bsp):
    bsp.sync()
    bsp.sync()
    if bsp.pid == 1:
        bsp.abort("the input is inconsistent")
        print("UNREACHABLE")
    bsp.sync()
    time.sleep(60)
    print("UNREACHABLE")


hpcbsp.run(prog)
