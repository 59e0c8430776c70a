"""What the node's watcher (:mod:`.nodewatch`) removes after a job: the ``/dev/shm`` files the
ranks map, and the leftovers of this user's earlier jobs that are provably dead.  The standard
library only (and :mod:`hpcbsp.util.procstat`, loaded by path when the watcher runs as a script):
it runs inside the watcher.
"""
from __future__ import annotations

import os
import time

if __package__:
    from ...util import procstat
else:  # loaded by the watcher's script (python -I -S nodewatch.py), which puts util/ on the path
    import procstat  # type: ignore[no-redef]

__all__ = ["STALE_AGE", "children", "mapped_shm", "remove_stale"]

#: Age in seconds below which a segment of an earlier job is never removed (it may be in setup).
STALE_AGE = 60.0


def children(parents: set[int]) -> list[int]:
    """The living processes whose parent is in ``parents`` (the job's other ranks here)."""
    try:
        procs = procstat.processes()
    except OSError:
        return []
    wanted = {str(p) for p in parents}
    return [pid for pid, fields in procs.items()
            if len(fields) > 1 and fields[1] in wanted and fields[0] not in ("Z", "X", "x")]


def mapped_shm(pid: int) -> set[str]:
    """The files under ``/dev/shm`` process ``pid`` maps and that still exist by that name."""
    return {path for path in procstat.mapped(pid) if path.startswith("/dev/shm/")}


def remove_stale(marker: str, now: float | None = None) -> None:
    """Remove this user's leftovers of earlier jobs on this node that are provably dead: failure
    markers whose launcher (pid and start time in the name) no longer runs, and MPICH segments
    (``/dev/shm/mpich_shm_*``) owned by this user, older than :data:`STALE_AGE` and mapped by no
    process this watcher can see (all of them as root; all of this user's otherwise)."""
    now = time.time() if now is None else now
    head, _, _ = os.path.basename(marker).rpartition("-")  # .../hpcbsp-failed-UID-HOST-PID
    head, _, _ = head.rpartition("-")
    tmp = os.path.dirname(marker)
    try:
        names = os.listdir(tmp)
    except OSError:
        names = []
    for name in names:
        if not name.startswith(head + "-"):
            continue
        pid, _, start = name[len(head) + 1:].removesuffix(".first").partition("-")
        if pid.isdigit() and procstat.start_time(pid) == start:
            continue  # that launcher still runs
        try:  # a marker, or the file an earlier version of the watch kept beside it
            (os.remove if name.endswith(".first") else os.rmdir)(os.path.join(tmp, name))
        except OSError:
            pass
    uid = os.getuid()
    stale = []
    try:
        entries = list(os.scandir("/dev/shm"))
    except OSError:
        return
    for entry in entries:
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if entry.name.startswith("mpich_shm_") and st.st_uid == uid and now - st.st_mtime > STALE_AGE:
            stale.append(entry.path)
    if not stale:
        return
    mapped: set[str] = set()
    for proc in procstat.processes():
        mapped |= mapped_shm(proc)
    for path in stale:
        if path not in mapped:
            try:
                os.unlink(path)
            except OSError:
                pass
