"""How a failed rank reports itself: its traceback once, every line prefixed with its rank (an
interrupted one, Ctrl-C, a peer's failure and a timeout in one line: the timeout names the
program's line that waited).  A divergence and a peer's failure, which every rank raises alike,
are printed by the one rank whose exception says so (``reports``: the lowest, or the lowest that
did not fail); the others print nothing, as for bad input.  The lines' formats: :mod:`.lines`."""
from __future__ import annotations

import os
import re
import sys
import threading
import time
import traceback

from ..errors import BadInput, Divergence, PeerFailed, SyncTimeout
from . import lines

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../hpcbsp
#: The layers whose frames a timeout's report skips to name the program's (or app's) line.
_LAYERS = tuple(os.path.join(_PACKAGE, layer) + os.sep for layer in ("runtime", "fabsp", "util"))


def format_failure(exc: BaseException, rank: int, size: int) -> str:
    """What a failed rank says: bad input found by every rank once (on rank 0), a peer's failure
    in one line, anything else as the rank-prefixed traceback."""
    if isinstance(exc, BadInput):
        return lines.error(str(exc)) + "\n" if rank == 0 else ""
    if isinstance(exc, (Divergence, PeerFailed)) and not exc.reports:  # (one rank prints it for the job)
        return ""
    if isinstance(exc, PeerFailed):
        return lines.rank_says(rank, size, str(exc)) + "\n"
    if isinstance(exc, SyncTimeout):  # where the program waited, not the runtime's frames
        where = _caller(exc)
        text = re.sub(rf"^rank {rank}: ", "", str(exc))
        return lines.rank_says(rank, size, text) + (f" (at {where})" if where else "") + "\n"
    if isinstance(exc, KeyboardInterrupt):  # Ctrl-C: no error of the program's, no traceback
        return lines.rank_says(rank, size, "interrupted (KeyboardInterrupt, Ctrl-C)") + "\n"
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return (lines.failed_header(rank, size) + "\n"
            + "".join(f"[rank {rank}] {line}\n" for line in text.rstrip().splitlines()))


def _caller(exc: BaseException) -> str:
    """``file:line in function`` of the innermost frame of ``exc`` outside the runtime's layers."""
    where = ""
    for frame in traceback.extract_tb(exc.__traceback__):
        if not os.path.abspath(frame.filename).startswith(_LAYERS):
            where = f"{frame.filename}:{frame.lineno} in {frame.name}"
    return where


def report_failure(exc: BaseException, rank: int, size: int) -> None:
    """Write :func:`format_failure` to stderr."""
    sys.stderr.write(format_failure(exc, rank, size))
    sys.stderr.flush()


def abort_job(message: str) -> None:
    """Write ``message`` to stderr in one piece, give the launcher a moment to forward it, and
    abort every rank.  (mpiexec kills the job's processes at once and drops output still in its
    pipes: written in pieces just before the abort, the last lines were sometimes lost.)"""
    from mpi4py import MPI

    from . import deathwatch

    deathwatch.claim()  # this rank has said why the job ends: the peers' watchers stay quiet
    sys.stderr.write(message)
    sys.stderr.flush()
    time.sleep(0.2)
    # MPI_Abort from a watchdog thread while the main thread waits inside MPI can block for good
    # (a soak run hung 90 s here): leave anyway.  A rank that exits without MPI_Finalize makes
    # the launcher end the job (hydra at once).
    watchdog = threading.Timer(5.0, os._exit, (1,))
    watchdog.daemon = True
    watchdog.start()
    MPI.COMM_WORLD.Abort(1)
    os._exit(1)  # MPICH's Abort has been seen to return here; nothing more may run or print
