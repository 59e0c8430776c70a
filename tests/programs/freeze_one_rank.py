"""The failure detector's programs (no sync timeout anywhere).

``stop``: the last rank stops itself (SIGSTOP, as a frozen process) at superstep 5 while the
others go on to wait for it in the next sync; only the watch can end the job.
``compute S``: rank 0 computes for S seconds in one superstep, first in pure Python, then in
one numpy call, while the others wait in the sync; it must not be suspected: prints ``done``.
"""
import os
import signal
import sys
import time

import numpy as np

import hpcbsp


def stop(bsp):
    for step in range(100_000):
        bsp.sync()
        time.sleep(0.01)
        if step == 5 and bsp.pid == bsp.nprocs - 1:
            os.kill(os.getpid(), signal.SIGSTOP)


def compute(bsp, seconds):
    bsp.sync()
    if bsp.pid == 0:
        end = time.monotonic() + seconds / 2
        x = 0
        while time.monotonic() < end:  # pure Python, holding the GIL throughout
            x += 1
        a = np.random.default_rng(0).random((3000, 3000))
        end = time.monotonic() + seconds / 2
        while time.monotonic() < end:
            a = a @ a.T / 3000.0  # BLAS, long calls
    bsp.sync()
    if bsp.pid == 0:
        print("done", flush=True)


if sys.argv[1] == "stop":
    hpcbsp.run(stop)
else:
    hpcbsp.run(compute, float(sys.argv[2]))
