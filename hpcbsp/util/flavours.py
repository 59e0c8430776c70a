"""The MPI flavours hpcbsp knows, one record each: MPICH, Open MPI, Intel MPI, and UNKNOWN.

A :class:`Flavour` holds what differs between MPI implementations around a job: the launcher's
options and exit status, the variables that tune the library or choose its transport, its files
in ``/dev/shm`` and the temporary folder, its launcher's programs and the lines it writes itself.
:mod:`.mpiflavour` finds the flavour of a library or an ``mpiexec`` and acts on these records;
its docstring says what each fact is for and where it was checked.

MPICH and Intel MPI share what comes of MPICH's lineage (:func:`_hydra`: hydra's mpiexec, MPICH's
library, srun's PMI-2 plugin); every other field is a flavour's own.  UNKNOWN, an MPI none of the
three describes, has no option, variable or pattern of its own.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

__all__ = ["CLUSTER_IFACE", "FLAVOUR_NAMES", "IMPI", "KNOWN", "LAUNCHER_PROGRAMS", "MPICH", "OPENMPI",
           "OPENMPI_ROOT_VARS", "TIMEOUT_ENV", "UNKNOWN", "Flavour", "is_launcher_variable"]

#: The flavours hpcbsp knows, by key (the Makefile's ``MPI=`` and the pyproject extras).
FLAVOUR_NAMES: tuple[str, ...] = ("mpich", "openmpi", "impi")
#: Variable that ends an mpiexec job after so many seconds, for every flavour known here.
TIMEOUT_ENV = "MPIEXEC_TIMEOUT"
#: The network interface of an emulated node of ``slurm/local-cluster.sh`` (its only link).
CLUSTER_IFACE = "eth0"
#: What Open MPI needs to run as root (it refuses otherwise); hpcbsp never sets them itself.
OPENMPI_ROOT_VARS: tuple[str, ...] = ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM")

#: Variables a launcher of any flavour sets for its ranks (they say "you are rank r of job J"),
#: by prefix, with the prefixes of users' own settings under them that a child keeps.
_LAUNCHER_PREFIXES: tuple[str, ...] = ("PMI_", "PMIX_", "HYDRA_", "HYDI_", "PRTE_", "OMPI_",
                                       "I_MPI_INFO_", "I_MPI_HYDRA_UUID", "I_MPI_PIN_INFO",
                                       "I_MPI_PIN_MAPPING")
_USER_PREFIXES: tuple[str, ...] = ("PRTE_MCA_", "OMPI_MCA_", "OMPI_ALLOW_RUN_AS_ROOT")
#: Exact names a launcher sets: MPICH's and Intel's hydra (the rank's place on its node).  (Open
#: MPI's mpiexec also passes a few MCA parameters of its own to its ranks; a new mpiexec sets
#: them anew, so they stay with the users' ``OMPI_MCA_*``.)
_LAUNCHER_NAMES: frozenset[str] = frozenset({"MPI_LOCALNRANKS", "MPI_LOCALRANKID"})


def is_launcher_variable(name: str) -> bool:
    """Whether ``name`` is a variable a launcher (hydra, PRRTE, Slurm's PMI) sets for its ranks."""
    if name in _LAUNCHER_NAMES:
        return True
    return name.startswith(_LAUNCHER_PREFIXES) and not name.startswith(_USER_PREFIXES)


@dataclass(frozen=True)
class Flavour:
    """One MPI implementation's launch options and settings (see the module's docstring)."""

    name: str                     # "mpich", "openmpi", "impi" or "unknown"
    title: str                    # for people: "MPICH", "Open MPI", "Intel MPI"
    launcher: str                 # the process manager behind its mpiexec
    srun_mpi: str | None          # srun's --mpi= plugin for it
    local_args: tuple[str, ...] = ()                 # mpiexec options for a job on this machine
    timeout_status: tuple[int, ...] = ()             # mpiexec's exit status when MPIEXEC_TIMEOUT cut a job off
    yield_env: Mapping[str, str] = field(default_factory=dict)   # blocking MPI calls give the core away
    tcp_env: Mapping[str, str] = field(default_factory=dict)     # traffic between nodes over TCP sockets
    iface_vars: tuple[str, ...] = ()                 # variables that name the network interface for that TCP
    transport_vars: tuple[str, ...] = ()             # variables that choose the transport
    setting_prefixes: tuple[str, ...] = ()           # prefixes of the variables that tune it
    shm_prefixes: tuple[str, ...] = ()               # its files in /dev/shm (left behind by killed ranks)
    temp_prefixes: tuple[str, ...] = ()              # its launcher's files in the temporary folder (/tmp)
    launcher_programs: tuple[str, ...] = ()          # the programs of its launcher's own processes
    crash_pattern: str | None = None                 # mpiexec's report of a rank killed by a signal
    own_lines: tuple[str, ...] = ()                  # patterns of the lines the MPI itself writes
    own_blocks: tuple[str, ...] = ()                 # patterns of the rules around its multi-line messages
    variables: tuple[tuple[str, str], ...] = ()      # the variables that matter to hpcbsp, with what each does
    #: The control step's collective (``$HPCBSP_CONTROL_COLLECTIVE=auto``): ``persistent``
    #: (``MPI_Allreduce_init`` once, ``MPI_Start`` + ``MPI_Wait`` per step) or ``blocking`` (one
    #: ``MPI_Allreduce``), whichever this library runs faster (docs/notes/performance-journal.md, "Per MPI").
    control_collective: str = "persistent"

    @property
    def known(self) -> bool:
        return self.name != "unknown"

    def hostfile_args(self, hosts: list[str], hostfile: str, rsh: str | None = None,
                      subset: bool = False, written: str | None = None) -> list[str]:
        """mpiexec options (before ``-n``) that put one rank on each of ``hosts``, the hosts of
        ``hostfile`` to use (``subset``: only those, not the file's first ones); ``rsh``: a
        launcher script to reach them instead of ssh.  ``written``: a file that lists exactly
        ``hosts`` in this MPI's syntax (:meth:`hostfile_text`), passed instead of any list of
        names (``-f FILE``, Open MPI's ``--hostfile FILE``): one argument however many hosts."""
        if self.name == "openmpi":
            args = ["--hostfile", written] if written else ["--host", ",".join(hosts)]
            args += ["--map-by", "ppr:1:node"]
            return args + (["--prtemca", "plm_ssh_agent", rsh] if rsh else [])
        args = ["-f", written] if written else ["-hosts", ",".join(hosts)] if subset else ["-f", hostfile]
        return args + ["-ppn", "1"] + (["-launcher", "rsh", "-launcher-exec", rsh] if rsh else [])

    def hostfile_text(self, hosts: Sequence[str]) -> str:
        """A host file of ``hosts``, one slot each, in this MPI's syntax (Open MPI: ``HOST
        slots=1``; the hydras: ``HOST:1``)."""
        line = "{} slots=1\n" if self.name == "openmpi" else "{}:1\n"
        return "".join(line.format(h) for h in hosts)

    def cluster_tcp_env(self, iface: str = CLUSTER_IFACE) -> dict[str, str]:
        """The variables that put this MPI's traffic between nodes on TCP sockets over the network
        interface ``iface`` only, launcher included (Open MPI's PRRTE daemons call back over it):
        what the emulated cluster's launcher and task prolog set (``slurm/local-cluster.sh``), where
        every node is a network namespace of one machine whose only link is ``eth0`` and any
        shared-memory transport would bypass the links."""
        return {**self.tcp_env, **{name: iface for name in self.iface_vars}}

    def settings(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        """The variables of ``env`` (default: this process's) that tune this MPI or its transport."""
        env = os.environ if env is None else env
        names = set(self.transport_vars) | {TIMEOUT_ENV} | {name for name, _ in self.variables}
        return {k: env[k] for k in sorted(env)
                if (k in names or k.startswith(self.setting_prefixes)) and not is_launcher_variable(k)}


#: Hydra's mpiexec and the proxy it starts on each node (with its bootstrap proxy, across nodes).
_HYDRA_PROGRAMS = ("mpiexec", "mpiexec.hydra", "mpirun", "hydra_pmi_proxy", "hydra_bstrap_proxy")
#: Hydra's own lines, and the banner it prints around a rank that ended badly.
_HYDRA_LINES = (r"\[mpiexec@[^\]]*\] ", r"\[proxy:[^\]]*\] ", r"YOUR APPLICATION TERMINATED WITH THE EXIT STRING: ",
                r"This typically refers to a problem with your application\.$",
                r"Please see the FAQ page for debugging suggestions$")
_HYDRA_BLOCKS = (r"={40,}",)
#: What MPICH's library says itself when a rank calls MPI_Abort.
_MPICH_ABORT = r"Abort\(\d+\) on node \d+ \(rank \d+ in comm \d+\): "


def _hydra(**fields: Any) -> Flavour:
    """A flavour of MPICH's lineage: hydra's mpiexec (its programs, exit status 255 for a job cut
    off, its own lines and banner), MPICH's library (its abort line; Intel MPI's library is
    MPICH's), srun's PMI-2 plugin and libfabric's variable for the TCP interface."""
    return Flavour(srun_mpi="pmi2", timeout_status=(255,), iface_vars=("FI_TCP_IFACE",),
                   launcher_programs=_HYDRA_PROGRAMS, own_lines=_HYDRA_LINES + (_MPICH_ABORT,),
                   own_blocks=_HYDRA_BLOCKS, **fields)


MPICH = _hydra(
    name="mpich", title="MPICH", launcher="hydra (MPICH's mpiexec)",
    yield_env={"MPIR_CVAR_ENABLE_HEAVY_YIELD": "1"},
    tcp_env={"MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp"},
    transport_vars=("MPIR_CVAR_CH4_NETMOD", "UCX_TLS", "UCX_NET_DEVICES", "FI_PROVIDER", "FI_TCP_IFACE"),
    setting_prefixes=("MPIR_CVAR_", "MPICH_", "HYDRA_", "UCX_", "FI_"),
    shm_prefixes=("mpich_shm_",),
    # hydra's proxy exports the node's topology for the ranks (hwloc) and removes it at a normal end
    temp_prefixes=("hydra_hwloc_xmlfile_",),
    crash_pattern=r"EXIT STRING: (.*\(signal \d+\))",
    variables=(
        (TIMEOUT_ENV, "seconds after which mpiexec ends the job"),
        ("MPIR_CVAR_CH4_NETMOD", "the netmod between nodes: ofi or ucx"),
        ("FI_PROVIDER", "libfabric's provider for the ofi netmod (tcp: sockets)"),
        ("UCX_TLS", "UCX's transports for the ucx netmod (tcp: sockets)"),
        ("MPIR_CVAR_ENABLE_HEAVY_YIELD", "1: blocking calls give the core away (more ranks than cores)"),
    ),
)
OPENMPI = Flavour(
    name="openmpi", title="Open MPI", launcher="PRRTE (Open MPI's mpiexec, prterun)", srun_mpi="pmix",
    local_args=("--map-by", ":OVERSUBSCRIBE"),
    timeout_status=(241, 255),
    yield_env={"OMPI_MCA_mpi_yield_when_idle": "1"},
    control_collective="blocking",
    tcp_env={"OMPI_MCA_pml": "ob1", "OMPI_MCA_btl": "self,sm,tcp"},
    # (the ranks' TCP BTL, and the out-of-band channel between mpiexec and its daemons)
    iface_vars=("OMPI_MCA_btl_tcp_if_include", "PRTE_MCA_oob_tcp_if_include"),
    transport_vars=("OMPI_MCA_pml", "OMPI_MCA_btl", "OMPI_MCA_osc", "OMPI_MCA_btl_tcp_if_include",
                    "OMPI_MCA_btl_tcp_if_exclude", "UCX_TLS", "UCX_NET_DEVICES"),
    setting_prefixes=("OMPI_MCA_", "PRTE_MCA_", "PMIX_MCA_", "OMPI_ALLOW_RUN_AS_ROOT", "UCX_"),
    shm_prefixes=("sm_segment.",),
    launcher_programs=("mpiexec", "mpirun", "prterun", "prte", "prted"),
    crash_pattern=r"noticed that process rank \d+ with PID \d+ on node \S+ exited on\s+(signal \d+(?: \([^)]*\))?)",
    # Its messages (MPI_ABORT, a non-zero exit, a crash) are help blocks between rules of dashes;
    # PMIx and components write single lines tagged [HOST:PID].
    own_lines=(r"\[[\w.-]+:\d+\] (?:PMIX ERROR: |/\S+\.c:\d+ )",),
    own_blocks=(r"-{40,}",),
    variables=(
        (TIMEOUT_ENV, "seconds after which mpiexec ends the job (its --timeout)"),
        ("OMPI_MCA_pml", "the point-to-point layer: ob1 (over the BTLs) or ucx"),
        ("OMPI_MCA_btl", "ob1's transports, e.g. self,sm,tcp"),
        ("OMPI_MCA_btl_tcp_if_include", "the network interfaces for TCP, e.g. eth0"),
        ("OMPI_MCA_mpi_yield_when_idle", "1: blocking calls give the core away (on by itself when oversubscribed)"),
        ("PRTE_MCA_rmaps_default_mapping_policy", ":oversubscribe lets mpiexec start more ranks than cores"),
        ("OMPI_ALLOW_RUN_AS_ROOT", "1, with OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1: mpiexec runs as root"),
    ),
)
IMPI = _hydra(
    name="impi", title="Intel MPI", launcher="hydra (Intel MPI's mpiexec.hydra)",
    # Intel MPI 2021 has no heavy yield of its own; its back-off in busy-wait loops, 2: sched_yield.
    yield_env={"I_MPI_THREAD_YIELD": "2"},
    tcp_env={"I_MPI_FABRICS": "shm:ofi", "FI_PROVIDER": "tcp"},
    transport_vars=("I_MPI_FABRICS", "I_MPI_OFI_PROVIDER", "FI_PROVIDER", "FI_TCP_IFACE"),
    setting_prefixes=("I_MPI_", "FI_"),
    crash_pattern=r"KILLED BY SIGNAL: (\d+ \([^)]*\))",
    variables=(
        (TIMEOUT_ENV, "seconds after which mpiexec ends the job (I_MPI_JOB_TIMEOUT)"),
        ("I_MPI_FABRICS", "shm:ofi (default) or ofi (libfabric within a node too)"),
        ("I_MPI_OFI_PROVIDER", "libfabric's provider between nodes (tcp: sockets; verbs, psm3, ...)"),
        ("FI_PROVIDER", "the same, libfabric's own name for it"),
        ("I_MPI_PMI_LIBRARY", "Slurm's libpmi2.so, for ranks started by srun --mpi=pmi2"),
        ("I_MPI_THREAD_YIELD", "back-off in busy waits (2: sched_yield)"),
    ),
)
UNKNOWN = Flavour(name="unknown", title="an MPI hpcbsp does not know", launcher="unknown", srun_mpi=None)
#: The flavours hpcbsp knows, in the order of :data:`FLAVOUR_NAMES`.
KNOWN: tuple[Flavour, ...] = (MPICH, OPENMPI, IMPI)
#: The programs of every known launcher's own processes (the ranks are the other processes of
#: a job: :func:`hpcbsp.util.proctree.signal_ranks`).
LAUNCHER_PROGRAMS: frozenset[str] = frozenset(p for f in KNOWN for p in f.launcher_programs)
