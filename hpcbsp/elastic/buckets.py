"""Bucketed, overlapped allreduce of a flat gradient, as DDP does it, on MPI's ``Iallreduce``.

The gradient is one flat vector (the torch adapter's ``flat_grad``: parameter ``i`` is the
slice ``offsets[i]:offsets[i+1]``).  :func:`plan_buckets` cuts it into *buckets*: contiguous
ranges of values, taken from the end of the vector backwards (the backward pass produces the
last parameters' gradients first), the first of ``first_bytes``, each later one of
``bucket_bytes`` (DDP's defaults: 1 MiB, then 25 MiB).  A bucket holds whole parameters, as
DDP's do, or a part of one parameter larger than a bucket (all its pieces are ready at once).

:class:`BucketedReduce` sums one such vector over a communicator in place: the backward pass
calls :meth:`~BucketedReduce.ready` with each parameter whose gradient is complete (the torch
adapter's hooks, :meth:`hpcbsp.elastic.torch.adapter.TorchModel.on_gradient`), and as soon as every
parameter a bucket overlaps is ready, that bucket's ``Iallreduce`` (``MPI.IN_PLACE`` on a
numpy view of the vector: no copy) starts, while the backward pass computes the next
gradients.  Each call of :meth:`ready` also tests the requests in flight, which is what lets
MPI's progress engine move them while the caller computes.  :meth:`finish` starts whatever has
not started (parameters without a gradient, or a gradient source with no hooks), adds the
step's small integer vote (an ``Iallreduce`` of one int64), waits for all of them and returns
the vote's sum.

Arithmetic: each value is MPI's float sum of the ranks' values (``MPI.SUM`` in the vector's
dtype; the order of the additions is MPI's, so the bits can depend on the number of ranks and
the algorithm, as DDP's do on its backend's).  MPICH and Open MPI give every rank the same
result of an allreduce, so every worker applies the same update; the sharded step of
:func:`hpcbsp.elastic.allreduce.allreduce_step` guarantees that by construction instead.

h-relation per step: MPI's allreduce of ``P`` values (``2 (p-1)/p · P w`` bytes out of and
into every rank with a ring or a reduce-scatter + allgather), in ``len(buckets)`` collectives,
plus one 8-byte allreduce for the vote.
"""
from __future__ import annotations

from collections.abc import Container, Sequence

import numpy as np
from mpi4py import MPI

from .protocol import wait_all

__all__ = ["BucketedReduce", "DEFAULT_BUCKET_BYTES", "FIRST_BUCKET_BYTES", "plan_buckets"]

#: DDP's ``bucket_cap_mb=25`` and its first bucket's 1 MiB.
DEFAULT_BUCKET_BYTES = 25 * 2**20
FIRST_BUCKET_BYTES = 2**20


