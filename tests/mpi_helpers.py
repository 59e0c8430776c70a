"""Run a command under mpiexec in a subprocess, with a timeout so a deadlock fails, never hangs.

The command line, the child's environment, the timeout and the crash report are spelled for the
MPI of the mpiexec found (:mod:`hpcbsp.util.mpiflavour`): ``FLAVOUR``; ``mpich_only(reason)``,
``hydra_only(reason)`` and ``openmpi_only(reason)`` skip a test that checks something only that
MPI's launcher does, naming the flavour in use.
"""
from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from types import ModuleType

import pytest

from hpcbsp.runtime.launch import find_mpiexec
from hpcbsp.util.flavours import IMPI, MPICH, OPENMPI
from hpcbsp.util.mpiflavour import (
    child_env,
    crash_line,
    local_args,
    mpiexec_flavour,
    program_output,
    timeout_env,
)
from hpcbsp.util.procstat import descendants
from hpcbsp.util.proctree import signal_ranks

MPIEXEC = find_mpiexec()
#: The MPI of that mpiexec (MPICH, Open MPI, Intel MPI or unknown).
FLAVOUR = mpiexec_flavour(MPIEXEC)

#: Variables of an enclosing mpiexec (or Slurm step) that a child must not inherit (a child that
#: imports mpi4py must start as a singleton or as a rank of its own job, not of the test's): the
#: launchers' own (hpcbsp.util.mpiflavour.child_env) and, as always here, MPICH's settings.
_MPI_PREFIXES = ("MPIR_",)
_SLURM_PREFIXES = ("SLURM_", "SBATCH_", "SRUN_", "SALLOC_")
#: Transport choices (UCX, libfabric) that a test of the emulated nodes sets itself.
_TRANSPORT_PREFIXES = ("UCX_", "FI_")


def clean_env(*, slurm: bool = False, transport: bool = False, **extra: str) -> dict[str, str]:
    """This process's environment without the launcher's rank variables (with ``slurm``, without
    those of an enclosing Slurm job; with ``transport``, without UCX and libfabric settings),
    plus ``extra``."""
    prefixes = _MPI_PREFIXES + (_SLURM_PREFIXES if slurm else ()) + (_TRANSPORT_PREFIXES if transport else ())
    return child_env(os.environ, drop=prefixes, **extra)


def mpich_only(reason: str) -> pytest.MarkDecorator:
    """Skip unless the mpiexec is MPICH's: ``reason`` says what only MPICH does."""
    return pytest.mark.skipif(FLAVOUR is not MPICH, reason=f"MPICH only ({reason}); this mpiexec is {FLAVOUR.title}'s")


def hydra_only(reason: str) -> pytest.MarkDecorator:
    """Skip unless the mpiexec is a hydra (MPICH's or Intel MPI's): ``reason`` says what only hydra does."""
    return pytest.mark.skipif(FLAVOUR not in (MPICH, IMPI),
                              reason=f"hydra only ({reason}); this mpiexec is {FLAVOUR.title}'s")


def openmpi_only(reason: str) -> pytest.MarkDecorator:
    """Skip unless the mpiexec is Open MPI's: ``reason`` says what only it does."""
    return pytest.mark.skipif(FLAVOUR is not OPENMPI, reason=f"Open MPI only ({reason}); this mpiexec is {FLAVOUR.title}'s")


def mpiexec_command(nprocs: int) -> list[str]:
    """``mpiexec [options of this MPI for a job on this machine] -n nprocs``."""
    assert MPIEXEC is not None, "no mpiexec found next to the Python interpreter or on PATH"
    return [MPIEXEC, *local_args(FLAVOUR), "-n", str(nprocs)]


