"""A process's line in ``/proc/PID/stat`` (Linux), read the one way hpcbsp reads it.

The standard library only, and no import of hpcbsp: the runtime and :mod:`.proctree` import it as
``hpcbsp.util.procstat``, and the node's watcher (``hpcbsp/runtime/failure/nodewatch.py``, run as
a script with ``python -I -S``) loads this file by its path.  Every function reads ``/proc`` at
its call; a process that ends while it is read is one that has ended (nothing raises for it).
"""
from __future__ import annotations

import os

__all__ = ["stat", "processes", "ppid", "start_time", "probe", "running"]


def stat(pid: int | str) -> list[str]:
    """The fields of ``/proc/PID/stat`` after the command name (state, ppid, pgrp, session, ...,
    field 22 ``starttime`` at index 19, the wait status last); ``[]`` once the process has been
    reaped."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def processes() -> dict[int, list[str]]:
    """Every process's :func:`stat` fields, by pid, from one look at ``/proc``."""
    found = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (fields := stat(name)):
            found[int(name)] = fields
    return found


def ppid(pid: int) -> int:
    """The parent of process ``pid`` (0 once it has been reaped)."""
    fields = stat(pid)
    return int(fields[1]) if len(fields) > 1 else 0


def start_time(pid: int | str) -> str | None:
    """When process ``pid`` started (clock ticks since boot, as ``/proc`` writes it): with the
    pid, a name for the process that a later one with the same pid does not share.  None once it
    has been reaped."""
    fields = stat(pid)
    return fields[19] if len(fields) > 19 else None


def probe(pid: int) -> tuple[str, int | None]:
    """``(state, exit code)`` of process ``pid``: ``("gone", None)`` once it has been reaped; the
    exit code is 0 while it lives and, for a zombie, the wait status (its low 7 bits the signal
    that ended it)."""
    fields = stat(pid)
    if not fields:
        return "gone", None
    try:
        return fields[0], int(fields[-1])
    except ValueError:
        return fields[0], None


def running(pid: int) -> bool:
    """Whether process ``pid`` still runs (neither reaped nor a zombie)."""
    state, code = probe(pid)
    return state not in ("gone", "Z", "X", "x") and code == 0
