"""The processes of a job on this machine, read from ``/proc`` (Linux), and signals for its ranks.

A job started by ``mpiexec`` is a tree: the launcher, its proxies (hydra's ``hydra_pmi_proxy``,
Open MPI's ``prted``), the ranks, and what the ranks start (hpcbsp's node watcher).  Asking the
ranks for their stacks (SIGUSR1: :mod:`hpcbsp.runtime.api.runner` registers ``faulthandler`` for
it) must reach the ranks only: Intel MPI's ``hydra_pmi_proxy`` has no handler for SIGUSR1 and
dies of it, orphaning the ranks and losing everything they write after it (MPICH's forwards
it).  :func:`signal_ranks` therefore skips every launcher's own programs
(:data:`hpcbsp.util.flavours.LAUNCHER_PROGRAMS`).

:func:`open_files` names the files a job's processes hold open or map (what ``hpcbsp
supervise`` removes of a job it stopped: :mod:`hpcbsp.cli.supervise.leftovers`).

Nothing here starts anything; a process that ends while it is read is left out.
"""
from __future__ import annotations

import os
import signal
from typing import Iterable

from .flavours import LAUNCHER_PROGRAMS
from .procstat import processes


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


def open_files(pids: Iterable[int]) -> set[str]:
    """The paths of the files that processes ``pids`` hold open (``/proc/PID/fd``) or map
    (``/proc/PID/maps``), as the kernel names them; none that has been deleted, and nothing of
    a process that has ended or is another user's (``/proc`` does not show those)."""
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
        try:
            with open(f"/proc/{pid}/maps") as fh:
                for line in fh:
                    parts = line.rstrip("\n").split(None, 5)
                    if len(parts) == 6 and parts[5].startswith("/"):
                        found.add(parts[5])
        except OSError:
            pass
    return {path for path in found if path.startswith("/") and not path.endswith(" (deleted)")}


def program(pid: int) -> str | None:
    """The base name of process ``pid``'s program (its ``argv[0]``), or None if it has ended."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv0 = fh.read().split(b"\0", 1)[0]
    except OSError:
        return None
    return os.path.basename(argv0.decode(errors="replace")) or None


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
