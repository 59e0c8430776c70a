"""Processes as ``/proc`` shows them (Linux), read the one way hpcbsp reads them: a process's
line in ``/proc/PID/stat`` (state, parent, start time, wait status), the processes of a job (its
tree, its session), the files a process maps or holds open, and its program.

The one reader of ``/proc`` for processes.  The standard library only, and no import of hpcbsp:
the runtime and :mod:`.proctree` import it as ``hpcbsp.util.procstat``, and the node's watcher
(``hpcbsp/runtime/failure/nodewatch.py``, run as a script with ``python -I -S``) loads this file
by its path.  Every function reads ``/proc`` at its call; a process that ends while it is read
is one that has ended (nothing raises for it, and it is left out).

A job started by ``mpiexec`` is a tree: the launcher, its proxies (hydra's ``hydra_pmi_proxy``,
Open MPI's ``prted``), the ranks, and what the ranks start (hpcbsp's node watcher)
(:func:`descendants`, :func:`in_group`, :func:`job_processes`).

A process that its parent has reaped leaves ``/proc``, and its wait status with it.  Someone who
is not the parent (the node's watcher, of ranks that ``srun``'s step daemon or hydra's proxy reaps)
keeps it by holding a pidfd opened while the process ran (:func:`pidfd`): from Linux 6.15 the
kernel answers for the reaped process through it (``PIDFD_GET_INFO``), and :func:`probe` asks.
"""
from __future__ import annotations

import fcntl
import os
import struct
from typing import Iterable

__all__ = ["stat", "processes", "ppid", "start_time", "pidfd", "probe", "running", "descendants", "in_group",
           "job_processes", "mapped", "open_files", "program"]


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


#: ``ioctl(pidfd, PIDFD_GET_INFO, struct pidfd_info)`` (Linux 6.15): ``_IOWR(0xFF, 11, 64 bytes)``.
_PIDFD_GET_INFO = (3 << 30) | (64 << 16) | (0xFF << 8) | 11
#: ``pidfd_info.mask``'s bit for the exit status (at byte 60 of the struct's first 64 bytes).
_PIDFD_INFO_EXIT = 8


def pidfd(pid: int) -> int:
    """A pidfd for process ``pid``, opened now (while it runs), for :func:`probe` to read its wait
    status after its parent has reaped it; -1 where none can be opened (the process has ended, or
    a kernel before Linux 5.3).  The caller closes it."""
    try:
        return os.pidfd_open(pid)
    except (OSError, AttributeError):
        return -1


def _reaped_status(fd: int) -> int | None:
    """The wait status of the reaped process of pidfd ``fd``; None without ``fd`` or where the
    kernel does not keep it (before Linux 6.15)."""
    if fd < 0:
        return None
    info = bytearray(64)
    struct.pack_into("Q", info, 0, _PIDFD_INFO_EXIT)
    try:
        fcntl.ioctl(fd, _PIDFD_GET_INFO, info)
    except OSError:
        return None
    mask, = struct.unpack_from("Q", info, 0)
    return struct.unpack_from("i", info, 60)[0] if mask & _PIDFD_INFO_EXIT else None


def probe(pid: int, fd: int = -1) -> tuple[str, int | None]:
    """``(state, exit code)`` of process ``pid``: the exit code is 0 while it lives and, for a
    zombie, the wait status (its low 7 bits the signal that ended it).  Once it has been reaped the
    state is ``"gone"`` and the code None, or the wait status where ``fd`` is a pidfd of the process
    (:func:`pidfd`) and the kernel keeps it."""
    fields = stat(pid)
    if not fields:
        return "gone", _reaped_status(fd)
    try:
        return fields[0], int(fields[-1])
    except ValueError:
        return fields[0], None


def running(pid: int) -> bool:
    """Whether process ``pid`` still runs (neither reaped nor a zombie)."""
    state, code = probe(pid)
    return state not in ("gone", "Z", "X", "x") and code == 0


def _below(roots: list[int], procs: dict[int, list[str]]) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid, fields in procs.items():
        children.setdefault(int(fields[1]), []).append(pid)
    found, todo = [], list(roots)
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _in_group(pgid: int, procs: dict[int, list[str]]) -> list[int]:
    return [pid for pid, fields in procs.items() if pgid in (int(fields[2]), int(fields[3]))]


def descendants(root: int) -> list[int]:
    """The processes below ``root`` (for mpiexec: its proxies, the ranks and what they started)."""
    return _below([root], processes())


def in_group(pgid: int) -> list[int]:
    """The processes of process group or session ``pgid`` (a launcher started with
    ``start_new_session=True``: it and every process it started that stayed in its session; the
    node watchers of hpcbsp's ranks have sessions of their own, and end with their ranks)."""
    return _in_group(pgid, processes())


def job_processes(root: int) -> list[int]:
    """Every process of the job whose launcher is ``root`` (started with
    ``start_new_session=True``): its session and process group and everything below them, read
    from one look at ``/proc``.  MPICH's hydra puts its proxy and each rank in a session of its
    own, so the session alone holds only mpiexec; the tree alone misses the processes that a
    dead proxy orphaned (children of init now) where they stayed in the session."""
    procs = processes()
    group = dict.fromkeys([root, *_in_group(root, procs)])
    return list(dict.fromkeys([*group, *_below(list(group), procs)]))


def mapped(pid: int) -> set[str]:
    """The paths of the files process ``pid`` maps (``/proc/PID/maps``), none deleted."""
    found: set[str] = set()
    try:
        with open(f"/proc/{pid}/maps") as fh:
            for line in fh:
                parts = line.rstrip("\n").split(None, 5)
                if len(parts) == 6 and parts[5].startswith("/") and not parts[5].endswith(" (deleted)"):
                    found.add(parts[5])
    except OSError:
        pass
    return found


def open_files(pids: Iterable[int]) -> set[str]:
    """The paths of the files that processes ``pids`` hold open (``/proc/PID/fd``) or map
    (:func:`mapped`), as the kernel names them; none that has been deleted, and nothing of a
    process that has ended or is another user's (``/proc`` does not show those)."""
    found: set[str] = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            fds = []
        for fd in fds:
            try:
                found.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
            except OSError:
                pass
        found |= mapped(pid)
    return {path for path in found if path.startswith("/") and not path.endswith(" (deleted)")}


def program(pid: int) -> str | None:
    """The base name of process ``pid``'s program (its ``argv[0]``), or None if it has ended."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv0 = fh.read().split(b"\0", 1)[0]
    except OSError:
        return None
    return os.path.basename(argv0.decode(errors="replace")) or None
