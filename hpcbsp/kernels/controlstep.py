"""The control step's collective on a 10-word int64 record, compiled (``kernels/_controlstep.pyx``):
no MPI header and no MPI library linked, the functions and handles handed over by the caller
(:mod:`hpcbsp.runtime.superstep.native` finds them in the running MPI library).

- :class:`RecordStep` ``(start, wait, request, record, owners, error)``: ``start(request)`` and
  ``wait(request, status)`` on a persistent collective; :func:`allreduce_step` the same step as
  one blocking ``MPI_Allreduce``-shaped call with the library's handles at their width (4 or 8
  bytes).  ``agree(kind, step, sig, data, gets)`` returns the MAX-reduced ``data | gets << 2``
  (+16 where every rank gave the same ``data``) or :data:`DIVERGED`; ``agree_row`` is the empty
  sync's timed step, appending its ledger row (:class:`hpcbsp.kernels.syncstate.Rows`);
  ``close()`` before the request or communicator is freed.
- :func:`plain_sync`: a compiled function that stands for a plain context's ``sync`` (the empty
  superstep with no Python frame, everything else handed to the method).
- :class:`Lateness` ``(rows, rank, threshold, said)``: who arrived last at the last
  :data:`LATE_WINDOW` control steps; ``RecordStep.watch(lateness)`` makes the record 12 words,
  with this rank's work packed with its rank (``Lateness.packed``, :data:`RANK_BITS`), and has
  every step observed (``said`` is called when one rank was late in :data:`LATE_COUNT` of them).
- :func:`start_wait_loop`: a persistent request started and waited for ``n`` times from C (a
  collective's own latency, for the benchmark).
"""
from __future__ import annotations

from ._controlstep import (
           DIVERGED,
           LATE_COUNT,
           LATE_WINDOW,
           RANK_BITS,
           Lateness,
           RecordStep,
           allreduce_step,
           plain_sync,
           start_wait_loop,
)

__all__ = ["DIVERGED", "LATE_COUNT", "LATE_WINDOW", "RANK_BITS", "Lateness", "RecordStep", "allreduce_step",
           "plain_sync", "start_wait_loop"]
