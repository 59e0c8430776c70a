"""What a job the supervisor stopped leaves behind, and its removal: the job's files only.

An MPI job that ends normally removes the files it made for itself; one that is interrupted
(Ctrl-C, SIGTERM: the ranks abort or die of the signal) leaves them: MPICH's shared-memory
segments ``/dev/shm/mpich_shm_*`` and hydra's topology file ``/tmp/hydra_hwloc_xmlfile_*``
(:func:`hpcbsp.util.mpiflavour.leftover_names`, for the MPI of the job's launcher).  Other
users' jobs, and this user's other jobs, have files of the same names in the same folders, so
the names alone say nothing about whose a file is.

How this job's files are found: :func:`collect` runs while the job still runs, just before the
supervisor signals its launcher, and reads ``/proc`` for every process of the job
(:func:`hpcbsp.util.proctree.job_processes`: the launcher's session and process tree, the
ranks included) and the files each holds open or maps (:func:`hpcbsp.util.proctree.open_files`):
the ranks map their segments, hydra's proxy holds its topology file open.  Of those, the ones
in ``/dev/shm`` or the temporary folder whose names the MPI uses are the job's, and each is
recorded with its device and inode.  After the launcher has ended, :func:`remove` deletes each
recorded file that is still there as the same file (same device and inode, this user's): never
a file no process of the job had open, nor one made since under a recycled name.  (Files the
job makes after the signal, and a job on other nodes, are not seen: the runtime's node watcher
removes the segments of a rank that died there.)
"""
from __future__ import annotations

import os
import tempfile
from typing import Mapping

from ...util.flavours import Flavour
from ...util.mpiflavour import leftover_names
from ...util.procstat import job_processes, open_files

#: Where the MPI's shared-memory files are.
SHM = "/dev/shm"


def collect(launcher: int, flavour: Flavour) -> dict[str, tuple[int, int]]:
    """The leftover-prone files that the job of launcher process ``launcher`` (started in a
    session of its own) holds open now: ``{path: (device, inode)}``."""
    shm, temp = leftover_names(flavour)
    tmp = tempfile.gettempdir()
    found: dict[str, tuple[int, int]] = {}
    for path in open_files(job_processes(launcher)):
        folder, name = os.path.split(path)
        if (folder == SHM and name.startswith(shm)) or (folder == tmp and name.startswith(temp)):
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if st.st_uid == os.getuid():
                found[path] = (st.st_dev, st.st_ino)
    return found


def remove(files: Mapping[str, tuple[int, int]]) -> list[str]:
    """Remove each of :func:`collect`'s ``files`` that is still the same file; the paths removed."""
    removed = []
    for path, (dev, ino) in files.items():
        try:
            st = os.lstat(path)
            if (st.st_dev, st.st_ino) == (dev, ino) and st.st_uid == os.getuid():
                os.unlink(path)
                removed.append(path)
        except OSError:
            continue
    return removed
