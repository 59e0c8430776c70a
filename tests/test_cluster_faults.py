"""Faults across the emulated nodes of ``slurm/local-cluster.sh start --nodes 4`` (as root).

A BSP program runs on 4 nodes (one rank per node, ``mpiexec -f HOSTS``, TCP between the nodes)
with a sync timeout; in the middle of a superstep the test

* SIGKILLs every process of the job on one node (what a node that dies leaves behind), or
* takes that node's link down while the others wait for its rank in a sync (a peer that vanishes
  without closing its TCP connections, which MPI alone may wait for forever), or
* takes it down while the ranks are inside the data exchange of a superstep (the links are
  rate-limited so that the exchange lasts seconds, and the cut is made while the link's byte
  counter shows the data flowing),

and checks that the job ends within a stated bound, with a non-zero status, an error that names
what was lost, and no process of the job left on any node. The oracle is the clock, the exit
status, the output and the nodes' process tables.

Without the 4-node cluster (or not as root) the tests skip and say why; under CI they fail
instead (see cluster_helpers).
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from cluster_helpers import (
    HOSTFILE,
    LINK_PREFIX,
    RSH,
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

from hpcbsp.runtime.launch import find_mpiexec

PYTHON = sys.executable
MPIEXEC = find_mpiexec()
NODES = cluster_nodes()
#: The ranks' sync timeout, and how long after it the job must be gone.
SYNC_TIMEOUT = 8.0
SLACK = 25.0


def _unavailable() -> str | None:
    return cluster_unavailable(4, mpiexec=True)


pytestmark = [pytest.mark.slurm, *unavailable_marks(_unavailable()),
              mpich_only("the emulated cluster's rsh launcher and task prolog (slurm/local-cluster.sh) set MPICH's transport, "
                "and these tests start jobs with hydra's options and srun --mpi=pmi2")]

# Every superstep each rank puts a block to the next rank; rank 0 says when 20 supersteps are done.
PROGRAM = """\
import sys, time
import hpcbsp

def prog(bsp):
    a = bsp.coarray(1 << 14, name="a")
    for step in range(1_000_000):
        a.put((bsp.pid + 1) % bsp.nprocs, a.local)
        bsp.sync()
        time.sleep(0.02)
        if step == 20 and bsp.pid == 0:
            open(sys.argv[1], "w").close()
        if step == 20 and bsp.pid == int(sys.argv[3]):
            time.sleep(60)  # the others wait for it in the next sync

with hpcbsp.BSP(timeout=None if sys.argv[2] == "none" else float(sys.argv[2])) as ctx:
    from hpcbsp.runtime.failure.guards import install_excepthook
    install_excepthook()
    prog(ctx)
