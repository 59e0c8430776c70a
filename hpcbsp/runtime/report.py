"""How a failed rank reports itself: its traceback once, every line prefixed with its rank."""
from __future__ import annotations

import sys
import traceback

from .errors import BSPError


def report_failure(exc: BaseException, rank: int, size: int) -> None:
    """Write ``exc`` to stderr: one line for a remote failure, else the rank-prefixed traceback."""
    if isinstance(exc, BSPError) and exc.collective:
        if rank == 0:
            sys.stderr.write(f"[hpcbsp] error: {exc}\n")
    elif isinstance(exc, BSPError) and exc.remote:
        sys.stderr.write(f"[hpcbsp] rank {rank}/{size}: {exc}\n")
    else:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        sys.stderr.write(f"[hpcbsp] rank {rank}/{size} failed:\n"
                         + "".join(f"[rank {rank}] {line}\n" for line in text.rstrip().splitlines()))
    sys.stderr.flush()
