"""A stand-in for one rank of a job on this node, for the death-watch tests (no mpiexec).

``python watched_rank.py RANK SIZE [SHM]``: registers with the node's watcher exactly as a BSP
context does (:func:`hpcbsp.runtime.failure.deathwatch.start`), first mapping the file ``SHM`` when
given (as MPICH maps its ``/dev/shm`` segment), prints ``ready`` and waits for a line on stdin:
``exit`` ends it normally (its ``bye``), ``claim`` says it reports its own failure first
(:func:`~hpcbsp.runtime.failure.deathwatch.claim`) and then dies with SIGKILL, ``abort N`` ends
it with exit code N and no word (as an MPI library aborts a rank for a lost peer: ``_exit``).
Its siblings under one parent (the test) are one job."""
import mmap
import os
import signal
import sys

import mpi4py

mpi4py.rc.initialize = False  # no MPI here: a stand-in starts in a fraction of the time
from hpcbsp.runtime.failure import deathwatch  # noqa: E402

rank, size = int(sys.argv[1]), int(sys.argv[2])
if len(sys.argv) > 3:
    fd = os.open(sys.argv[3], os.O_RDWR | os.O_CREAT, 0o600)
    os.ftruncate(fd, 4096)
    segment = mmap.mmap(fd, 4096)
deathwatch.start(rank, size)
print("ready" if deathwatch.watched() else "unwatched", flush=True)
line = sys.stdin.readline().strip()
if line == "claim":
    deathwatch.claim()
    os.kill(os.getpid(), signal.SIGKILL)
if line.startswith("abort "):
    os._exit(int(line.split()[1]))
sys.exit(0)
