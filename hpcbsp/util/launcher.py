"""What the process manager's environment says before MPI starts: this process's rank, the
number of ranks, and which launcher started it.  The one list of those variables in hpcbsp
(:mod:`hpcbsp.runtime.launch` and the command lines read them through this module).
"""
from __future__ import annotations

import os
from typing import Mapping

#: The variables that carry a process's rank, in the order they are trusted.
RANK_VARS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID")
#: The variables that carry the number of ranks of an mpiexec job.
SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE")
#: Set by process managers for every rank, with the launcher they imply (srun first: under srun
#: with PMI, PMI_RANK is set too).
LAUNCHER_VARS = (
    ("SLURM_STEP_ID", "srun"),
    ("PMI_RANK", "mpiexec"),
    ("PMIX_RANK", "mpiexec"),
    ("OMPI_COMM_WORLD_RANK", "mpiexec"),
    ("HYDRA_CONTROL_FD", "mpiexec"),
)


def int_env(name: str, env: Mapping[str, str]) -> int | None:
    """The integer at the start of ``env[name]`` (Slurm writes counts as ``4(x2)``), or None."""
    try:
        return int(env[name].split("(")[0])
    except (KeyError, ValueError):
        return None


def launcher_name(env: Mapping[str, str] | None = None) -> str:
    """``"srun"``, ``"mpiexec"`` or ``"singleton"`` (started without a process manager)."""
    env = os.environ if env is None else env
    return next((name for var, name in LAUNCHER_VARS if var in env), "singleton")


def expected_world_size(env: Mapping[str, str] | None = None) -> int | None:
    """The number of ranks the process manager says it started, if it says so."""
    env = os.environ if env is None else env
    if "SLURM_STEP_ID" in env:
        return int_env("SLURM_STEP_NUM_TASKS", env) or int_env("SLURM_NTASKS", env)
    for var in SIZE_VARS:
        n = int_env(var, env)
        if n is not None:
            return n
    return None


def launcher_rank() -> int:
    """This process's rank as the launcher's environment says (0 without a launcher)."""
    for var in RANK_VARS:
        if var in os.environ:
            return int_env(var, os.environ) or 0
    return 0


def launcher_size() -> int:
    """The number of processes the launcher started (1 without a launcher)."""
    return expected_world_size() or 1
