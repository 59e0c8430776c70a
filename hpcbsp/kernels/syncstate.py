"""What the compiled empty sync writes, kept in C (``kernels/_syncstate.pyx``): a context's
superstep :class:`Counter` and its ledger's :class:`Rows`.

``Counter().value`` is an int64 superstep number.  ``Rows`` holds a ledger's raw rows
``(index, label, t_sync, t_end, traffic)``, append only: ``append(row)`` takes such a tuple,
``rows[i]`` (negative ``i`` too), ``len`` and iteration give them back equal to what was
appended; a row costs 32 bytes (each distinct label kept once, ``traffic`` only where it is not
None).  The compiled control step (:mod:`hpcbsp.kernels.controlstep`) appends rows and moves the
counter without the interpreter; :mod:`hpcbsp.runtime.superstep.ledger` and
:class:`~hpcbsp.runtime.superstep.supersteps.Supersteps` read them.
"""
from __future__ import annotations

from ._syncstate import Counter, Rows

__all__ = ["Counter", "Rows"]
