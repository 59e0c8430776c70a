"""One rank raises inside hpcbsp.run while the others wait in sync (or compute, with --busy)."""
import sys
import time

import hpcbsp


def prog(bsp, busy):
    bsp.sync()
    if bsp.pid == 1:
        raise ZeroDivisionError("rank one divides by zero")
    if busy:
        time.sleep(120)  # stuck in local work: only an abort can end this job
    bsp.sync()


hpcbsp.run(prog, "--busy" in sys.argv)
print("UNREACHABLE")
