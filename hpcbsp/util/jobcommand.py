"""The command line that starts an MPI job of N ranks, one per host where hosts are given.

Programs that launch jobs of their own (``hpcbsp-cost calibrate``, ``python -m hpcbsp.bench
bsf``) start them in one of three ways, spelled for the MPI the ``mpiexec`` belongs to
(:mod:`hpcbsp.util.mpiflavour`: MPICH, Open MPI, Intel MPI):

* ``mpiexec -n N`` on this machine (no host file); Open MPI is also told that it may start more
  ranks than cores (``--map-by :OVERSUBSCRIBE``), which MPICH and Intel MPI do when asked;
* one rank on each of the first N hosts listed in FILE (one host a line, ``host`` or
  ``host:slots``, ``#`` comments): ``mpiexec -f FILE -ppn 1 -n N`` for the hydras of MPICH and
  Intel MPI, ``mpiexec --host H1,..,HN --map-by ppr:1:node -n N`` for Open MPI (whose host
  files have another syntax).  When FILE is the host file of the local emulated cluster
  (``slurm/local-cluster.sh``, which writes an ``rsh`` launcher beside it), the job goes
  through that launcher (``-launcher rsh -launcher-exec DIR/rsh``; Open MPI: ``--prtemca
  plm_ssh_agent DIR/rsh``), so that each rank runs inside its node;
* ``srun -N N -n N --mpi=PLUGIN``: one task per node of the Slurm allocation, with the PMI
  plugin of that MPI (``pmi2`` for MPICH and Intel MPI, ``pmix`` for Open MPI; none for an MPI
  hpcbsp does not know, which then gets Slurm's default; ``srun --mpi=list`` shows what a
  site's Slurm offers).

A job restarted on part of the hosts (``hpcbsp supervise``) names them with ``only``: hydra's
``-hosts a,b,c`` instead of ``-f FILE`` (Open MPI: ``--host``; the launcher is still the one FILE
implies), or ``srun --exclude=...`` with ``exclude``.  With ``hostfile_dir`` (a private folder
of the caller's) the launch's hosts are written there as a host file in the MPI's syntax
(:data:`LAUNCH_HOSTS`) and passed as that file (``-f FILE``, Open MPI's ``--hostfile FILE``)
instead of a list of names: one argument at 8,000 hosts too (a single argument of the kernel
holds 128 KiB).  :func:`probe_command` is the cheap check
that a host answers, through the launcher the job would use.

Bad input (an unreadable or empty host file, a line that is not ``HOST`` or ``HOST:SLOTS``, fewer
hosts than ranks, a host file for an mpiexec of an MPI this module cannot tell) raises
:class:`JobCommandError` with one line that names the file or program (and the bad lines) and
what to do; callers print it and exit 2 before any job starts.  Nothing here imports MPI.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Sequence

from .choices import LAUNCHES
from .flavours import Flavour
from .mpiflavour import local_args, mpiexec_flavour

#: The first line of the launcher slurm/local-cluster.sh writes beside its host file.
LOCAL_CLUSTER_MARK = "hpcbsp slurm/local-cluster.sh"


#: The name of the host file :func:`job_command` writes into ``hostfile_dir``.
LAUNCH_HOSTS = "launch.hosts"


class JobCommandError(ValueError):
    """A host file or launch choice that cannot start the job (one line for the user)."""


#: A host name (RFC 1123 labels; ``_`` allowed, as some sites' /etc/hosts have it) or an IPv4
#: address, then an optional ``:SLOTS``.
_HOST_LINE = re.compile(r"(?P<host>[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
                        r"(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*)(?::(?P<slots>[0-9]+))?")
#: Bad lines a refusal shows before it counts the rest.
_SHOWN_BAD = 3


def read_hosts(path: str | os.PathLike) -> list[str]:
    """The distinct hosts of a host file, in order (``host`` or ``host:slots`` lines, ``#`` comments).

    Every other line is refused, before any launch: a :class:`JobCommandError` names the file and
    the bad lines (their numbers and text), so that a file of something else (a README, a
    binary, a shell script) is never taken for host names."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise JobCommandError(f"host file {path}: cannot read it ({exc.strerror or exc}); "
                              "give a file with one host a line") from None
    hosts: list[str] = []
    bad: list[str] = []
    for number, raw in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        found = _HOST_LINE.fullmatch(line)
        slots = found.group("slots") if found else None
        if found is None or len(found.group("host")) > 253 or (slots is not None and int(slots) < 1):
            shown = repr(line)
            bad.append(f"line {number} {shown if len(shown) <= 40 else shown[:36] + '...'}")
            continue
        if found.group("host") not in hosts:
            hosts.append(found.group("host"))
    if bad:
        shown = ", ".join(bad[:_SHOWN_BAD]) + (f" and {len(bad) - _SHOWN_BAD} more" if len(bad) > _SHOWN_BAD else "")
        raise JobCommandError(f"host file {path}: {shown} {'is not a host' if len(bad) == 1 else 'are not hosts'} "
                              "(one host a line: HOST or HOST:SLOTS, # comments); correct the file or give another")
    if not hosts:
        raise JobCommandError(f"host file {path}: lists no host; give a file with one host a line")
    return hosts


