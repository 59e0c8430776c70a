"""The one-sided fine-grained baseline of the irregular apps: one passive-target RMA operation
per update (``--mode rma``).

What a program that updates remote memory one element at a time costs on MPI, done the honest
way: every rank's part of the table lives in memory MPI allocated for a window
(``MPI_Win_allocate``, which lets an MPI library use shared memory between the ranks of a node;
a window over the program's own array, ``MPI_Win_create``, made every operation about 10x
slower with MPICH on one node), every rank opens one passive-target epoch on all ranks
(``Win.Lock_all``) and issues one ``MPI_Accumulate`` (histogram: ``+1`` with ``MPI_SUM``,
atomic per element) or one ``MPI_Get`` (index-gather) per update, to the owner rank at the
owner's offset, with no aggregation; ``Win.Flush_all`` after every ``FLUSH_EVERY`` operations
bounds what MPI keeps queued (MPICH held about 1.5 KB per outstanding operation), and
``Win.Unlock_all`` completes them.  This is the MPI counterpart of bale's AGP variants (one
SHMEM atomic or get per update), and the baseline FA-BSP must beat by aggregation.

The operations are issued from C (:class:`hpcbsp.kernels._onesided.Updates`: a plain loop calling
the MPI library's ``MPI_Accumulate`` / ``MPI_Get``, found in the running process by
:func:`hpcbsp.runtime.superstep.native.mpi_symbols`), so an update costs what MPI makes it cost and no
Python.  Where those functions cannot be found surely (no ``/proc``, a statically linked MPI,
two MPI libraries), or with ``compiled=False``, the same operations are issued from a Python
loop through mpi4py (an mpi4py call on top of MPI's work per update); :func:`issuer` says which
loop a run gets, and the benchmark prints it beside the figures.  Updates to this rank's own
part go through the window too, as in AGP.

h-relation (not in the ledger: raw MPI, like the naive mode): histogram, one 8-byte message
out per update, into the owner; index-gather, one request out and one 8-byte reply in per read.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
from mpi4py import MPI
from mpi4py.util.dtlib import from_numpy_dtype

from ...kernels.onesided import Updates
from ...runtime import BSP
from ...runtime.superstep.native import mpi_symbols
from .naive import timed_naive


_INT64 = from_numpy_dtype(np.dtype(np.int64))  # the type numpy's int64 maps to (MPI_LONG here)
#: The C functions the compiled loop calls.
_FUNCTIONS = ("MPI_Accumulate", "MPI_Get")


def issuer(compiled: bool = True) -> str:
    """Which loop issues the operations: ``"C"`` (compiled) or ``"Python"`` (mpi4py per update),
    with the reason when the compiled one was asked for and cannot be used."""
    if not compiled:
        return "Python"
    return "C" if mpi_symbols(_FUNCTIONS) is not None else \
        "Python (MPI_Accumulate and MPI_Get not found surely in the running MPI library)"


def _compiled(win: MPI.Win, compiled: bool) -> Updates | None:
    """The compiled loop on ``win``, or None where the Python loop must do (:func:`issuer`)."""
    functions = mpi_symbols(_FUNCTIONS) if compiled else None
    if functions is None:
        return None
    return Updates(functions[0], functions[1], MPI._sizeof(MPI.Win), MPI._handleof(win),
                   MPI._handleof(_INT64), MPI._handleof(MPI.SUM), (win, _INT64))


def _check(result: tuple[int, int]) -> None:
    code, _ = result
    if code:
        raise MPI.Exception(code)


#: Operations issued between two ``Win.Flush_all`` (bounds the operations MPI keeps queued).
FLUSH_EVERY = 4096


def _window(comm: MPI.Comm, size: int) -> tuple[MPI.Win, np.ndarray]:
    """A window of ``size`` int64 that MPI allocates (displacement unit one element), and its
    memory as an array."""
    assert isinstance(comm, MPI.Intracomm)  # a duplicate of the context's communicator
    win = MPI.Win.Allocate(size * 8, disp_unit=8, comm=comm)
    if not size:
        return win, np.zeros(0, dtype=np.int64)
    return win, np.frombuffer(win.tomemory(), dtype=np.int64, count=size)  # type: ignore[call-overload]


def _issue(win: MPI.Win, compiled: bool, ranks: np.ndarray, offsets: np.ndarray,
           python_op: Callable[[int, int, int], None],
           compiled_op: Callable[[Updates, slice], tuple[int, int]]) -> None:
    """One operation per (rank, offset), in order, flushed every :data:`FLUSH_EVERY`: from C
    where possible (``compiled_op(loop, part)``), else from Python (``python_op(k, rank, offset)``)."""
    loop = _compiled(win, compiled)
    try:
        for start in range(0, ranks.size, FLUSH_EVERY):
            part = slice(start, start + FLUSH_EVERY)
            if loop is not None:
                _check(compiled_op(loop, part))
            else:
                for k, (rank, offset) in enumerate(zip(ranks[part].tolist(), offsets[part].tolist()), start):
                    python_op(k, rank, offset)
            win.Flush_all()
    finally:
        if loop is not None:
            loop.close()


def _read_own_part(win: MPI.Win, pid: int) -> None:
    """Make the other ranks' completed accumulates visible to this rank's loads of its own
    window memory (``MPI_Win_sync`` inside a lock of its own window)."""
    win.Lock(pid, MPI.LOCK_SHARED)
    win.Sync()
    win.Unlock(pid)


def histogram_rma(bsp: BSP, owner: np.ndarray, off: np.ndarray, table: int, compiled: bool = True
                  ) -> tuple[np.ndarray, float]:
    """Histogram with one ``MPI_Accumulate(+1)`` per update; returns this rank's counters and
    its time (from a sync before the first update to the sync after the last one lands).
    ``compiled``: issue them from C where possible (:func:`issuer`)."""
    counts = np.zeros(table, dtype=np.int64)
    one = np.ones(1, dtype=np.int64)
    ranks, offsets = np.ascontiguousarray(owner, dtype=np.int64), np.ascontiguousarray(off, dtype=np.int64)

    def body(comm: MPI.Comm) -> None:
        win, mem = _window(comm, table)
        try:
            mem[:] = 0
            comm.Barrier()    # every part is zero before anyone adds to it
            win.Lock_all()
            acc = win.Accumulate
            _issue(win, compiled, ranks, offsets,
                   lambda k, rank, offset: acc(one, rank, (offset, 1, _INT64), MPI.SUM),
                   lambda loop, part: loop.accumulate(ranks[part], offsets[part]))
            win.Unlock_all()  # every accumulate of this rank has completed at its target
            comm.Barrier()    # ... and every other rank's too
            _read_own_part(win, bsp.pid)
            counts[:] = mem
        finally:
            win.Free()
        bsp.sync("histogram")

    seconds, _ = timed_naive(bsp, body)
    return counts, seconds


def gather_rma(bsp: BSP, owner: np.ndarray, off: np.ndarray, local: np.ndarray, compiled: bool = True
               ) -> tuple[np.ndarray, float]:
    """Index-gather with one ``MPI_Get`` per read (outstanding until the next flush); returns
    the values read, in request order, and this rank's time.  ``compiled``: issue them from C
    where possible (:func:`issuer`)."""
    tgt = np.empty(owner.size, dtype=np.int64)
    part = np.ascontiguousarray(local, dtype=np.int64)
    ranks, offsets = np.ascontiguousarray(owner, dtype=np.int64), np.ascontiguousarray(off, dtype=np.int64)

    def body(comm: MPI.Comm) -> None:
        win, mem = _window(comm, part.size)
        try:
            mem[:] = part
            comm.Barrier()    # every part is in its window before anyone reads it
            win.Lock_all()
            get, view = win.Get, memoryview(tgt.data)
            _issue(win, compiled, ranks, offsets,
                   lambda k, rank, offset: get([view[k:k + 1], _INT64], rank, (offset, 1, _INT64)),
                   lambda loop, p: loop.get(ranks[p], offsets[p], tgt[p]))
            win.Unlock_all()  # every get has completed: tgt holds the values
            comm.Barrier()    # no rank frees the window while another still reads it
        finally:
            win.Free()
        bsp.sync("index-gather")

    seconds, _ = timed_naive(bsp, body)
    return tgt, seconds
