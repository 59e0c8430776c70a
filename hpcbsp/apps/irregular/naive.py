"""The *naive* transport of the irregular apps: one MPI message per record, the baseline that
shows what aggregation saves (its traffic is raw MPI: the ledger does not count it)."""
from __future__ import annotations

from typing import Callable

import numpy as np
from mpi4py import MPI

from ...runtime import BSP
from .report import timed

_TAG_NAIVE = 7


def naive_exchange(comm: MPI.Comm, dests: np.ndarray, records: np.ndarray) -> np.ndarray:
    """Deliver record i to rank ``dests[i]`` with one MPI message per record (collective).

    The baseline of the benchmark: what a program that sends every update on its own costs.
    Counts go first with one ``Alltoall`` so receivers know how many messages to expect.
    Returns the records addressed to this rank (its own first, then in arrival order).
    h-relation: one message of ``itemsize`` bytes per record, out and in.
    """
    p, me = comm.Get_size(), comm.Get_rank()
    dests = np.asarray(dests, dtype=np.int64)
    counts = np.bincount(dests, minlength=p).astype(np.int64)
    incoming = np.empty(p, dtype=np.int64)
    comm.Alltoall(counts, incoming)
    raw = np.ascontiguousarray(records).view(np.uint8).reshape(records.shape[0], records.dtype.itemsize)
    n_in = int(incoming.sum() - incoming[me])
    out = np.empty(n_in, dtype=records.dtype)
    out_raw = out.view(np.uint8).reshape(n_in, records.dtype.itemsize)
    remote = np.flatnonzero(dests != me)
    reqs = []
    got = 0
    # Interleave sending and receiving so neither side's queues grow with the whole volume.
    for k, i in enumerate(remote.tolist()):
        reqs.append(comm.Isend([raw[i], MPI.BYTE], int(dests[i]), _TAG_NAIVE))
        if k % 64 == 63:
            while got < n_in and comm.Iprobe(MPI.ANY_SOURCE, _TAG_NAIVE):
                comm.Recv([out_raw[got], MPI.BYTE], MPI.ANY_SOURCE, _TAG_NAIVE)
                got += 1
            MPI.Request.Waitall(reqs)
            reqs.clear()
    while got < n_in:
        comm.Recv([out_raw[got], MPI.BYTE], MPI.ANY_SOURCE, _TAG_NAIVE)
        got += 1
    MPI.Request.Waitall(reqs)
    return np.concatenate([records[dests == me], out])


def timed_naive(bsp: BSP, body: Callable[[MPI.Comm], object]) -> tuple[float, object]:
    """:func:`timed` for the naive mode: ``body(comm)`` gets its own duplicate of the context's
    communicator for :func:`naive_exchange` (freed afterwards)."""
    comm = bsp.comm.Dup()
    try:
        return timed(bsp, lambda: body(comm))
    finally:
        comm.Free()


if __name__ == "__main__":
    import sys

    from ...util.args.parser import not_a_program

    sys.exit(not_a_program("hpcbsp.apps.irregular.naive", "run python -m hpcbsp.apps.irregular.histogram, "
                           "index_gather, bfs, triangles or toposort (--help for options)"))
