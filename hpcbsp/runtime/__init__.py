"""The BSP superstep runtime on MPI: context, coarrays, queues, exchange, ledger, launch checks."""
from .coarray import Coarray, GetFuture
from .context import BSP
from .errors import BSPError, SyncTimeout
from .ledger import Ledger, SuperstepRecord
from .queue import Queue
from .runner import run

__all__ = ["BSP", "BSPError", "Coarray", "GetFuture", "Ledger", "Queue", "SuperstepRecord", "SyncTimeout", "run"]
