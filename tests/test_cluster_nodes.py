"""hpcbsp across emulated nodes: ``slurm/local-cluster.sh start --nodes 4`` (as root).

Each node is a network namespace with its own hostname and address on a private bridge; the
ranks of one job run on several of them, launched by ``srun -N 4 --mpi=pmi2`` or by MPICH's
``mpiexec -f HOSTS -launcher rsh -launcher-exec RSH``. What is checked, and against what:

* the ranks really run on separate hosts (their hostnames) and their messages really cross the
  links: the byte counters of every node's link (the kernel's, in /sys/class/net) grow by at
  least the bytes the program exchanged between nodes. The same program with MPICH left to its
  own choice of transport moves almost nothing over the links (shared memory between the
  namespaces), which shows that the counters tell the two apart;
* ``hpcbsp info`` names the hosts and the transport;
* the MPI test suites of the BSP semantics, the FA-BSP mailboxes and apps, the SNN simulator
  (bsp and async, against the serial spike trains), the farm, checkpoints and the exchange's
  sparse consensus against the dense one pass across the 4 nodes, one rank a node under
  ``srun``; those whose paths differ where ranks share a node (the exchange, queues,
  collectives, the arena, the mailboxes) also with 6 ranks under ``mpiexec`` (two on the first
  two nodes, one on the others: ranks that share a node and ranks that do not, in one job).
  Those tests compare with independent oracles (numpy, serial runs), so passing there means the
  same results as on one node. The consensus, which a job takes by itself from
  ``outbox.SPARSE_MIN_RANKS`` (16) ranks, runs in its tests by their lever below that; a 16-rank
  run of the semantics (4 a node, 8 a core here) took longer than both launches together and
  checked nothing the smaller run does not;
* whole programs give the same bits on 4 nodes as on one: the BSF Jacobi farm's solution, and
  the heat app checkpointed on 4 nodes and restarted on 2 (which also checks itself against a
  serial numpy run).

Without the 4-node cluster (or not as root: the launcher enters the nodes' namespaces) every
test skips and says why; under CI it fails instead (see cluster_helpers).
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from cluster_helpers import (
    FINAL_STATES,
    HOSTFILE,
    RSH,
    cluster_nodes,
    cluster_required,  # noqa: F401  (the fixture behind unavailable_marks)
    cluster_unavailable,
    job_records,
    link_bytes,
    unavailable_marks,
    wait_final,
)
from mpi_helpers import clean_env, mpich_only

from hpcbsp.runtime.launch import find_mpiexec

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
MPIEXEC = find_mpiexec()
NODES = cluster_nodes()
#: Launcher and MPI variables of an enclosing job or mpiexec, which must not leak into ours.
MIB = 1 << 20


def _unavailable() -> str | None:
    return cluster_unavailable(4, srun=True, mpiexec=True, root_for="the launcher enters the emulated nodes' namespaces")


pytestmark = [pytest.mark.slurm, *unavailable_marks(_unavailable()),
              mpich_only("the emulated cluster's rsh launcher and task prolog (slurm/local-cluster.sh) set MPICH's transport, "
                "and these tests start jobs with hydra's options and srun --mpi=pmi2")]


def _env(**extra: str) -> dict[str, str]:
    env = clean_env(slurm=True, transport=True)
    env.update(PYTHONUNBUFFERED="1", MPIEXEC_TIMEOUT="900")
    env.update(extra)
    return env


def _run(cmd: list[str], *, timeout: float, cwd: Path = REPO, **env: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_env(**env),
                              cwd=cwd, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{' '.join(cmd[:8])} ... still ran after {timeout} s\n"
                    f"{exc.stdout!s:.4000}\n{exc.stderr!s:.4000}")


def mpiexec_nodes(n: int, args: list[str], *, timeout: float = 120, cwd: Path = REPO, **env: str):
    """``mpiexec -f HOSTS -launcher rsh -launcher-exec RSH -n n python args``: ranks round-robin
    over the nodes (one slot per node in the hostfile)."""
    cmd = [MPIEXEC, "-f", str(HOSTFILE), "-launcher", "rsh", "-launcher-exec", str(RSH), "-n", str(n),
           PYTHON, *args]
    return _run(cmd, timeout=timeout, cwd=cwd, **env)


def srun_nodes(n: int, args: list[str], *, nodes: int = 4, timeout: float = 120, cwd: Path = REPO, **env: str):
    """``srun -N nodes -n n --mpi=pmi2 python args`` (a time limit, so a hang ends the step)."""
    minutes = max(1, int(timeout // 60))
    cmd = ["srun", f"-N{nodes}", f"-n{n}", "--mpi=pmi2", "--kill-on-bad-exit=1", f"--time={minutes}",
           "--distribution=cyclic", PYTHON, *args]
    return _run(cmd, timeout=timeout + 30, cwd=cwd, **env)


LAUNCHERS = {"mpiexec": mpiexec_nodes, "srun": srun_nodes}


def _delta(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
    return {node: (after[node][0] - before[node][0], after[node][1] - before[node][1]) for node in before}


# Every rank sends 8 MiB to the next rank and receives 8 MiB from the previous one; with one rank
# per node, every node's link carries at least 8 MiB each way.
EXCHANGE = """\
import socket
import numpy as np
from mpi4py import MPI
comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
out = np.full(1 << 20, rank, dtype=np.float64)
got = np.empty_like(out)
comm.Sendrecv(out, dest=(rank + 1) % size, recvbuf=got, source=(rank - 1) % size)
assert np.all(got == (rank - 1) % size)
hosts = comm.gather(socket.gethostname(), root=0)
if rank == 0:
    print("hosts " + " ".join(hosts), flush=True)
