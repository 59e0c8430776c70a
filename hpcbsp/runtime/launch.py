"""How this job was launched, and the checks that catch a wrong launch early.

Nothing here initialises MPI except :func:`check_world`, which is handed a communicator.
"""
from __future__ import annotations

import os
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from ..util.flavours import IMPI, MPICH, OPENMPI, Flavour
from ..util.launcher import expected_world_size, int_env, launcher_name
from ..util.mpiflavour import running_flavour
from .errors import BadInput


@dataclass(frozen=True)
class LaunchInfo:
    """What the environment says about how this process was started."""

    launcher: str  # "srun", "mpiexec" or "singleton"
    slurm_job_id: str | None
    slurm_ntasks: int | None
    slurm_nodelist: str | None

    def as_dict(self) -> dict[str, object]:
        return {
            "launcher": self.launcher,
            "slurm_job_id": self.slurm_job_id,
            "slurm_ntasks": self.slurm_ntasks,
            "slurm_nodelist": self.slurm_nodelist,
        }


def detect_launch(env: dict[str, str] | None = None) -> LaunchInfo:
    """Read the launcher from the environment (no MPI call)."""
    env = dict(os.environ) if env is None else env
    return LaunchInfo(
        launcher=launcher_name(env),
        slurm_job_id=env.get("SLURM_JOB_ID"),
        slurm_ntasks=int_env("SLURM_STEP_NUM_TASKS", env) or int_env("SLURM_NTASKS", env),
        slurm_nodelist=env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST"),
    )


def check_world(world_size: int, env: dict[str, str] | None = None) -> None:
    """Raise :class:`BadInput` when the launcher started more ranks than MPI can see.

    The classic case is ``srun`` without ``--mpi=pmi2`` for an MPICH build (``--mpi=pmix`` for Open
    MPI): every task comes up as rank 0 of a world of size 1 and would silently run the whole
    program alone.  The message names the plugin of the MPI in use.
    """
    env = dict(os.environ) if env is None else env
    expected = expected_world_size(env)
    if world_size != 1 or expected is None or expected <= 1:
        return
    flavour = running_flavour()
    if "SLURM_STEP_ID" in env:
        raise BadInput(
            f"srun started {expected} tasks but MPI sees a world of size 1 on each: the MPI library "
            f"could not reach Slurm's process manager. Launch with {srun_advice(flavour)} "
            "(`srun --mpi=list` shows what this Slurm offers), or run `mpiexec -n "
            f"{expected} ...` inside the allocation."
        )
    raise BadInput(
        f"the launcher started {expected} processes but MPI sees a world of size 1: mpiexec and "
        f"the MPI library that mpi4py uses ({flavour.title}) do not belong together. Use the mpiexec "
        f"of the same MPI (for this environment's: {find_mpiexec() or 'the mpiexec in your venv'})."
    )


def srun_advice(flavour: Flavour) -> str:
    """How ``srun`` must start the ranks of ``flavour``'s MPI, for a message."""
    if flavour is IMPI:
        return ("`srun --mpi=pmi2 ...` with I_MPI_PMI_LIBRARY set to Slurm's libpmi2.so (Intel MPI)")
    if flavour.srun_mpi:
        return f"`srun --mpi={flavour.srun_mpi} ...` ({flavour.title})"
    return "`srun --mpi=PLUGIN ...`, the PMI plugin your MPI library needs (pmi2 for MPICH, pmix for Open MPI)"


def find_mpiexec() -> str | None:
    """The mpiexec that belongs to this Python environment, else the first on PATH."""
    candidates = [Path(sys.executable).with_name("mpiexec"), Path(sys.prefix) / "bin" / "mpiexec"]
    for cand in candidates:
        if cand.exists():
            return str(cand)
    return shutil.which("mpiexec") or shutil.which("mpirun")