@dataclass
class MPIResult:
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    @property
    def program_stderr(self) -> str:
        """stderr without what the MPI and its launcher wrote themselves (Open MPI's mpiexec adds a
        help block to every job that ends badly, hydra does not): what the program said."""
        return program_output(FLAVOUR, self.stderr)

    @property
    def crash(self) -> str | None:
        """mpiexec's report that a rank died of a signal (a segfault, say), else None.

        A rank that fails cleanly exits with a status; one that crashes can take the job down
        before the failed rank's report is forwarded, so tests of clean failures check this."""
        return crash_line(FLAVOUR, self.output)


def run_mpi(nprocs: int, args: list[str], *, timeout: float = 120, env: dict[str, str] | None = None,
            python: bool = True, cwd: str | None = None) -> MPIResult:
    """Run ``mpiexec -n nprocs [python] args`` and return its status and output.

    After ``timeout`` seconds the job is a hang: its ranks are sent SIGUSR1 (an hpcbsp rank prints
    its stacks, each line prefixed by its rank; the launcher's processes are spared it: Intel
    MPI's proxy dies of it), and 3 s later the whole job
    is killed; the result says ``timed_out`` and its stderr, stacks included, is also written to
    this process's stderr, which pytest shows with the failure.  MPIEXEC_TIMEOUT (read by MPICH,
    Open MPI and Intel MPI) is set 10 s later as a second bound.
    """
    # Do not inherit the rank variables of an enclosing mpiexec (tests may run under one).
    full_env = clean_env(**timeout_env(int(timeout) + 10), PYTHONUNBUFFERED="1", **(env or {}))
    cmd = mpiexec_command(nprocs) + ([sys.executable] if python else []) + list(args)
    before = shm_segments()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env,
                            cwd=cwd, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        return MPIResult(proc.returncode, out, err, False)
    except subprocess.TimeoutExpired:
        signal_ranks(descendants(proc.pid), signal.SIGUSR1)  # not the launcher's processes
        try:
            out, err = proc.communicate(timeout=3)
        except subprocess.TimeoutExpired:
            for pid in [proc.pid, *descendants(proc.pid)]:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            out, err = proc.communicate()
        sys.stderr.write(f"run_mpi: {' '.join(cmd)} still ran after {timeout:g} s; its output, with "
                         f"the ranks' stacks (SIGUSR1):\n{out}{err}\n")
        return MPIResult(-9, out, err, True)
    finally:
        remove_leftover_segments(before)


def program_module(name: str) -> ModuleType:
    """The module of ``tests/programs/NAME.py``, imported here (for its oracle: the program
    itself runs under mpiexec)."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(os.path.dirname(__file__), "programs",
                                                                     f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def shm_segments() -> set[str]:
    """The names of this MPI's shared-memory files in /dev/shm now."""
    if not FLAVOUR.shm_prefixes:
        return set()
    try:
        return {name for name in os.listdir("/dev/shm") if name.startswith(FLAVOUR.shm_prefixes)}
    except OSError:
        return set()


def mapped_segments() -> set[str]:
    """The names of the files in /dev/shm that a live process maps (a running job's segments)."""
    mapped: set[str] = set()
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/maps") as fh:
                    mapped |= {ln[ln.index("/dev/shm/") + 9:].rstrip("\n") for ln in fh if "/dev/shm/" in ln}
            except OSError:
                continue  # (gone meanwhile, or not ours to read)
    return mapped


def remove_leftover_segments(before: set[str]) -> None:
    """The MPI's shared-memory files (MPICH's ``mpich_shm_*``, Open MPI's ``sm_segment.*``)
    survive a job whose ranks were killed (tests do that on purpose); remove the ones that came
    while this job ran and that no live process maps, so repeated test runs do not fill /dev/shm.
    A segment that a process maps belongs to a job still running (another test's, beside this one
    under ``pytest -n``, or anyone's): it is left alone."""
    new = shm_segments() - before
    for name in new - mapped_segments() if new else ():
        try:
            os.remove(os.path.join("/dev/shm", name))
        except OSError:
            pass


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode(errors="replace")
