"""A rank's process guards: what happens when one rank fails, is interrupted or is asked to stop.

An uncaught exception (:func:`excepthook`) is printed once, with its rank, and the open BSP
contexts of the process (:data:`LIVE`) tell their peers, which learn of it at their next
collective call; with no context open the job is aborted, so that ranks blocked in MPI calls of
their own do not hang.

Ctrl-C (SIGINT) in a job of several ranks is no failure to negotiate: a collective in progress
cannot be cancelled, and the ranks get the signal at different points of their supersteps.  Once
a BSP context exists, hpcbsp handles SIGINT itself (unless the program installed a handler of its
own first): the interrupted rank prints one line, ``[hpcbsp] rank R/P: interrupted (SIGINT,
Ctrl-C) at superstep S; ending all P ranks`` (one rank per node prints it), and aborts the job
with status 130 at once; no traceback, no wait.  A watcher thread acts even while the main thread
is blocked in an MPI call.  A checkpoint being written then is left unfinished in ``PATH.tmp``:
``PATH`` (or, during its swap, ``PATH.old``) still holds the last complete one (see
:mod:`hpcbsp.runtime.api.checkpoint`).  On one rank SIGINT stays Python's ``KeyboardInterrupt`` (``finally`` blocks
run; an interactive session survives), reported as one line when uncaught.

SIGTERM (scancel, a time limit) tells the node's watcher that the rank was asked to stop and ends
it as the signal does; SIGUSR1 prints every thread's stack, prefixed with the rank.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
import weakref
from types import FrameType, TracebackType
from typing import Any

from mpi4py import MPI

from ..errors import BSPError, SyncTimeout
from . import deathwatch, lines
from .report import abort_job, format_failure, report_failure

#: The open BSP contexts of this process (their lifecycles: ``fail(exc)``, ``superstep``), so that
#: an uncaught exception or Ctrl-C can tell their peers.
LIVE: "weakref.WeakSet[Any]" = weakref.WeakSet()


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
    """Make :func:`excepthook` the interpreter's hook (once; keeps a custom hook in place), and in a
    job of several ranks let Ctrl-C end the job in one line (:func:`install_interrupt_handler`)."""
    if sys.excepthook is sys.__excepthook__:
        sys.excepthook = excepthook
    install_interrupt_handler()
    install_stack_dump()


def install_stack_dump() -> None:
    """``kill -USR1 PID`` (or ``pkill -USR1 -f prog.py``: every rank) prints where each thread of
    a rank is, each line prefixed by ``[rank R]``, and the rank goes on: what a hung job needs.
    :mod:`faulthandler` writes the stacks from the signal handler, so it works while the rank is
    blocked in MPI, into a pipe that a thread copies to stderr with the prefix.  Once per process,
    only where SIGUSR1 still has its default action (which ends the process)."""
    global _dump_pid
    import faulthandler

    if _dump_pid is not None or signal.getsignal(signal.SIGUSR1) is not signal.SIG_DFL \
            or threading.current_thread() is not threading.main_thread():
        return
    read_fd, write_fd = os.pipe()
    try:
        faulthandler.register(signal.SIGUSR1, file=write_fd, all_threads=True, chain=False)
    except (AttributeError, ValueError, OSError, RuntimeError):
        os.close(read_fd)
        os.close(write_fd)
        return
    _dump_pid = os.getpid()
    prefix = f"[rank {MPI.COMM_WORLD.Get_rank()}] ".encode()

    def copy() -> None:
        with os.fdopen(read_fd, "rb", buffering=0) as pipe:
            for line in iter(pipe.readline, b""):
                os.write(2, prefix + line)

    threading.Thread(target=copy, name="hpcbsp-stack-dump", daemon=True).start()


_dump_pid: int | None = None


#: Exit status of a job ended by Ctrl-C (128 + SIGINT, as a shell reports it).
INTERRUPTED = 128 + signal.SIGINT
_interrupt_pid: int | None = None    # the process that installed the handler (not a forked child)
_ending = threading.Lock()           # taken by whichever of handler and watcher ends the job


def install_interrupt_handler() -> None:
    """In a job of several ranks, make SIGINT end the whole job at once with one line (see the
    module docstring).  Once per process, from the main thread; nothing on one rank, nothing if
    the program has a SIGINT handler of its own or the signal wake-up fd is in use (an event
    loop): then SIGINT raises ``KeyboardInterrupt`` as usual."""
    global _interrupt_pid
    if _interrupt_pid is not None or MPI.COMM_WORLD.Get_size() < 2 \
            or threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    try:
        previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    except (ValueError, OSError):
        previous = None
    if previous != -1:  # in use by someone else (or unavailable): leave SIGINT alone
        if previous is not None:
            signal.set_wakeup_fd(previous)
        os.close(read_fd)
        os.close(write_fd)
        return
    _interrupt_pid = os.getpid()
    signal.signal(signal.SIGINT, _on_sigint)
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)
    # The handler runs only when the main thread executes Python code; a rank blocked in an MPI
    # call (mpi4py releases the GIL there) is ended by this thread, which the C-level signal
    # handler wakes through the pipe.
    threading.Thread(target=_watch_interrupts, args=(read_fd,), name="hpcbsp-sigint",
                     daemon=True).start()
    os.register_at_fork(after_in_child=_forget_wakeup_fd)


def _forget_wakeup_fd() -> None:
    """In a forked child (multiprocessing): its signals must not wake the parent's watcher."""
    try:
        signal.set_wakeup_fd(-1)
    except ValueError:  # forked from another thread: nothing to undo from here
        pass


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    if os.getpid() != _interrupt_pid:  # a forked child (multiprocessing): Python's behaviour
        raise KeyboardInterrupt
    _end_job_interrupted()


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    _terminated()


