"""Signals for a job's ranks only, never for the launcher's own processes.

Asking the ranks for their stacks (SIGUSR1: :mod:`hpcbsp.runtime.api.runner` registers
``faulthandler`` for it) must reach the ranks only: Intel MPI's ``hydra_pmi_proxy`` has no
handler for SIGUSR1 and dies of it, orphaning the ranks and losing everything they write after
it (MPICH's forwards it).  :func:`signal_ranks` therefore skips every launcher's own programs
(:data:`hpcbsp.util.flavours.LAUNCHER_PROGRAMS`).

What a job's processes are, and the files they hold open, is read from ``/proc`` by
:mod:`.procstat`, the one reader.
"""
from __future__ import annotations

import os
import signal
from typing import Iterable

from .flavours import LAUNCHER_PROGRAMS
from .procstat import program

__all__ = ["signal_ranks"]


def signal_ranks(pids: Iterable[int], sig: int = signal.SIGUSR1) -> list[int]:
    """Send ``sig`` to those of ``pids`` that are not a launcher's own process; the pids sent to."""
    sent = []
    for pid in pids:
        name = program(pid)
        if name is None or name in LAUNCHER_PROGRAMS:
            continue
        try:
            os.kill(pid, sig)
        except OSError:
            continue
        sent.append(pid)
    return sent
