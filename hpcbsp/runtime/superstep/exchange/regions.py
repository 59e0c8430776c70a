"""One ``Alltoallv`` of byte regions that lie anywhere in memory: how each side is passed to MPI.

A side is one uint8 array per rank (None for nothing), the payloads of large puts to send or
the places they land in.  MPI takes one buffer per side with an int count and displacement per
rank, so :func:`regions` lays a side out as

* one region alone: that array itself, displacement 0 (no address arithmetic, which cost about
  7 us of a 35 us superstep under Intel MPI: docs/notes/performance-journal.md, "Per MPI"; every
  round at two ranks);
* several: one buffer spanning them, from the lowest address to the end of the highest, with
  each region's distance from its start as displacement (no copy), where that span fits MPI's
  int displacements (:data:`SPAN`);
* otherwise: one new staging buffer of them laid end to end, which :func:`alltoallv` fills
  before the send or copies out after the receive.

h-relation of :func:`alltoallv`: the bytes of ``out`` out of this rank, of ``back`` into it.
"""
from __future__ import annotations

from itertools import accumulate
from typing import Any

import numpy as np
from mpi4py import MPI

#: The most bytes one payload may have to travel in an ``Alltoallv`` (MPI's int counts) ...
COUNT_MAX = 2**31 - 1
#: ... and the most bytes the regions of one side of one ``Alltoallv`` may span, from the lowest
#: address to the end of the highest (its int displacements); beyond it they are staged.
SPAN = 2**31 - 1


#: One side of an ``Alltoallv`` as :func:`regions` lays it out: ``(buffer, counts, displacements,
#: staging)``.
Region = tuple[Any, list[int], list[int], "np.ndarray | None"]


def regions(arrays: list[np.ndarray | None]) -> Region:
    """One ``Alltoallv`` side for ``arrays[r]`` (uint8 arrays, None for nothing) as ``(buffer,
    counts, displacements, staging)``, laid out as the module docstring says: ``staging`` is
    None, or the new buffer (then also ``buffer``) that the caller fills before a send or copies
    out after a receive, region ``r`` at ``displacements[r]``."""
    p = len(arrays)
    counts = [0 if a is None else a.nbytes for a in arrays]
    used = [r for r in range(p) if counts[r]]
    if not used:
        return np.empty(0, np.uint8), counts, [0] * p, None
    if len(used) == 1:  # one region (two ranks, or one peer this round): the array itself
        return arrays[used[0]], counts, [0] * p, None
    addresses = [a.__array_interface__["data"][0] if a is not None and a.nbytes else 0 for a in arrays]
    base = min(addresses[r] for r in used)
    span = max(addresses[r] + counts[r] for r in used) - base
    if span <= SPAN:
        return MPI.buffer.fromaddress(base, span), counts, [addresses[r] - base if counts[r] else 0 for r in range(p)], None
    staging = np.empty(sum(counts), np.uint8)
    displs = list(accumulate(counts, initial=0))[:-1]
    return staging, counts, displs, staging


def alltoallv(comm: MPI.Comm, out: list[np.ndarray | None], back: list[np.ndarray | None],
              side: Region | None = None) -> None:
    """One ``Alltoallv`` (collective) that sends ``out[d]`` to rank ``d`` and receives from rank
    ``s`` into ``back[s]`` (uint8 arrays, None for nothing), each side as :func:`regions` lays
    it out (staged through one buffer only where its regions lie too far apart); ``side``:
    ``regions(back)`` where the caller has it already (a repeated bulk exchange)."""
    sbuf, scounts, sdispls, staged = regions(out)
    if staged is not None:
        for a, at in zip(out, sdispls):
            if a is not None and a.nbytes:
                staged[at:at + a.nbytes] = a
    rbuf, rcounts, rdispls, landed = regions(back) if side is None else side
    comm.Alltoallv([sbuf, (scounts, sdispls), MPI.BYTE], [rbuf, (rcounts, rdispls), MPI.BYTE])
    if landed is not None:
        for a, at in zip(back, rdispls):
            if a is not None and a.nbytes:
                a[...] = landed[at:at + a.nbytes]