def _terminated() -> None:
    """SIGTERM (scancel, a time limit, a launcher stopping the job): tell the node's watcher that
    this rank was asked to stop, not that it died silently, and end as SIGTERM ends a process
    (no clean-up, killed by the signal).  From the main thread's handler, or from the watcher
    thread while the main thread is blocked in MPI."""
    deathwatch.stopping()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    else:  # (only the main thread may call signal.signal: reset the C handler itself)
        import ctypes

        try:
            ctypes.CDLL(None).signal(signal.SIGTERM, 0)  # SIG_DFL
        except (OSError, AttributeError):
            os._exit(128 + signal.SIGTERM)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5.0)
    os._exit(128 + signal.SIGTERM)


def _watch_interrupts(read_fd: int) -> None:
    while True:
        try:
            data = os.read(read_fd, 64)
        except InterruptedError:
            continue
        except OSError:
            return
        if not data:
            return
        if os.getpid() != _interrupt_pid:
            continue
        if signal.SIGTERM in data and signal.getsignal(signal.SIGTERM) is _on_sigterm:
            _terminated()
        if signal.SIGINT in data and signal.getsignal(signal.SIGINT) is _on_sigint:
            _end_job_interrupted()


def _end_job_interrupted() -> None:
    """Say once (per node) that the job was interrupted, then abort every rank (status 130)."""
    if not _ending.acquire(blocking=False):
        while True:  # the other thread is ending the process; stop this one where it is
            time.sleep(1.0)
    rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
    live = list(LIVE)
    where = f"at superstep {live[0].superstep}" if live else "outside its BSP contexts"
    if deathwatch.claim_report():
        os.write(2, (lines.rank_says(rank, size, f"interrupted (SIGINT, Ctrl-C) {where}; ending all {size} ranks")
                     + "\n").encode())
        time.sleep(0.2)  # let the launcher forward the line before it kills the job
    else:
        time.sleep(0.5)  # another rank of this node says it: let it be heard first
    # MPICH prints a line of its own on MPI_Abort: the one above is all the user needs.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    threading.Timer(3.0, os._exit, (INTERRUPTED,)).start()  # should Abort not return or end it
    MPI.COMM_WORLD.Abort(INTERRUPTED)
    os._exit(INTERRUPTED)


