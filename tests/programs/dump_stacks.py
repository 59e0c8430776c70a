"""Each rank prints ``pid PID``; rank 0 then sleeps 4 s in local work while the others wait in
the sync (the test sends SIGUSR1 meanwhile); all print ``done`` after the sync."""
import os
import time

import hpcbsp


def prog(bsp):
    os.write(1, f"pid {os.getpid()}\n".encode())  # one write: lines of ranks do not mix
    bsp.sync()
    if bsp.pid == 0:
        time.sleep(4)
    bsp.sync()
    print("done", flush=True)


hpcbsp.run(prog)
