"""The BSP superstep runtime on MPI: context, coarrays, queues, exchange, ledger, launch checks."""
from .coarray import Coarray, GetFuture
from .context import BSP
from .errors import BadInput, BSPError, Divergence, PeerFailed, SyncTimeout, UsageError
from .ledger import Ledger, SuperstepRecord
from .queue import Queue
from .runner import run

__all__ = ["BSP", "BSPError", "BadInput", "Coarray", "Divergence", "GetFuture", "Ledger", "PeerFailed", "Queue",
           "SuperstepRecord", "SyncTimeout", "UsageError", "run"]
