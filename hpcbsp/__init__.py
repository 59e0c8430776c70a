"""hpcbsp: Bulk Synchronous Parallel programs on MPI.

``import hpcbsp`` imports the runtime (and with it mpi4py) and the FA-BSP layer, which provides
``BSP.mailbox`` to the runtime (see :mod:`hpcbsp.runtime.api.extension`); the layers are described in
docs/architecture.md.  Importing hpcbsp fails with a clear message when its compiled kernels are
missing.
"""
from __future__ import annotations

from typing import Any

from . import fabsp as _fabsp  # noqa: F401  (provides BSP.mailbox to the runtime)
from . import kernels as _kernels  # noqa: F401  (raises a clear error if the build is missing)
from .runtime.errors import BadInput, BSPError, Divergence, PeerFailed, SyncTimeout, UsageError

__version__ = "0.1.0"
#: The partitionings (:mod:`hpcbsp.runtime.api.partition`), also here where programs look for them:
#: ``bsp.coarray(layout=hpcbsp.Block(n, bsp.nprocs))``.
PARTITIONINGS = ("Block", "BlockCyclic", "Cyclic", "Explicit", "Grid", "Partitioning", "dims_create", "grid")

__all__ = ["BSP", "BSPError", "BadInput", "Divergence", "PeerFailed", "SyncTimeout", "UsageError", "run",
           *PARTITIONINGS, "__version__"]


def __getattr__(name: str) -> Any:
    if name in ("BSP", "run"):
        from . import runtime

        return getattr(runtime, name)
    if name in PARTITIONINGS:
        from .runtime.api import partition

        return getattr(partition, name)
    raise AttributeError(f"module 'hpcbsp' has no attribute {name!r}")