def local_cluster_launcher(hostfile: str | os.PathLike) -> str | None:
    """The local cluster's ``rsh`` launcher when ``hostfile`` is that cluster's, else None."""
    rsh = Path(hostfile).resolve().parent / "rsh"
    try:
        with open(rsh) as fh:
            head = fh.read(512)
    except OSError:
        return None
    return str(rsh) if LOCAL_CLUSTER_MARK in head and os.access(rsh, os.X_OK) else None


def job_command(mpiexec: str, ranks: int, *, hosts: str | None = None, launch: str = "mpiexec",
                only: Sequence[str] | None = None, exclude: Sequence[str] = (),
                kill_on_bad_exit: bool = False, flavour: Flavour | None = None,
                hostfile_dir: str | None = None) -> list[str]:
    """argv prefix that starts ``ranks`` ranks (append the program and its arguments).

    ``hosts``: a host file, one rank per host (needs ``launch="mpiexec"``); ``only``: just these
    hosts of that file, in this order (the file still picks the launcher); ``launch="srun"``: one
    task per node of the Slurm allocation, none on the nodes in ``exclude``; with
    ``kill_on_bad_exit``, a task that fails or is killed ends the step at once (``srun -K``; a job
    that lost a rank cannot go on).  ``flavour``: the MPI the job runs on (default: the one
    ``mpiexec`` belongs to, :func:`~hpcbsp.util.mpiflavour.mpiexec_flavour`).  ``hostfile_dir``:
    write the hosts of the launch to :data:`LAUNCH_HOSTS` there (replacing it) and pass that file.
    """
    if launch not in LAUNCHES:
        raise JobCommandError(f"unknown launch {launch!r}: choose from {', '.join(LAUNCHES)}")
    if launch == "srun":
        if hosts is not None or only is not None:
            raise JobCommandError("a host file is for mpiexec; srun places the tasks on the allocation's nodes")
        flavour = flavour or mpiexec_flavour(mpiexec)
        plugin = [f"--mpi={flavour.srun_mpi}"] if flavour.srun_mpi else []
        cmd = ["srun", "-N", str(ranks), "-n", str(ranks), *plugin]
        cmd += ["--kill-on-bad-exit=1"] if kill_on_bad_exit else []
        return cmd + ([f"--exclude={','.join(exclude)}"] if exclude else [])
    if exclude:
        raise JobCommandError("exclude is for srun; with mpiexec name the hosts to use (only)")
    flavour = flavour or mpiexec_flavour(mpiexec)
    if hosts is None:
        if only is not None:
            raise JobCommandError("only names hosts of a host file; give the host file too")
        return [mpiexec, *local_args(flavour), "-n", str(ranks)]
    listed = read_hosts(hosts)
    if only is not None:
        unknown = [h for h in only if h not in listed]
        if unknown:
            raise JobCommandError(f"host file {hosts}: does not list {', '.join(unknown)}")
        listed = list(only)
    if len(listed) < ranks:
        raise JobCommandError(f"host file {hosts}: lists {len(listed)} host(s), but {ranks} ranks need one "
                              f"host each; list more hosts or run fewer workers")
    if not flavour.known:
        raise JobCommandError(f"cannot tell which MPI {mpiexec} belongs to (MPICH, Open MPI or Intel MPI: "
                              "`mpiexec --version` names none), so not how to place one rank per host of "
                              f"{hosts}; use the mpiexec of one of those, or --launch srun inside an allocation")
    written = None
    if hostfile_dir is not None:
        written = os.path.join(hostfile_dir, LAUNCH_HOSTS)
        Path(written).write_text(flavour.hostfile_text(listed[:ranks]))
    return [mpiexec, *flavour.hostfile_args(listed[:ranks], str(hosts), local_cluster_launcher(hosts),
                                            subset=only is not None, written=written), "-n", str(ranks)]


#: Seconds ssh may take to connect when :func:`probe_command` checks a host.
PROBE_CONNECT_S = 5


def probe_command(hosts: str | os.PathLike, host: str) -> list[str]:
    """The command that succeeds when ``host`` of host file ``hosts`` answers: ``true`` run there
    through the launcher a job would use (the local cluster's ``rsh``, else ssh, hydra's default,
    without a password prompt and with a connect timeout).  The caller bounds its time."""
    rsh = local_cluster_launcher(hosts)
    if rsh is not None:
        return [rsh, host, "true"]
    return ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={PROBE_CONNECT_S}", host, "true"]
