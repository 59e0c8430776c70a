"""Running a BSP function on every rank, and what happens when one rank fails.

The rule: a failing rank prints its traceback once, prefixed with its rank; the other ranks learn
of the failure at their next collective BSP call (a :class:`~.errors.PeerFailed`, printed
as one line); the job ends with a non-zero status within seconds.  If the other ranks never reach
a BSP call (stuck in local work or in MPI calls of their own), the job is aborted after
``$HPCBSP_ABORT_GRACE`` seconds.
"""
from __future__ import annotations

import os
import runpy
import sys
from types import TracebackType
from typing import Any, Callable, TypeVar

from mpi4py import MPI

from .context import BSP
from .errors import BSPError, SyncTimeout
from .lifecycle import LIVE
from .report import abort_job, format_failure, report_failure

T = TypeVar("T")


def run(fn: Callable[..., T], *args: Any, comm: MPI.Comm | None = None, **kw: Any) -> T:
    """Call ``fn(bsp, *args, **kw)`` on every rank of ``comm`` and return this rank's result.

    MPI stays initialised afterwards.  If ``fn`` raises on some rank, the exception propagates
    there and every other rank raises :class:`~.errors.PeerFailed` at its next collective
    BSP call.  An uncaught exception is printed once, with its rank (see :func:`excepthook`).
    """
    install_excepthook()
    bsp = BSP(comm)
    try:
        result = fn(bsp, *args, **kw)
    except BaseException as exc:
        bsp._fail(exc)
        raise
    bsp.close()
    return result


def excepthook(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    """Print an uncaught exception once, with the rank; end the job if peers may still wait."""
    rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
    exc = exc.with_traceback(tb)
    # Peers of live BSP contexts are told through the context (which aborts, with this report,
    # if they do not listen in time); with none, abort so that ranks blocked in their own MPI
    # calls do not hang.
    live = list(LIVE)
    for context in live:
        context.fail(exc)
    told = getattr(exc, "hpcbsp_peers_told", False)
    if size > 1 and (isinstance(exc, SyncTimeout) or not (live or told or isinstance(exc, BSPError))):
        abort_job(format_failure(exc, rank, size))
    report_failure(exc, rank, size)


def install_excepthook() -> None:
    """Make :func:`excepthook` the interpreter's hook (once; keeps a custom hook in place)."""
    if sys.excepthook is sys.__excepthook__:
        sys.excepthook = excepthook


def run_script(path: str, argv: list[str]) -> int:
    """``python -m hpcbsp SCRIPT [ARGS]``: run a script with hpcbsp's failure handling."""
    install_excepthook()
    sys.argv = [path, *argv]
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except BaseException:
        excepthook(*sys.exc_info())  # type: ignore[arg-type]
        return 1
    return 0
