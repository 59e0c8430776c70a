"""The failure detector on the emulated cluster (``slurm/local-cluster.sh start --nodes 4``, as
root) under plain ``srun -N 4 -n 4 --mpi=pmi2``: Slurm's default ``KillOnBadExit=0``, so that
the job ends only if the detector's verdict ends every node's ranks and has Slurm cancel the step.

* every process of the job on one node stopped (SIGSTOP: a frozen node, its watcher included),
  or killed (SIGKILL: a node that dies);
* one node's link cut;
* a node frozen while a process outside the job sends the watchers forged datagrams (the old
  protocol's words ``hb HOST``, ``bye HOST``, ``died HOST TIME RANK``, and datagrams sealed
  with a wrong key) claiming that the frozen node lives, has left, or that a rank died;
* the watcher's socket is bound to the node's own address, not to every interface.

Oracles: the clock (the job ends within the bound after the fault), the exit status, the one
failure line, the nodes' process tables and socket tables (``ss``).
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from cluster_helpers import (
    LINK_PREFIX,
    assert_none_outlived,
    cluster_nodes,
    cluster_required,  # noqa: F401  (the fixture behind unavailable_marks)
    cluster_unavailable,
    kill_node,
    no_leftover_shared_memory,  # noqa: F401  (autouse: the killed ranks' /dev/shm files go)
    tagged_pids,
    unavailable_marks,
)
from mpi_helpers import clean_env, mpich_only

PYTHON = sys.executable
NODES = cluster_nodes()
#: The detector's default timeout (10 s), its period, the flood and Slurm's cancel.
BOUND = 30.0
#: The same with forged datagrams arriving all the while.
FORGED_BOUND = 40.0

pytestmark = [pytest.mark.slurm,
              *unavailable_marks(cluster_unavailable(4, srun=True, root_for="the test enters the emulated nodes' namespaces")),
              mpich_only("srun --mpi=pmi2 with the cluster's MPICH transport (slurm/local-cluster.sh)")]

PROGRAM = """\
import sys, time
import hpcbsp

with hpcbsp.BSP() as bsp:
    a = bsp.coarray(1 << 10, name="a")
    for step in range(1_000_000):
        a.put((bsp.pid + 1) % bsp.nprocs, a.local)
        bsp.sync()
        time.sleep(0.02)
        if step == 20 and bsp.pid == 0:
            open(sys.argv[1], "w").close()
"""


def _start(tmp_path: Path, options: tuple[str, ...] = ()) -> tuple[subprocess.Popen[str], str]:
    (tmp_path / "prog.py").write_text(PROGRAM)
    ready = tmp_path / "ready"
    tag = uuid.uuid4().hex
    env = clean_env(slurm=True, transport=True, PYTHONUNBUFFERED="1", HPCBSP_FAULT_TAG=tag,
                    HPCBSP_SYNC_TIMEOUT="", HPCBSP_HEARTBEAT_TIMEOUT="", HPCBSP_HEARTBEAT_PERIOD="")
    proc = subprocess.Popen(["srun", "-N4", "-n4", "--mpi=pmi2", "--time=3", "--distribution=cyclic",
                             f"--nodelist={','.join(NODES[:4])}", *options, PYTHON, str(tmp_path / "prog.py"), str(ready)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            cwd=tmp_path, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 90
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the program did not reach superstep 20:\n{proc.communicate()[0]}")
        time.sleep(0.1)
    return proc, tag


def _finish(proc: subprocess.Popen[str], tag: str, bound: float, t0: float, nodes: list[str]) -> tuple[float, str]:
    try:
        out, _ = proc.communicate(timeout=max(1.0, bound - (time.monotonic() - t0)))
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"the job still ran {bound} s after the fault:\n{out[-4000:]}")
    elapsed = time.monotonic() - t0
    assert_none_outlived(tag, nodes, output=out)
    return elapsed, out


def _one_line(out: str, lost: str) -> None:
    lines = [ln for ln in out.splitlines() if ln.startswith("[hpcbsp] ")]
    assert len(lines) == 1 and lines[0].startswith(f"[hpcbsp] node {lost} (rank ") \
        and "has not been heard from for 1" in lines[0], out[-4000:]


def _thaw(pids: list[int]) -> None:
    for pid in pids:
        for sig in (signal.SIGKILL, signal.SIGCONT):
            try:
                os.kill(pid, sig)
            except OSError:
                pass


def _watcher_sockets(node: str, tag: str) -> list[tuple[str, int]]:
    """The UDP addresses the job's watcher on ``node`` is bound to (from ``ss`` in its namespace)."""
    watchers = {pid for pid in tagged_pids(node, tag)
                if b"nodewatch.py" in Path(f"/proc/{pid}/cmdline").read_bytes()}
    out = subprocess.run(["ip", "netns", "exec", node, "ss", "-uapnH"], capture_output=True, text=True,
                         timeout=10).stdout
    found = []
    for line in out.splitlines():
        if any(f"pid={pid}," in line for pid in watchers):
            host, _, port = line.split()[3].rpartition(":")
            found.append((host, int(port)))
    return found


