"""What the compiled empty sync writes, kept in C (``kernels/_syncstate.pyx``): a context's
superstep :class:`Counter` and its ledger's :class:`Rows`.

``Counter().value`` is an int64 superstep number.  ``Rows(window, origin)`` keeps a ledger's most
recent ``window`` rows and aggregates over all of them, so that its memory does not grow with the
number of rows: ``append((index, label, t_sync, t_end, traffic))`` (``traffic``: None or an
object with ``bytes_out``, ``bytes_in``, ``msgs_out``, ``msgs_in``, ``records``, of which only
the counts are kept); ``len`` counts every row appended, ``rows[i]`` gives a row still in the
window (``rows.first <= i``) as the tuple of :data:`FIELDS` (types: :data:`FIELD_TYPES`), iteration the rows in the window;
``totals()``, ``maxima()`` and ``by_label()`` the aggregates of :data:`METRICS` over every row
(``work_s`` is ``t_sync - t_began``, ``sync_s`` is ``t_end - t_sync``).  ``sink``, ``flushed``,
``flush_every`` and ``raw(start, stop)`` let the ledger's stream write every row before it leaves
the window.  A row costs 80 bytes (each distinct label kept once, up to :data:`MAX_LABELS`).  The
compiled control step (:mod:`hpcbsp.kernels.controlstep`) appends rows and moves the counter
without the interpreter; :mod:`hpcbsp.runtime.superstep.ledger` and
:class:`~hpcbsp.runtime.superstep.supersteps.Supersteps` read them.
"""
from __future__ import annotations

from ._syncstate import FIELD_TYPES, FIELDS, MAX_LABELS, METRICS, OTHER, Counter, Rows

__all__ = ["FIELDS", "FIELD_TYPES", "MAX_LABELS", "METRICS", "OTHER", "Counter", "Rows"]
