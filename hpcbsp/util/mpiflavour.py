"""Which MPI this is (MPICH, Open MPI, Intel MPI) and what differs between them around a job.

hpcbsp's runtime uses only standard MPI through mpi4py; what differs between implementations is
around the program: how ``mpiexec`` is told to place ranks, what the ranks' environment holds,
which variables tune the library, how a dead rank is reported.  This module and the flavours'
records (:mod:`.flavours`: :class:`Flavour`, ``MPICH``, ``OPENMPI``, ``IMPI``, ``UNKNOWN``) are
the one place that knows those differences; everything that launches a job, cleans a child's
environment or names the MPI in use asks them.  The records hold the facts; the functions here
find a flavour and act on its record.

A flavour is found from the library (:func:`library_flavour`, the text of
``MPI_Get_library_version``; :func:`running_flavour` for the one mpi4py loaded) or from an
``mpiexec`` (:func:`mpiexec_flavour`, from the programs beside it, else its ``--version``).  An
MPI none of the three describes is ``UNKNOWN``: hpcbsp then adds no option and no variable of
its own, and says so where one would matter.

What each flavour knows (checked on MPICH 5.0 hydra, Open MPI 5.0 with PRRTE, Intel MPI 2021.18
from PyPI; ``docs/cluster.md``, "Your site's MPI"):

* **timeout**: ``MPIEXEC_TIMEOUT=SECONDS`` in mpiexec's environment ends the whole job after that
  time under all three (hydra's own variable; Open MPI's ``mpiexec`` reads it as its
  ``--timeout``; Intel's hydra reads it as ``I_MPI_JOB_TIMEOUT``), so :func:`timeout_env` is
  the same for all; the status of a job cut off differs (255 for both hydras, Open MPI's own).
* **this machine**: MPICH and Intel MPI start more ranks than cores when asked; Open MPI refuses
  unless told (``--map-by :OVERSUBSCRIBE``, :attr:`Flavour.local_args`), and refuses to run as
  root unless ``OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1`` are set, which
  hpcbsp never sets for you (:func:`root_refusal`).
* **one rank per host of a host file**: ``-f FILE -ppn 1`` (hydra) or ``--host H1,..,HN --map-by
  ppr:1:node`` (Open MPI, whose host files have another syntax); a launcher script instead of
  ssh: ``-launcher rsh -launcher-exec PATH`` (hydra) or ``--prtemca plm_ssh_agent PATH``.
* **srun**: the PMI plugin (``--mpi=pmi2`` for MPICH and Intel MPI, ``--mpi=pmix`` for Open MPI,
  whose version 5 has no PMI-2 client; Intel MPI also needs Slurm's ``libpmi2.so`` in
  ``I_MPI_PMI_LIBRARY``).  ``srun --mpi=list`` shows the plugins a Slurm has.
* **emulated nodes** (``slurm/local-cluster.sh``: network namespaces of one machine): the
  variables that keep each MPI's traffic between nodes on TCP over a node's link
  (:meth:`Flavour.cluster_tcp_env`), which the cluster's launcher and task prolog set.
* **the control step**: which allreduce of the record every sync begins with is faster, a
  persistent or a blocking one: Open MPI 5's persistent collectives take twice its blocking
  ``MPI_Allreduce`` (0.51 against 0.25 us at two ranks, called from C under
  ``MPI_THREAD_MULTIPLE``), MPICH's blocking one of the 10-word record takes 1.5x its persistent
  one, Intel MPI's two are even (:attr:`Flavour.control_collective`).
* **settings**: which variables make blocking calls yield the core, which choose TCP between
  nodes, which prefixes tune the library (shown by ``hpcbsp info``).
* **the launcher's variables**: those a rank's environment gets from mpiexec, which a child
  process must not inherit to start as a job of its own (:func:`child_env`).
* **the launcher's processes**: the programs of mpiexec and its proxies (:data:`.flavours.LAUNCHER_PROGRAMS`),
  which a signal meant for the ranks must not reach (Intel MPI's proxy dies of SIGUSR1);
* **crash lines**: how mpiexec's output says that a rank died of a signal (:func:`crash_line`);
  and which lines of a job's output are the MPI's own (Open MPI's help blocks between rules of
  dashes, hydra's ``[mpiexec@HOST]`` lines and ``BAD TERMINATION`` banner), so that what a
  program said can be told apart (:func:`program_output`, :func:`own_patterns`);
* **leftovers**: the files a job makes in ``/dev/shm`` and the temporary folder and removes only
  when it ends normally (MPICH's ``mpich_shm_*`` segments, hydra's ``hydra_hwloc_xmlfile_*``;
  :func:`leftover_names`).

Nothing here imports mpi4py except :func:`running_flavour` (whose import of ``mpi4py.MPI``
initialises MPI).
"""
from __future__ import annotations