def rerun_command(nprocs: int, argv: list[str] | None = None) -> str:
    """The command line that runs this program again on ``nprocs`` ranks, ready to paste.

    ``mpiexec -n NPROCS PYTHON -m MODULE ARGS`` for a program started with ``python -m``, else
    ``... PYTHON SCRIPT ARGS``; ``argv`` are the arguments (default ``sys.argv[1:]``).  The
    mpiexec and Python are those of this environment (:func:`find_mpiexec`, ``sys.executable``).
    """
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name:
        target = ["-m", spec.name.removesuffix(".__main__")]
    else:
        target = [sys.argv[0]] if sys.argv and sys.argv[0] else []
    args = list(sys.argv[1:] if argv is None else argv)
    return shlex.join([find_mpiexec() or "mpiexec", "-n", str(nprocs), sys.executable, *target, *args])
def _flavour(flavour: Flavour | None) -> Flavour:
    return running_flavour() if flavour is None else flavour


def transport_settings(env: dict[str, str] | None = None, flavour: Flavour | None = None) -> dict[str, str]:
    """The variables set for this process that choose the transport of ``flavour`` (default: the
    MPI mpi4py loaded; an MPI hpcbsp does not know: those of every flavour known), empty when
    the MPI library chooses."""
    env = dict(os.environ) if env is None else env
    flavour = _flavour(flavour)
    names = flavour.transport_vars if flavour.known else tuple(
        dict.fromkeys(v for f in (MPICH, OPENMPI, IMPI) for v in f.transport_vars))
    return {var: env[var] for var in names if env.get(var)}


def forces_tcp(settings: dict[str, str], flavour: Flavour | None = None) -> bool:
    """Whether ``settings`` confine the MPI's traffic between nodes to TCP sockets: for MPICH,
    UCX's ``tcp`` transport only, or libfabric's ``tcp`` provider through the OFI netmod; for
    Open MPI, the ``ob1`` PML with the ``tcp`` BTL (or UCX's ``tcp`` only); for Intel MPI,
    libfabric's ``tcp`` provider."""
    flavour = _flavour(flavour)
    ucx_tcp = settings.get("UCX_TLS", "").replace(" ", "") in {"tcp", "tcp,self"}
    if flavour is OPENMPI:
        btl = settings.get("OMPI_MCA_btl", "").replace(" ", "").split(",")
        return ucx_tcp or (settings.get("OMPI_MCA_pml", "") == "ob1" and "tcp" in btl)
    provider = settings.get("FI_PROVIDER", "").startswith("tcp")
    if flavour is IMPI:
        return provider or settings.get("I_MPI_OFI_PROVIDER", "").startswith("tcp")
    ofi_tcp = provider and settings.get("MPIR_CVAR_CH4_NETMOD", "").lower() == "ofi"
    return ucx_tcp or ofi_tcp


def machine_id() -> str:
    """This kernel's boot id: equal on every emulated host of one machine (network namespaces,
    containers), different between real machines."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def transport_advice(hosts: list[str], machines: list[str], settings: dict[str, str],
                     flavour: Flavour | None = None) -> str | None:
    """Advice when ranks on several hosts of one machine (emulated nodes) may still talk
    through shared memory: the MPI (MPICH's UCX, say) sees one machine and uses its shared-memory
    transports between them, so no byte crosses the emulated network. None when nothing is to be
    said."""
    flavour = _flavour(flavour)
    several_hosts = len(set(hosts)) > 1
    one_machine = len(set(machines)) == 1 and machines and machines[0]
    if not (several_hosts and one_machine and not forces_tcp(settings, flavour)):
        return None
    name = flavour.title if flavour.known else "the MPI library"
    tcp = " ".join(f"{k}={v}" for k, v in flavour.tcp_env.items())
    advice = (f"the ranks run on several hosts of one machine (emulated nodes) and no TCP "
              f"transport is set, so {name} may move their messages through shared memory: ")
    if flavour is MPICH:
        return advice + (f"set {tcp} (or UCX_TLS=tcp) for traffic over the links; "
                         "slurm/local-cluster.sh's launcher and task prolog set the first")
    if tcp:
        return advice + f"set {tcp} for traffic over the links"
    return advice + "set its TCP transport for traffic over the links (see its documentation)"