@pytest.mark.parametrize("options", [(), ("--kill-on-bad-exit=1",)], ids=["plain", "kill-on-bad-exit"])
def test_a_frozen_node_ends_a_plain_srun_job(tmp_path: Path, options: tuple[str, ...]) -> None:
    proc, tag = _start(tmp_path, options)
    lost = NODES[2]
    frozen = kill_node(lost, tag, signal.SIGSTOP)
    t0 = time.monotonic()
    try:
        elapsed, out = _finish(proc, tag, BOUND, t0, [n for n in NODES[:4] if n != lost])
    finally:
        _thaw(frozen)
    print(f"srun {' '.join(options)}, frozen node: ended {elapsed:.1f} s after the freeze")
    assert proc.returncode != 0, out
    _one_line(out, lost)
    assert elapsed < BOUND


def test_a_killed_node_ends_a_plain_srun_job(tmp_path: Path) -> None:
    # Every process of the job on one node SIGKILLed (a node that dies).  What names it depends
    # on who sees it first (the MPI library's lost connection, the detector); it must end.
    proc, tag = _start(tmp_path)
    lost = NODES[2]
    kill_node(lost, tag, signal.SIGKILL)
    t0 = time.monotonic()
    elapsed, out = _finish(proc, tag, BOUND, t0, NODES[:4])
    print(f"plain srun, killed node: ended {elapsed:.1f} s after the kill")
    assert proc.returncode != 0, out


@pytest.mark.alone  # it takes a node's link down: every other job through that node would fail
def test_a_cut_link_ends_a_plain_srun_job(tmp_path: Path) -> None:
    proc, tag = _start(tmp_path)
    link, cut = f"{LINK_PREFIX}3", NODES[2]
    subprocess.run(["ip", "link", "set", link, "down"], check=True, timeout=10)
    t0 = time.monotonic()
    try:
        elapsed, out = _finish(proc, tag, BOUND, t0, [n for n in NODES[:4] if n != cut])
    finally:
        subprocess.run(["ip", "link", "set", link, "up"], check=True, timeout=10)
    deadline = time.monotonic() + 30
    while (stray := tagged_pids(cut, tag)) and time.monotonic() < deadline:
        time.sleep(0.5)
    for pid in stray:
        os.kill(pid, signal.SIGKILL)
    print(f"plain srun, cut link: ended {elapsed:.1f} s after the cut")
    assert proc.returncode != 0, out
    _one_line(out, cut)