"""


def _exchange(tmp_path: Path, launcher: str, **env: str) -> tuple[dict[int, str], dict[str, tuple[int, int]]]:
    (tmp_path / "exchange.py").write_text(EXCHANGE)
    before = link_bytes()
    proc = LAUNCHERS[launcher](4, [str(tmp_path / "exchange.py")], cwd=tmp_path, **env)
    after = link_bytes()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (line,) = re.findall(r"^hosts (.*)$", proc.stdout, re.M)
    return dict(enumerate(line.split())), _delta(before, after)


@pytest.mark.alone  # the links' byte counters are its oracle: another job's traffic would count
@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_ranks_on_separate_nodes_exchange_over_the_links(tmp_path: Path, launcher: str) -> None:
    placed, moved = _exchange(tmp_path, launcher)
    assert sorted(placed.values()) == NODES[:4], placed  # one rank on each of four hosts
    for node in NODES[:4]:
        sent, received = moved[node]
        assert sent >= 8 * MIB and received >= 8 * MIB, (
            f"{node}'s link carried {sent} bytes out and {received} in for an 8 MiB exchange each way: "
            f"the messages did not cross the network (shared memory?); all links: {moved}")


@pytest.mark.alone  # the links' byte counters are its oracle: another job's traffic would count
def test_the_link_counters_catch_shared_memory(tmp_path: Path) -> None:
    # The same exchange with MPICH left to choose its transport (the launcher then sets none):
    # UCX sees one machine and uses shared memory between the namespaces. The check above would
    # fail on this run, which is what makes it a check.
    placed, moved = _exchange(tmp_path, "mpiexec", HPCBSP_CLUSTER_TRANSPORT="any")
    assert sorted(placed.values()) == NODES[:4], placed
    assert all(sent < MIB for sent, _ in moved.values()), moved


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_hpcbsp_info_names_the_hosts_and_the_transport(launcher: str) -> None:
    proc = LAUNCHERS[launcher](4, ["-m", "hpcbsp", "info", "--json"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    info = json.loads(proc.stdout[proc.stdout.index("{"):proc.stdout.rindex("}") + 1])
    assert info["world_size"] == 4 and info["hosts"] == NODES[:4], info
    assert info["ranks_per_host"] == {node: 1 for node in NODES[:4]}, info
    assert info["transport"]["FI_PROVIDER"] == "tcp" and info["transport"]["MPIR_CVAR_CH4_NETMOD"] == "ofi", info
    assert info["transport_advice"] is None, info
    assert info["launcher"] == launcher


WAITS = """\
import hpcbsp
with hpcbsp.BSP() as bsp:
    print(f"wait {bsp.pid} {bsp.wait}", flush=True)
