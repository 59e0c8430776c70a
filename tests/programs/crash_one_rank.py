"""The last rank dies without a word while the others wait in sync: SIGSEGV (a crash in compiled
code) or SIGKILL (the out-of-memory killer, a failed node)."""
import os
import signal
import sys

import hpcbsp

SIGNAL = {"segv": signal.SIGSEGV, "kill": signal.SIGKILL}[sys.argv[1]]


def prog(bsp):
    bsp.sync()
    if bsp.pid == bsp.nprocs - 1:
        signal.signal(signal.SIGSEGV, signal.SIG_DFL)  # no Python fault handler: a bare crash
        os.kill(os.getpid(), SIGNAL)
    bsp.sync()


hpcbsp.run(prog)
print("UNREACHABLE")
