"""Run a command under mpiexec in a subprocess, with a timeout so a deadlock fails, never hangs."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass

from hpcbsp.runtime.launch import find_mpiexec

MPIEXEC = find_mpiexec()

#: Variables of an enclosing mpiexec (or Slurm step) that a child must not inherit: a child that
#: imports mpi4py must start as a singleton or as a rank of its own job, not of the test's.
_MPI_PREFIXES = ("PMI_", "PMIX_", "HYDRA_", "MPIR_", "OMPI_")
_SLURM_PREFIXES = ("SLURM_", "SBATCH_", "SRUN_", "SALLOC_")
#: Transport choices (UCX, libfabric) that a test of the emulated nodes sets itself.
_TRANSPORT_PREFIXES = ("UCX_", "FI_")


def clean_env(*, slurm: bool = False, transport: bool = False, **extra: str) -> dict[str, str]:
    """This process's environment without the launcher's rank variables (with ``slurm``, without
    those of an enclosing Slurm job; with ``transport``, without UCX and libfabric settings),
    plus ``extra``."""
    prefixes = _MPI_PREFIXES + (_SLURM_PREFIXES if slurm else ()) + (_TRANSPORT_PREFIXES if transport else ())
    env = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
    env.update(extra)
    return env


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
    def crash(self) -> str | None:
        """Hydra's exit string when a rank died of a signal (a segfault, say), else None.

        A rank that fails cleanly exits with a status; one that crashes can take the job down
        before the failed rank's report is forwarded, so tests of clean failures check this."""
        m = re.search(r"EXIT STRING: (.*\(signal \d+\))", self.output)
        return m.group(1) if m else None


def run_mpi(nprocs: int, args: list[str], *, timeout: float = 120, env: dict[str, str] | None = None,
            python: bool = True, cwd: str | None = None) -> MPIResult:
    """Run ``mpiexec -n nprocs [python] args`` and return its status and output.

    ``timeout`` is enforced twice: by MPICH's MPIEXEC_TIMEOUT (kills all ranks) and by the
    subprocess call (kills mpiexec) a few seconds later.
    """
    assert MPIEXEC is not None, "no mpiexec found next to the Python interpreter or on PATH"
    # Do not inherit the rank variables of an enclosing mpiexec (tests may run under one).
    full_env = clean_env(MPIEXEC_TIMEOUT=str(int(timeout)), PYTHONUNBUFFERED="1", **(env or {}))
    cmd = [MPIEXEC, "-n", str(nprocs)] + ([sys.executable] if python else []) + list(args)
    before = _shm_segments()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 15,
                              env=full_env, cwd=cwd, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        return MPIResult(-9, _text(exc.stdout), _text(exc.stderr), True)
    finally:
        _remove_leftover_segments(before)
    return MPIResult(proc.returncode, proc.stdout, proc.stderr, False)


def _shm_segments() -> set[str]:
    try:
        return {name for name in os.listdir("/dev/shm") if name.startswith("mpich_shm_")}
    except OSError:
        return set()


def _remove_leftover_segments(before: set[str]) -> None:
    """MPICH's shared-memory files survive a job whose ranks were killed (tests do that on
    purpose); remove the ones this job created so repeated test runs do not fill /dev/shm."""
    for name in _shm_segments() - before:
        try:
            os.remove(os.path.join("/dev/shm", name))
        except OSError:
            pass


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode(errors="replace")
