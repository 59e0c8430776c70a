"""The last rank dies without a word while the others wait in sync: SIGSEGV (a crash in compiled
code) or SIGKILL (the out-of-memory killer, a failed node); or, with "term", every rank gets
SIGTERM at once, as from scancel or a time limit (hpcbsp's SIGTERM handler tells the node's
watcher, then the rank ends by the signal)."""
import os
import signal
import sys

import hpcbsp

SIGNAL = {"segv": signal.SIGSEGV, "kill": signal.SIGKILL, "term": signal.SIGTERM}[sys.argv[1]]


def prog(bsp):
    bsp.sync()
    if bsp.pid == bsp.nprocs - 1 or SIGNAL == signal.SIGTERM:
        if SIGNAL == signal.SIGSEGV:
            signal.signal(SIGNAL, signal.SIG_DFL)  # no Python handler: a bare crash
        # (SIGKILL cannot be caught; SIGTERM meets hpcbsp's handler, as from scancel it would)
        os.kill(os.getpid(), SIGNAL)
    bsp.sync()


hpcbsp.run(prog)
print("UNREACHABLE")
