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
- :func:`start_wait_loop`: a persistent request started and waited for ``n`` times from C (a
  collective's own latency, for the benchmark).
"""
from __future__ import annotations

from ._controlstep import DIVERGED, RecordStep, allreduce_step, plain_sync, start_wait_loop

__all__ = ["DIVERGED", "RecordStep", "allreduce_step", "plain_sync", "start_wait_loop"]
