"""hpcbsp: Bulk Synchronous Parallel programs on MPI.

``hpcbsp.BSP`` and ``hpcbsp.run`` are imported on first use, so that ``import hpcbsp`` (and the
cost-model command line) does not initialise MPI.  Importing hpcbsp fails with a clear message
when its compiled kernels are missing.
"""
from __future__ import annotations

from typing import Any

from . import kernels as _kernels  # noqa: F401  (raises a clear error if the build is missing)
from .runtime.errors import BadInput, BSPError, Divergence, PeerFailed, SyncTimeout, UsageError

__version__ = "0.1.0"
__all__ = ["BSP", "BSPError", "BadInput", "Divergence", "PeerFailed", "SyncTimeout", "UsageError", "run",
           "__version__"]


def __getattr__(name: str) -> Any:
    if name in ("BSP", "run"):
        from . import runtime

        return getattr(runtime, name)
    raise AttributeError(f"module 'hpcbsp' has no attribute {name!r}")