"""


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_ranks_wait_by_yielding_on_the_emulated_nodes_unless_the_job_says(tmp_path: Path, launcher: str,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # The nodes share this machine's cores, which HPCBSP_WAIT=auto cannot see (one rank a node
    # looks like a core each): the launcher and the task prolog set HPCBSP_WAIT=yield unless the
    # job set it. Oracle: the mode each rank's context agreed on (BSP.wait).
    (tmp_path / "waits.py").write_text(WAITS)
    monkeypatch.delenv("HPCBSP_WAIT", raising=False)
    for asked, expect in ((None, "yield"), ("spin", "spin")):
        proc = LAUNCHERS[launcher](4, [str(tmp_path / "waits.py")], cwd=tmp_path,
                                   **({"HPCBSP_WAIT": asked} if asked else {}))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        said = sorted(re.findall(r"wait (\d) (spin|yield)", proc.stdout))  # (the ranks' lines may interleave)
        assert said == [(str(r), expect) for r in range(4)], (asked, proc.stdout + proc.stderr)


def test_hpcbsp_info_advises_tcp_when_nodes_share_a_machine() -> None:
    proc = mpiexec_nodes(2, ["-m", "hpcbsp", "info", "--json"], HPCBSP_CLUSTER_TRANSPORT="any")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    info = json.loads(proc.stdout[proc.stdout.index("{"):proc.stdout.rindex("}") + 1])
    assert info["hosts"] == NODES[:2]
    assert info["transport"] == "chosen by the MPI library"
    assert "FI_PROVIDER=tcp" in info["transport_advice"], info


# --- the MPI test suites on 4 nodes --------------------------------------------------------------

#: The BSP semantics (one file per concept), the FA-BSP tests and the sparse consensus.
SEMANTICS = [f"tests/test_runtime_{concept}.py"
             for concept in ("drma", "queues", "collectives", "control", "ledger", "failures")]
SEMANTICS += ["tests/test_runtime_bsplib.py", "tests/test_runtime_arena.py", "tests/test_fabsp_mailbox.py",
              "tests/test_fabsp_apps.py", "tests/test_fabsp_combine.py", "tests/test_exchange_sparse.py"]
#: Test files whose MPI tests run across the 4 nodes, each against its own oracle.
SUITES = [*SEMANTICS, "tests/test_snn_mpi.py", "tests/test_farm_skeleton.py",
          "tests/test_runtime_checkpoint.py"]
#: Stress tests that measure a resource rather than a semantic (thousands of communicators, peak
#: memory under a flood of messages); they run on one node in `make test`.
STRESS = "not contexts_that_fail_together and not peak_memory"


def _pytest_under(launcher: str, n: int, files: list[str], *, timeout: float, keyword: str | None = None):
    missing = [f for f in files if not (REPO / f).exists()]
    assert not missing, f"test files named here do not exist (renamed?): {missing}"
    args = ["-m", "pytest", "-q", "--only-mpi", "-p", "no:cacheprovider", *files]
    if keyword:
        args += ["-k", keyword]
    before = link_bytes()
    proc = LAUNCHERS[launcher](n, args, timeout=timeout)
    moved = _delta(before, link_bytes())
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    summary = re.findall(r"(\d+) (passed|failed|error)", out)
    assert summary and not any(kind != "passed" for _, kind in summary), out[-6000:]
    assert sum(int(k) for k, kind in summary if kind == "passed") >= 10, out[-3000:]
    # Every node took part, and over the network.
    assert all(sent > MIB and received > MIB for sent, received in moved.values()), moved


@pytest.mark.alone  # the links' byte counters are its oracle: another job's traffic would count
@pytest.mark.timeout(660)
def test_mpi_suites_pass_on_4_nodes() -> None:
    """Every file of :data:`SUITES`, one rank a node, launched by srun."""
    _pytest_under("srun", 4, SUITES, timeout=600, keyword=STRESS)


#: The files whose paths differ where ranks share a node (shared memory beside the links): the
#: data exchange, queues and collectives, the node's shared arena, the mailboxes.
SHARED_NODE = ["tests/test_runtime_drma.py", "tests/test_runtime_queues.py", "tests/test_runtime_collectives.py",
               "tests/test_runtime_bsplib.py", "tests/test_runtime_arena.py", "tests/test_fabsp_mailbox.py",
               "tests/test_exchange_sparse.py"]


@pytest.mark.alone  # the links' byte counters are its oracle: another job's traffic would count
@pytest.mark.timeout(660)
def test_bsp_and_fabsp_semantics_with_ranks_sharing_nodes() -> None:
    """:data:`SHARED_NODE`'s files with 6 ranks, launched by mpiexec (round-robin over the host
    file, as srun --distribution=cyclic places them: two on the first two nodes, one on the
    others): ranks that share a node and ranks that do not, in one job."""
    _pytest_under("mpiexec", 6, SHARED_NODE, timeout=600, keyword=STRESS)


# --- whole programs: the same bits on 4 nodes as on one --------------------------------------

def _local(n: int, args: list[str], *, timeout: float = 300, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return _run([MPIEXEC, "-n", str(n), PYTHON, *args], timeout=timeout, cwd=cwd)


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_farm_jacobi_on_4_nodes_gives_the_one_node_solution(tmp_path: Path, launcher: str) -> None:
    args = ["-m", "hpcbsp.apps.bsf.jacobi", "--n", "400", "--json"]
    one = _local(4, [*args, "--out", str(tmp_path / "one.npy")])
    assert one.returncode == 0, one.stdout + one.stderr
    four = LAUNCHERS[launcher](4, [*args, "--out", str(tmp_path / "four.npy")])
    assert four.returncode == 0, four.stdout + four.stderr
    x1, x4 = np.load(tmp_path / "one.npy"), np.load(tmp_path / "four.npy")
    assert x1.tobytes() == x4.tobytes()


def test_heat_checkpointed_on_4_nodes_restarts_on_2_bit_identical(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    common = ["-m", "hpcbsp.apps.heat", "--n", "3000", "--checkpoint", str(ckpt)]
    first = srun_nodes(4, [*common, "--steps", "60", "--every", "20"])
    assert first.returncode == 0, first.stdout + first.stderr
    assert (ckpt / "meta.json").exists()
    second = mpiexec_nodes(2, [*common, "--steps", "150", "--restart", "--check", "--out", str(tmp_path / "nodes.npy")])
    out = second.stdout + second.stderr
    assert second.returncode == 0, out
    assert re.search(r"restarted from .* at step 60", out), out
    assert "check against serial numpy: bit-identical" in out, out
    one = _local(3, ["-m", "hpcbsp.apps.heat", "--n", "3000", "--steps", "150", "--out", str(tmp_path / "one.npy")])
    assert one.returncode == 0, one.stdout + one.stderr
    assert np.load(tmp_path / "one.npy").tobytes() == np.load(tmp_path / "nodes.npy").tobytes()


# --- the benchmark across nodes runs (its figures are measured on a quiet machine) ----------

@pytest.mark.alone  # the links' byte counters are its oracle: another job's traffic would count
def test_the_nodes_benchmark_runs_across_the_nodes() -> None:
    proc = mpiexec_nodes(4, ["-m", "hpcbsp.bench", "nodes", "--quick", "--mib", "0.25", "--rounds", "1"],
                         timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert f"ranks: 4 on 4 host(s): {NODES[0]} (1)" in out, out
    assert re.search(r"bare Sendrecv ring\s+g = .* ns/byte", out) and "throughput ratio" in out, out
    moved = int(re.search(r"bytes through the emulated nodes' links during the run: ([\d,]+)", out)
                .group(1).replace(",", ""))
    assert moved > 4 * 2**18, out  # at least the puts' quarter MiB per rank crossed the links
    assert "shared memory" not in out, out  # no transport advice: TCP was set


# --- a Slurm node failure under long-run.sbatch ------------------------------------------------

@pytest.mark.alone  # it sets a node DOWN in Slurm: other jobs on that node would be requeued
def test_a_node_failure_requeues_the_long_run_onto_the_remaining_nodes(tmp_path: Path) -> None:
    # The heat app on 4 nodes (sbatch -N 3-4: one task per node) saves a checkpoint every 1000
    # steps. Once the first one is on disk a node other than the batch host is set DOWN: Slurm
    # ends the step ("Node failure"), requeues the job, and the requeued job starts on the 3 nodes
    # left, restores the 4-rank checkpoint onto 3 ranks and ends bit-identical to the serial
    # numpy run of all the steps (--check, an uninterrupted run) and to a one-node run (--out).
    ckpt, steps = tmp_path / "heat-ckpt", 30_000
    env = _env(HPCBSP_VENV=sys.prefix, HPCBSP_CHECKPOINT=str(ckpt), HPCBSP_STOP_GRACE="0")
    proc = subprocess.run(
        ["sbatch", "--parsable", "-N", "3-4", "--time=10", str(REPO / "slurm" / "long-run.sbatch"),
         "-m", "hpcbsp.apps.heat", "--n", "200", "--steps", str(steps), "--every", "1000",
         "--checkpoint", "{checkpoint}", "--restart", "--check", "--quiet", "--out", str(tmp_path / "nodes.npy")],
        capture_output=True, text=True, timeout=30, env=env, cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.split(";")[0].strip()
    down = None
    try:
        deadline = time.monotonic() + 90
        while not (ckpt / "meta.json").exists():
            first = job_records(job_id)[0]
            assert first["JobState"] not in FINAL_STATES, first
            assert time.monotonic() < deadline, f"no checkpoint within 90 s: {first}"
            time.sleep(0.2)
        first = job_records(job_id)[0]
        assert first["NumNodes"] == "4", first  # the range's maximum, while all nodes are up
        down = next(n for n in NODES[:4] if n != first["BatchHost"])
        _run(["scontrol", "update", f"nodename={down}", "state=down", "reason=hpcbsp test: node failure"],
             timeout=30).check_returncode()
        (job,) = wait_final(job_id, 300)
    finally:
        if job_records(job_id)[0]["JobState"] not in FINAL_STATES:
            _run(["scancel", job_id], timeout=30)
        if down is not None:
            _run(["scontrol", "update", f"nodename={down}", "state=resume"], timeout=30)
    log = (tmp_path / f"hpcbsp-long-{job_id}.out").read_text()
    assert (job["JobState"], job["Restarts"]) == ("COMPLETED", "1"), log
    assert job["NumNodes"] == "3" and down not in _expand(job["NodeList"]), job
    assert "resuming from checkpoint" in log, log
    (restarted,) = map(int, re.findall(r"restarted from .* at step (\d+)", log))
    assert 0 < restarted < steps and restarted % 1000 == 0, log
    assert log.count(f"heat: n=200 steps={steps} on 3 ranks") == 1, log  # only the second run ended
    assert "check against serial numpy: bit-identical" in log, log
    one = _local(2, ["-m", "hpcbsp.apps.heat", "--n", "200", "--steps", str(steps), "--quiet",
                     "--out", str(tmp_path / "one.npy")])
    assert one.returncode == 0, one.stdout + one.stderr
    assert np.load(tmp_path / "one.npy").tobytes() == np.load(tmp_path / "nodes.npy").tobytes()


def _expand(nodelist: str) -> list[str]:
    """Slurm's compressed host list (``hpcbsp-node[1-2,4]``) as names."""
    out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True,
                         timeout=30, env=_env(), stdin=subprocess.DEVNULL)
    return out.stdout.split()
