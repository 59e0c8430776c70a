"""The BSP superstep runtime on MPI: context, coarrays, queues, exchange, ledger, launch checks."""
from .api.coarray import Coarray, GetFuture
from .api.context import BSP
from .api.queue import Queue
from .api.runner import run
from .errors import BadInput, BSPError, Divergence, PeerFailed, SyncTimeout, UsageError
from .superstep.ledger import Ledger, SuperstepRecord

__all__ = ["BSP", "BSPError", "BadInput", "Coarray", "Divergence", "GetFuture", "Ledger", "PeerFailed", "Queue",
           "SuperstepRecord", "SyncTimeout", "UsageError", "run"]