"""


def _start(tmp_path: Path, slow_rank: int = -1, program: str = PROGRAM,
           timeout: str = str(SYNC_TIMEOUT)) -> tuple[subprocess.Popen, str, Path]:
    (tmp_path / "prog.py").write_text(program)
    ready = tmp_path / "ready"
    tag = uuid.uuid4().hex
    env = clean_env(slurm=True, transport=True)
    env.update(PYTHONUNBUFFERED="1", MPIEXEC_TIMEOUT="120", HPCBSP_FAULT_TAG=tag, HPCBSP_SYNC_TIMEOUT="",
               # With a sync timeout the test checks what the timeout says: the failure detector
               # (10 s by default) waits longer than it here.
               HPCBSP_HEARTBEAT_TIMEOUT="" if timeout == "none" else "120")
    proc = subprocess.Popen(
        [MPIEXEC, "-f", str(HOSTFILE), "-launcher", "rsh", "-launcher-exec", str(RSH), "-n", "4",
         PYTHON, str(tmp_path / "prog.py"), str(ready), timeout, str(slow_rank)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path,
        stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 90
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the program did not reach superstep 20:\n{proc.communicate()[0]}")
        time.sleep(0.1)
    return proc, tag, ready


def _finish(proc: subprocess.Popen, tag: str, bound: float, nodes: list[str] | None = None) -> tuple[float, str]:
    """Wait (at most ``bound`` seconds) for the job to end; then no process of it may be left on
    ``nodes`` (default: all four)."""
    t0 = time.monotonic()
    try:
        out, _ = proc.communicate(timeout=bound)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"the job still ran {bound} s after the fault:\n{out[-4000:]}")
    elapsed = time.monotonic() - t0
    assert_none_outlived(tag, NODES[:4] if nodes is None else nodes, output=out)
    return elapsed, out


def _cut_link_and_finish(proc: subprocess.Popen, tag: str, link: str, cut: str,
                         bound: float) -> tuple[float, str]:
    """Take ``link`` (node ``cut``'s) down, wait at most ``bound`` seconds for the job to end on
    the other nodes (:func:`_finish`), bring the link up again, and then kill what is left of
    the job on ``cut`` (its ranks time out too; none may outlive the test)."""
    subprocess.run(["ip", "link", "set", link, "down"], check=True, timeout=10)
    try:
        # The cut-off node is out of mpiexec's reach: its processes are dealt with below.
        elapsed, out = _finish(proc, tag, bound, nodes=[n for n in NODES[:4] if n != cut])
    finally:
        subprocess.run(["ip", "link", "set", link, "up"], check=True, timeout=10)
    deadline = time.monotonic() + 30
    while (stray := tagged_pids(cut, tag)) and time.monotonic() < deadline:
        time.sleep(0.5)
    for pid in stray:
        os.kill(pid, 9)
    return elapsed, out


def test_a_node_whose_processes_are_all_killed_ends_the_job(tmp_path: Path) -> None:
    proc, tag, _ = _start(tmp_path)
    lost = NODES[2]  # rank 2's node
    kill_node(lost, tag)
    elapsed, out = _finish(proc, tag, SYNC_TIMEOUT + SLACK)
    assert proc.returncode != 0, out
    assert f"lost node {lost}" in out, out[-4000:]


@pytest.mark.alone  # it takes a node's link down: every other job through that node would fail
def test_a_node_whose_link_goes_down_ends_the_job_naming_its_rank(tmp_path: Path) -> None:
    # Rank 2 is held in local work at superstep 20 while the others wait for it in the sync, and
    # its link goes down then: the others' sync timeout must end the job.
    proc, tag, _ = _start(tmp_path, slow_rank=2)
    link, cut = f"{LINK_PREFIX}3", NODES[2]  # rank 2 on hpcbsp-node3
    time.sleep(1.0)  # the others are in the sync by now
    elapsed, out = _cut_link_and_finish(proc, tag, link, cut, SYNC_TIMEOUT + SLACK)
    assert proc.returncode != 0, out
    # The ranks that can still talk time out in their sync and name rank 2 among those that never
    # arrived (a rank that was exchanging data with rank 2 when the link went may be named too).
    assert re.search(rf"timed out waiting for the other ranks \(ranks not arrived: (\d+ \(on [\w-]+\), )*"
                     rf"2 \(on {cut}\)", out), out[-4000:]
    assert elapsed >= SYNC_TIMEOUT * 0.5, f"ended after {elapsed:.1f} s, before any timeout could fire:\n{out[-3000:]}"


# -- with no timeout set: the failure detector (hpcbsp/runtime/failure/nodewatch.py) at its defaults ----
#: The detector's default timeout (10 s) and its period, plus the launcher's own clean-up.
DETECTOR_BOUND = 30.0


def test_a_frozen_node_ends_the_job_with_no_setting(tmp_path: Path) -> None:
    # Every process of the job on rank 2's node stops (SIGSTOP: a node that hangs, its watcher
    # included); nobody set a timeout.  The other nodes' watchers stop hearing from it.
    proc, tag, _ = _start(tmp_path, timeout="none")
    lost = NODES[2]
    frozen: list[int] = []
    try:
        frozen = kill_node(lost, tag, signal.SIGSTOP)
        elapsed, out = _finish(proc, tag, DETECTOR_BOUND, nodes=[n for n in NODES[:4] if n != lost])
    finally:
        for pid in frozen:
            for sig in (signal.SIGKILL, signal.SIGCONT):
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
    assert proc.returncode != 0, out
    assert f"[hpcbsp] node {lost} (rank 2) has not been heard from for 1" in out, out[-4000:]
    assert elapsed < DETECTOR_BOUND


@pytest.mark.alone  # it takes a node's link down: every other job through that node would fail
def test_a_cut_link_ends_the_job_with_no_setting(tmp_path: Path) -> None:
    # The ranks wait for each other in their syncs when rank 2's link goes down; no timeout.
    proc, tag, _ = _start(tmp_path, timeout="none")
    link, cut = f"{LINK_PREFIX}3", NODES[2]
    elapsed, out = _cut_link_and_finish(proc, tag, link, cut, DETECTOR_BOUND)
    assert proc.returncode != 0, out
    assert f"[hpcbsp] node {cut} (rank 2) has not been heard from for 1" in out, out[-4000:]
    assert elapsed < DETECTOR_BOUND


# Every superstep each rank puts 4 MiB to the next: over links limited to 20 Mbit/s the data
# exchange takes about 2 s, and almost all of a superstep's time is spent in it.
PROGRAM_EXCHANGE = (PROGRAM.replace("bsp.coarray(1 << 14", "bsp.coarray(1 << 19").replace("        time.sleep(0.02)\n", "")
                    .replace("if step == 20 and bsp.pid == 0", "if step == 2 and bsp.pid == 0"))
RATE = "20mbit"


def _shape_links(rate: str | None, saved: dict[str, list[str]] | None = None) -> dict[str, list[str]]:
    """Limit the host side of every node's link to ``rate`` (tc tbf) and return the tbf settings
    the links had (``slurm/local-cluster.sh --link-rate``); with ``rate=None``, put those back."""
    before = {}
    for i in range(1, 5):
        link = f"{LINK_PREFIX}{i}"
        shown = subprocess.run(["tc", "qdisc", "show", "dev", link, "root"], capture_output=True,
                               text=True, timeout=10).stdout
        found = re.search(r"\btbf\b.*?\brate (\S+) burst (\S+) lat (\S+)", shown)
        before[link] = ["rate", found[1], "burst", found[2], "latency", found[3]] if found else []
        subprocess.run(["tc", "qdisc", "del", "dev", link, "root"], capture_output=True, timeout=10)
        settings = ["rate", rate, "burst", "32kb", "latency", "400ms"] if rate is not None \
            else (saved or {}).get(link, [])
        if settings:
            subprocess.run(["tc", "qdisc", "add", "dev", link, "root", "tbf", *settings], check=True, timeout=10)
    return before


@pytest.mark.alone  # it slows every node's link: other jobs' bounds in seconds would measure it
def test_a_node_whose_link_goes_down_inside_the_data_exchange_is_named(tmp_path: Path) -> None:
    # Before the runtime bounded the exchange, ranks cut off here waited in MPI for ever.
    link, cut = f"{LINK_PREFIX}3", NODES[2]  # rank 2 on hpcbsp-node3
    saved = _shape_links(RATE)
    try:
        proc, tag, _ = _start(tmp_path, program=PROGRAM_EXCHANGE)
        # Cut while the data flows to rank 2's node (the exchange; control steps move a few bytes).
        stats = Path("/sys/class/net") / link / "statistics" / "tx_bytes"
        last, deadline = int(stats.read_text()), time.monotonic() + 30
        while True:
            time.sleep(0.05)
            now = int(stats.read_text())
            if now - last > 64 * 1024 or time.monotonic() > deadline:
                break
            last = now
        elapsed, out = _cut_link_and_finish(proc, tag, link, cut, SYNC_TIMEOUT * 2 + SLACK)
    finally:
        _shape_links(None, saved)
    assert proc.returncode != 0, out
    # A rank that was moving data to or from rank 2 names it, and its node, from the exchange.
    assert re.search(rf"the data exchange of superstep \d+ timed out after {SYNC_TIMEOUT:g} s waiting for "
                     rf"rank 2 \(on {cut}\)", out), out[-4000:]

