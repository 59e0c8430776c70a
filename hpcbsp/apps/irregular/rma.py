"""The one-sided fine-grained baseline of the irregular apps: one passive-target RMA operation
per update (``--mode rma``).

What a program that updates remote memory one element at a time costs on MPI, done the honest
way: every rank exposes its part of the table in an MPI window, opens one passive-target epoch
on all ranks (``Win.Lock_all``), and issues one ``MPI_Accumulate`` (histogram: ``+1`` with
``MPI_SUM``, atomic per element) or one ``MPI_Get`` (index-gather) per update, to the owner
rank at the owner's offset, with no aggregation; ``Win.Unlock_all`` completes them.  This is
the MPI counterpart of bale's AGP variants (one SHMEM atomic or get per update), and the
baseline FA-BSP must beat by aggregation.

The operations are issued from a Python loop, so each costs an mpi4py call on top of MPI's own
work; the benchmark (``python -m hpcbsp.bench fabsp``) says so beside its figures.  Updates to
this rank's own part go through the window too, as in AGP.

h-relation (not in the ledger: raw MPI, like the naive mode): histogram, one 8-byte message
out per update, into the owner; index-gather, one request out and one 8-byte reply in per read.
"""
from __future__ import annotations

import numpy as np
from mpi4py import MPI
from mpi4py.util.dtlib import from_numpy_dtype

from ...runtime import BSP
from .naive import timed_naive


_INT64 = from_numpy_dtype(np.dtype(np.int64))  # the type numpy's int64 maps to (MPI_LONG here)


def _window(comm: MPI.Comm, local: np.ndarray) -> MPI.Win:
    """A window over ``local`` (int64, C-contiguous), displacement unit one element."""
    if local.dtype != np.int64 or not local.flags.c_contiguous:
        raise ValueError("rma: the table part must be a C-contiguous int64 array")
    assert isinstance(comm, MPI.Intracomm)  # a duplicate of the context's communicator
    return MPI.Win.Create(local if local.size else None, disp_unit=local.itemsize, comm=comm)


def _read_own_part(win: MPI.Win, pid: int) -> None:
    """Make the other ranks' completed accumulates visible to this rank's loads of its own
    window memory (``MPI_Win_sync`` inside a lock of its own window)."""
    win.Lock(pid, MPI.LOCK_SHARED)
    win.Sync()
    win.Unlock(pid)


def histogram_rma(bsp: BSP, owner: np.ndarray, off: np.ndarray, table: int
                  ) -> tuple[np.ndarray, float]:
    """Histogram with one ``MPI_Accumulate(+1)`` per update; returns this rank's counters and
    its time (from a sync before the first update to the sync after the last one lands)."""
    counts = np.zeros(table, dtype=np.int64)
    one = np.ones(1, dtype=np.int64)

    def body(comm: MPI.Comm) -> None:
        win = _window(comm, counts)
        try:
            win.Lock_all()
            acc = win.Accumulate
            for rank, offset in zip(owner.tolist(), off.tolist()):
                acc(one, rank, (offset, 1, _INT64), MPI.SUM)
            win.Unlock_all()  # every accumulate of this rank has completed at its target
            comm.Barrier()    # ... and every other rank's too
            _read_own_part(win, bsp.pid)
        finally:
            win.Free()
        bsp.sync("histogram")

    seconds, _ = timed_naive(bsp, body)
    return counts, seconds


def gather_rma(bsp: BSP, owner: np.ndarray, off: np.ndarray, local: np.ndarray
               ) -> tuple[np.ndarray, float]:
    """Index-gather with one ``MPI_Get`` per read (all outstanding until the epoch ends);
    returns the values read, in request order, and this rank's time."""
    tgt = np.empty(owner.size, dtype=np.int64)
    part = np.ascontiguousarray(local, dtype=np.int64)

    def body(comm: MPI.Comm) -> None:
        win = _window(comm, part)
        try:
            win.Lock_all()
            get, view = win.Get, memoryview(tgt.data)
            for k, (rank, offset) in enumerate(zip(owner.tolist(), off.tolist())):
                get([view[k:k + 1], _INT64], rank, (offset, 1, _INT64))
            win.Unlock_all()  # every get has completed: tgt holds the values
            comm.Barrier()    # no rank frees the window while another still reads it
        finally:
            win.Free()
        bsp.sync("index-gather")

    seconds, _ = timed_naive(bsp, body)
    return tgt, seconds