def test_forged_datagrams_do_not_keep_a_frozen_node_alive(tmp_path: Path) -> None:
    from hpcbsp.runtime.failure.protocol import HB, VERDICT, seal
    proc, tag = _start(tmp_path)
    lost = NODES[2]
    targets = {n: _watcher_sockets(n, tag) for n in NODES[:4]}
    for node, addresses in targets.items():  # bound to the node's own address only
        assert len(addresses) == 1 and addresses[0][0] == socket.gethostbyname(node), (node, addresses)
    frozen = kill_node(lost, tag, signal.SIGSTOP)
    t0 = time.monotonic()
    stop = threading.Event()
    sent = [0]

    def forge() -> None:  # from this host, to the live nodes' watchers only: at most 8 a second each
        wrong = b"w" * 32
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as out:
            for i in range(400):
                if stop.is_set():
                    return
                for node, addresses in targets.items():
                    if node == lost:
                        continue
                    for data in (f"hb {lost}".encode(), f"bye {lost}".encode(), f"died {lost} {time.time():.6f} 2".encode(),
                                 seal(wrong, HB, 2, 1000 + i, b""), seal(wrong, VERDICT, 2, 2000 + i, bytes(17))):
                        out.sendto(data, addresses[0])
                        sent[0] += 1
                time.sleep(0.6)

    thread = threading.Thread(target=forge, daemon=True)
    thread.start()
    try:
        elapsed, out = _finish(proc, tag, FORGED_BOUND, t0, [n for n in NODES[:4] if n != lost])
    finally:
        stop.set()
        thread.join(timeout=10)
        _thaw(frozen)
    print(f"plain srun, frozen node, {sent[0]} forged datagrams: ended {elapsed:.1f} s after the freeze")
    assert sent[0] >= 15 * 3, sent  # the forgeries arrived all the while the job waited
    assert proc.returncode != 0, out
    _one_line(out, lost)
    assert elapsed < FORGED_BOUND


def _udp_out(node: str) -> int:
    """Datagrams sent from ``node``'s network namespace so far (its ``/proc/net/snmp``)."""
    out = subprocess.run(["ip", "netns", "exec", node, "cat", "/proc/net/snmp"], capture_output=True,
                         text=True, timeout=10).stdout
    names, values = [ln.split()[1:] for ln in out.splitlines() if ln.startswith("Udp:")][:2]
    return int(values[names.index("OutDatagrams")])


IDLE = """\
import sys, time
import hpcbsp

with hpcbsp.BSP() as bsp:
    bsp.sync()
    if bsp.pid == 0:
        open(sys.argv[1], "w").close()
    time.sleep(float(sys.argv[2]))
    bsp.sync()
"""


def _datagrams_per_second(tmp_path: Path, nodes: int, seconds: float = 10.0) -> float:
    """The last node's datagrams per second while a job of one rank on each of the last ``nodes``
    nodes runs (the last: the other tests' jobs run on the first four)."""
    (tmp_path / "idle.py").write_text(IDLE)
    ready = tmp_path / f"ready-{nodes}"
    env = clean_env(slurm=True, transport=True, HPCBSP_HEARTBEAT_TIMEOUT="", HPCBSP_HEARTBEAT_PERIOD="")
    proc = subprocess.Popen(["srun", f"-N{nodes}", f"-n{nodes}", "--mpi=pmi2", "--time=3",
                             f"--nodelist={','.join(NODES[-nodes:])}", PYTHON,
                             str(tmp_path / "idle.py"), str(ready), str(seconds + 8)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            cwd=tmp_path, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"the job did not start:\n{proc.communicate()[0]}")
            time.sleep(0.1)
        time.sleep(2.0)  # every watcher has met the others
        before, t0 = _udp_out(NODES[-1]), time.monotonic()
        time.sleep(seconds)
        rate = (_udp_out(NODES[-1]) - before) / (time.monotonic() - t0)
        sockets = subprocess.run(["ip", "netns", "exec", NODES[-1], "ss", "-uapnH"], capture_output=True,
                                 text=True, timeout=10).stdout
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, out
    assert len(sockets.splitlines()) == 1, f"another UDP socket on {NODES[-1]} counts too:\n{sockets}"
    return rate


@pytest.mark.skipif(len(NODES) < 8, reason="needs an emulated cluster of 8 or more nodes "
                    "(slurm/local-cluster.sh start --nodes 16)")
def test_a_nodes_datagrams_do_not_grow_with_the_job(tmp_path: Path) -> None:
    # The ring: each watcher beats to 2 observers a period, whatever the job's size (the protocol
    # of every node to every other sent 3 a second at 4 nodes and 15 at 16).
    small = _datagrams_per_second(tmp_path, 4)
    large = _datagrams_per_second(tmp_path, min(16, len(NODES)))
    print(f"node {NODES[-1]}: {small:.2f} datagrams/s with 4 nodes, {large:.2f} with {min(16, len(NODES))}")
    assert 1.5 <= small <= 2.5, small  # 2 a second, give or take the window's edges
    assert large <= 1.5 * small, (small, large)
