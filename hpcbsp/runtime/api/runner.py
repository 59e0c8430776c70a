"""Running a BSP function on every rank (:func:`run`), or a script or module as a program
(``python -m hpcbsp SCRIPT``, ``hpcbsp run -m MODULE``), with hpcbsp's failure handling.

The rule: a failing rank prints its traceback once, prefixed with its rank; the other ranks learn
of the failure at their next collective BSP call (a :class:`~hpcbsp.runtime.errors.PeerFailed`,
printed as one line); the job ends with a non-zero status within seconds.  If the other ranks never
reach a BSP call (stuck in local work or in MPI calls of their own), the job is aborted after
``$HPCBSP_ABORT_GRACE`` seconds.  The process guards that do this (the uncaught-exception hook,
Ctrl-C, SIGTERM, the stack dump on SIGUSR1) are :mod:`hpcbsp.runtime.failure.guards`.
"""
from __future__ import annotations

import os
import runpy
import sys
from typing import Any, Callable, TypeVar

from mpi4py import MPI

from ..failure.guards import excepthook, install_excepthook
from .context import BSP

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


def run_script(path: str, argv: list[str]) -> int:
    """``python -m hpcbsp SCRIPT [ARGS]``: run a script with hpcbsp's failure handling."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    return run_main(lambda: runpy.run_path(path, run_name="__main__"), [path, *argv])


def run_module(name: str, origin: str, argv: list[str]) -> int:
    """``hpcbsp run -m MODULE [ARGS]``: run a module as ``__main__`` with hpcbsp's failure
    handling (``origin``: its file, for ``sys.argv[0]``)."""
    return run_main(lambda: runpy.run_module(name, run_name="__main__", alter_sys=True), [origin, *argv])


def run_main(body: Callable[[], object], argv: list[str]) -> int:
    """Run ``body()`` as a program with ``argv``: its exit status, an uncaught exception
    reported by :func:`excepthook` (status 1)."""
    install_excepthook()
    sys.argv = argv
    try:
        body()
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except BaseException:
        excepthook(*sys.exc_info())
        return 1
    return 0