import os
import re
import subprocess
from functools import lru_cache
from pathlib import Path
from typing import Mapping

from .flavours import (
    FLAVOUR_NAMES,
    IMPI,
    KNOWN,
    MPICH,
    OPENMPI,
    OPENMPI_ROOT_VARS,
    TIMEOUT_ENV,
    UNKNOWN,
    Flavour,
    is_launcher_variable,
)

__all__ = ["by_name", "child_env", "crash_line", "is_sigkill", "leftover_names", "library_flavour", "library_name",
           "local_args", "mpiexec_flavour", "own_patterns", "program_output", "root_refusal", "running_flavour",
           "timeout_env"]

_BY_NAME = {f.name: f for f in (*KNOWN, UNKNOWN)}


def by_name(name: str) -> Flavour:
    """The flavour called ``name`` (one of :data:`FLAVOUR_NAMES` or ``"unknown"``)."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown MPI flavour {name!r}: choose from {', '.join(FLAVOUR_NAMES)}") from None


def library_flavour(version: str) -> Flavour:
    """The flavour of an MPI library from its ``MPI_Get_library_version`` text (MPICH's derivatives
    that keep hydra and its variables, such as MVAPICH and Cray MPICH, count as MPICH)."""
    if "Intel(R) MPI" in version or "Intel MPI" in version:
        return IMPI
    if "Open MPI" in version:
        return OPENMPI
    if "MPICH" in version or "MVAPICH" in version:
        return MPICH
    return UNKNOWN


def library_name(version: str) -> str:
    """The first line of ``MPI_Get_library_version``, the library and its version (Open MPI's
    text ends in the C string's NUL, which mpi4py passes on: dropped)."""
    return (version.replace("\x00", "").strip().splitlines() or ["unknown"])[0].strip()


def running_flavour() -> Flavour:
    """The flavour of the MPI library mpi4py loads.  Importing ``mpi4py.MPI`` initialises MPI
    (mpi4py's default): call it where the process runs MPI anyway, not in a program that only
    launches jobs (those ask :func:`mpiexec_flavour`)."""
    return library_flavour(_running_version())


@lru_cache(maxsize=1)
def _running_version() -> str:
    from mpi4py import MPI

    return MPI.Get_library_version()


def mpiexec_flavour(mpiexec: str | os.PathLike | None) -> Flavour:
    """The flavour of ``mpiexec``: from the programs installed beside it (``prterun`` or
    ``ompi_info``: Open MPI; ``impi_info``: Intel MPI; ``mpichversion`` or ``hydra_pmi_proxy``:
    MPICH), else from what ``mpiexec --version`` prints; UNKNOWN when neither says."""
    if mpiexec is None:
        return UNKNOWN
    return _mpiexec_flavour(str(mpiexec))


@lru_cache(maxsize=16)
def _mpiexec_flavour(mpiexec: str) -> Flavour:
    path = Path(mpiexec)
    if os.sep not in mpiexec:
        import shutil

        found = shutil.which(mpiexec)
        path = Path(found) if found else path
    try:
        path = path.resolve()
    except OSError:
        pass
    here = path.parent
    for marker, flavour in (("prterun", OPENMPI), ("ompi_info", OPENMPI), ("impi_info", IMPI),
                            ("mpichversion", MPICH), ("hydra_pmi_proxy", MPICH)):
        if (here / marker).exists():
            return flavour
    try:
        out = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=20,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return UNKNOWN
    text = out.stdout + out.stderr
    if "Open MPI" in text or "OpenRTE" in text or "PRRTE" in text:
        return OPENMPI
    if "Intel(R) MPI" in text:
        return IMPI
    if "HYDRA" in text or "MPICH" in text:
        return MPICH
    return UNKNOWN


def child_env(env: Mapping[str, str] | None = None, *, drop: tuple[str, ...] = (), **extra: str) -> dict[str, str]:
    """``env`` (default: this process's) without the launcher's variables of any flavour, and
    without names starting with ``drop``, plus ``extra``: the environment of a child that starts
    as a singleton or as a rank of a job of its own, never as a rank of this process's job.

    Users' settings stay (``OMPI_MCA_*``, ``PRTE_MCA_*``, ``OMPI_ALLOW_RUN_AS_ROOT*``,
    ``I_MPI_*`` but the launcher's, ``MPIR_CVAR_*`` unless dropped)."""
    env = os.environ if env is None else env
    out = {k: v for k, v in env.items() if not is_launcher_variable(k) and not (drop and k.startswith(drop))}
    out.update(extra)
    return out


def timeout_env(seconds: float) -> dict[str, str]:
    """mpiexec's environment that ends the job after ``seconds`` (whole seconds, at least 1:
    0.5 must not become 0, which means no limit), for every flavour known here."""
    import math

    return {TIMEOUT_ENV: str(max(1, math.ceil(seconds)))}


def local_args(flavour: Flavour) -> list[str]:
    """mpiexec options for a job on this machine that may have more ranks than cores (MPICH and
    Intel MPI oversubscribe when asked; Open MPI must be told)."""
    return list(flavour.local_args)


def root_refusal(flavour: Flavour, env: Mapping[str, str] | None = None) -> str | None:
    """Why ``flavour``'s mpiexec will refuse to start as this user, with what to do; None when it will not."""
    env = os.environ if env is None else env
    if flavour.name != "openmpi" or os.geteuid() != 0:
        return None
    if all(env.get(var) for var in OPENMPI_ROOT_VARS):
        return None
    return ("Open MPI's mpiexec refuses to run as root: set OMPI_ALLOW_RUN_AS_ROOT=1 "
            "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 (containers, CI), or run as another user")


def crash_line(flavour: Flavour, output: str) -> str | None:
    """What ``flavour``'s mpiexec said about a rank killed by a signal in ``output``, else None.

    Where it reports several ranks (Intel MPI's hydra: one banner per rank), the first signal
    other than SIGKILL, which the launcher sends to the rest of the job, is the crash."""
    patterns = [flavour.crash_pattern] if flavour.crash_pattern else [f.crash_pattern for f in KNOWN if f.crash_pattern]
    found = [" ".join(m.group(1).split()) for pattern in patterns for m in re.finditer(pattern, output)]
    if not found:
        return None
    return next((words for words in found if not is_sigkill(words)), found[0])


def is_sigkill(words: str) -> bool:
    """Whether :func:`crash_line`'s ``words`` name signal 9, SIGKILL (``Killed (signal 9)``,
    ``9 (Killed)``, ``signal 9 (Killed)``): a kill from outside, not a crash of the program."""
    return re.search(r"\b9\b", words) is not None


def own_patterns(flavour: Flavour) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """``(lines, rules)``: what matches (``.match``) a line the MPI itself writes, and a rule line
    that opens or closes one of its blocks (:attr:`Flavour.own_lines`, :attr:`Flavour.own_blocks`;
    an MPI hpcbsp does not know: those of every flavour known).  A line is given without its
    newline."""
    flavours = (flavour,) if flavour.known else KNOWN
    lines = re.compile("|".join(f"(?:{p})" for f in flavours for p in f.own_lines) or r"(?!)")
    rules = re.compile("|".join(f"(?:{p})$" for f in flavours for p in f.own_blocks) or r"(?!)")
    return lines, rules


def leftover_names(flavour: Flavour) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(in /dev/shm, in the temporary folder)``: the name prefixes of the files a job of
    ``flavour`` makes there and removes when it ends normally, so that a job that was stopped
    may leave them (:attr:`Flavour.shm_prefixes`, :attr:`Flavour.temp_prefixes`; an MPI hpcbsp
    does not know: those of every flavour known)."""
    flavours = (flavour,) if flavour.known else KNOWN
    return (tuple(p for f in flavours for p in f.shm_prefixes), tuple(p for f in flavours for p in f.temp_prefixes))


def program_output(flavour: Flavour, text: str) -> str:
    """``text``, what an mpiexec job wrote, without what the MPI library and its launcher wrote
    themselves (``flavour``'s own lines and blocks; an MPI hpcbsp does not know: those of every
    flavour known), so that what the program said can be read or shown alone.  Open MPI's
    mpiexec adds a help block to any job that ends badly (a non-zero exit, ``MPI_Abort``), and a
    NUL byte; hydra adds nothing to a rank's non-zero exit."""
    lines, rules = own_patterns(flavour)
    kept: list[str] = []
    block: list[str] | None = None  # the lines of an open block: kept after all if it never closes
    for line in text.replace("\x00", "").splitlines(keepends=True):
        bare = line.rstrip("\r\n")
        if rules.match(bare):
            block = [line] if block is None else None
        elif block is not None:
            block.append(line)
        elif not lines.match(bare):
            kept.append(line)
    return "".join(kept + (block or []))