def plan_buckets(total: int, itemsize: int, bucket_bytes: int, first_bytes: int | None = None,
                 sizes: Sequence[int] | None = None, alone: Container[int] = ()) -> list[tuple[int, int]]:
    """The buckets of a vector of ``total`` values of ``itemsize`` bytes, as ``(lo, hi)`` value
    ranges in the order they fill (from the end backwards); the first holds ``first_bytes``
    (default ``bucket_bytes``), the others ``bucket_bytes``.

    With ``sizes`` (the parameters' values, in the vector's order) the buckets hold whole
    parameters, as DDP's do: parameters are added from the last backwards and a bucket closes
    once it holds its size or more; a parameter larger than a bucket is cut into buckets of its
    own (from its end, the last piece what is left), so no bucket holds a part of one parameter
    and a part of another.  The parameters in ``alone`` (indices into ``sizes``) are cut into
    buckets of their own at any size.  Without ``sizes`` the vector is one parameter."""
    if total < 0 or itemsize < 1 or bucket_bytes < 1 or (first_bytes is not None and first_bytes < 1):
        raise ValueError(f"plan_buckets: total {total}, itemsize {itemsize}, bucket_bytes "
                         f"{bucket_bytes}, first_bytes {first_bytes}: need total >= 0, sizes >= 1")
    sizes = [total] if sizes is None else list(sizes)
    if sum(sizes) != total or min(sizes, default=0) < 0:
        raise ValueError(f"plan_buckets: parameter sizes summing to {sum(sizes)}, not {total}")
    caps = [max(1, (first_bytes or bucket_bytes) // itemsize), max(1, bucket_bytes // itemsize)]
    out: list[tuple[int, int]] = []
    hi = phi = total  # the open bucket is [plo, hi) once parameter [plo, phi) is in it
    for index in reversed(range(len(sizes))):
        size = sizes[index]
        plo = phi - size
        cap = caps[min(len(out), 1)]
        if size > cap or (index in alone and size):  # buckets of its own, after closing what is open
            if hi > phi:
                out.append((phi, hi))
            hi = phi
            while hi > plo:
                lo = max(plo, hi - caps[min(len(out), 1)])
                out.append((lo, hi))
                hi = lo
        elif hi - plo >= cap:
            out.append((plo, hi))
            hi = plo
        phi = plo
    if hi > 0:
        out.append((0, hi))
    return out


class BucketedReduce:
    """Sum ``vector`` over ``comm`` in place, bucket by bucket as its parameters become ready
    (see the module docstring).  ``sizes``: the values of each parameter, in the vector's order.
    One step: :meth:`ready` for each parameter (any order, optional), then :meth:`finish`.
    ``skip``: parameters summed by other means (:mod:`hpcbsp.elastic.torch.factors`): in
    buckets of their own, never started, their values left as they are."""

    def __init__(self, comm: MPI.Comm, vector: np.ndarray, sizes: Sequence[int], bucket_bytes: int,
                 first_bytes: int | None = FIRST_BUCKET_BYTES, skip: Container[int] = ()):
        if vector.ndim != 1 or not vector.flags.c_contiguous or int(sum(sizes)) != vector.size:
            raise ValueError(f"BucketedReduce: a C-contiguous 1-D vector whose size ({vector.size}) "
                             f"is the sum of the parameters' sizes ({int(sum(sizes))})")
        self.comm = comm
        self.vector = vector
        planned = plan_buckets(vector.size, vector.itemsize, bucket_bytes, first_bytes, sizes, skip)
        offsets = np.concatenate([[0], np.cumsum(np.asarray(sizes, dtype=np.int64))])
        skipped = [(int(offsets[i]), int(offsets[i + 1])) for i in range(len(sizes)) if i in skip]
        self.buckets = [b for b in planned if not any(lo <= b[0] and b[1] <= hi for lo, hi in skipped)]
        # Which buckets each parameter overlaps, and how many parameters each bucket waits for.
        self._of_param: list[list[int]] = []
        self._needs = np.zeros(len(self.buckets), dtype=np.int64)
        for i in range(len(sizes)):
            lo, hi = (int(offsets[i]), int(offsets[i + 1])) if i not in skip else (0, 0)
            mine = [b for b, (blo, bhi) in enumerate(self.buckets) if blo < hi and lo < bhi]
            self._of_param.append(mine)
            self._needs[mine] += 1
        self._left = self._needs.copy()
        self._requests: list[MPI.Request] = []
        self._started = np.zeros(len(self.buckets), dtype=bool)
        self._vote = np.zeros(1, dtype=np.int64)

    def ready(self, param: int) -> None:
        """Parameter ``param``'s gradient is complete in the vector: start every bucket it
        completes, and let MPI progress the ones in flight."""
        for b in self._of_param[param]:
            self._left[b] -= 1
            if self._left[b] == 0:
                self._start(b)
        if self._requests:
            MPI.Request.Testall(self._requests)

    def _start(self, b: int) -> None:
        lo, hi = self.buckets[b]
        self._started[b] = True
        self._requests.append(self.comm.Iallreduce(MPI.IN_PLACE, self.vector[lo:hi], op=MPI.SUM))

    def finish(self, vote: int = 0, timeout: float = 60.0) -> int:
        """Start the buckets not yet started, sum ``vote`` over the ranks, wait for everything
        (:class:`~hpcbsp.elastic.protocol.ServerTimeout` after ``timeout`` seconds); returns the
        votes' sum.  The vector then holds the sum; the next step may begin."""
        for b in np.flatnonzero(~self._started):
            self._start(int(b))
        self._vote[0] = vote
        self._requests.append(self.comm.Iallreduce(MPI.IN_PLACE, self._vote, op=MPI.SUM))
        # Polled without naps (``spin``: sched_yield between tests): MPI moves a non-blocking
        # collective only inside its calls, and a nap of a few ms would stall a transfer of tens.
        wait_all(self._requests, timeout, f"end of the bucketed allreduce on rank {self.comm.Get_rank()} "
                 f"of the workers ({len(self.buckets)} buckets)", mode="spin")
        self._requests.clear()
        self._started[:] = False
        self._left[:] = self._needs
        return int(self._vote[0])
