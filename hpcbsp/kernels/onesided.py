"""One MPI one-sided operation per update, issued from C (the irregular apps' one-sided baseline).

:class:`Updates` (compiled, ``kernels/_onesided.pyx``) calls ``MPI_Accumulate`` or ``MPI_Get``
once per (rank, offset) pair in a C loop with the GIL released.  This package knows nothing of
MPI: the caller hands it the functions' addresses and the handles of the window, the element
type and the op (:mod:`hpcbsp.apps.irregular.rma` finds them in the running MPI library).  Its
oracle in the tests is the numpy histogram (``np.bincount``) and the table read by indexing.
"""
from __future__ import annotations

from ._extensions import MODULES

#: ``Updates(accumulate, get, handle_size, win, dtype, op, owners)``; ``.accumulate(ranks,
#: offsets)`` and ``.get(ranks, offsets, out)`` return ``(mpi_error_code, index)``, ``(0, n)``
#: when every operation was issued; ``.close()`` before the window is freed.
Updates = MODULES["_onesided"].Updates

__all__ = ["Updates"]
