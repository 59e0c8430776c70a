"""``hpcbsp.util.proctree``: a job's processes from /proc, and a signal for its ranks only.

Oracles: a process tree built here with known pids (a shell that starts a stand-in for hydra's
proxy, named so with ``exec -a``, and a stand-in for a rank), and what the kernel says of each
after the signal: SIGUSR1's default action ends a process, so the rank's stand-in has ended
and the proxy's is still running."""
from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from hpcbsp.util.flavours import IMPI, MPICH, OPENMPI
from hpcbsp.util.procstat import descendants, in_group, job_processes, program
from hpcbsp.util.proctree import signal_ranks

TREE = "exec -a hydra_pmi_proxy sleep 30 & sleep 30 & wait"


def _wait_for(pred, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.fixture
def tree():
    proc = subprocess.Popen(["bash", "-c", TREE], start_new_session=True, stdin=subprocess.DEVNULL)
    try:
        # both children forked and past their exec (until then a child is a copy of bash)
        _wait_for(lambda: len(below := descendants(proc.pid)) == 2 and "bash" not in map(program, below))
        yield proc
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_the_tree_and_the_group_are_read_from_proc(tree):
    below = descendants(tree.pid)
    assert sorted(program(pid) for pid in below) == ["hydra_pmi_proxy", "sleep"]
    assert sorted(in_group(tree.pid)) == sorted([tree.pid, *below])
    assert program(tree.pid) == "bash" and descendants(below[0]) == []
    assert sorted(job_processes(tree.pid)) == sorted([tree.pid, *below])


def test_a_job_is_also_what_left_its_session():
    # as MPICH's hydra does with its proxy and its ranks: setsid, then a child of that
    proc = subprocess.Popen(["bash", "-c", "setsid bash -c 'sleep 30 & wait' & wait"], start_new_session=True,
                            stdin=subprocess.DEVNULL)
    try:
        _wait_for(lambda: len(descendants(proc.pid)) == 2)
        below = descendants(proc.pid)
        assert in_group(proc.pid) == [proc.pid]
        assert sorted(job_processes(proc.pid)) == sorted([proc.pid, *below])
    finally:
        for pid in [proc.pid, *descendants(proc.pid)]:
            os.kill(pid, signal.SIGKILL)
        proc.wait()


def test_a_signal_for_the_ranks_spares_the_launchers_processes(tree):
    below = descendants(tree.pid)
    proxy = next(pid for pid in below if program(pid) == "hydra_pmi_proxy")
    rank = next(pid for pid in below if pid != proxy)
    assert signal_ranks(below, signal.SIGUSR1) == [rank]
    # the rank's stand-in died of SIGUSR1 (its default action): bash reaps it
    _wait_for(lambda: not os.path.exists(f"/proc/{rank}"))
    assert os.path.exists(f"/proc/{proxy}")
    with open(f"/proc/{proxy}/stat") as fh:
        assert fh.read().rsplit(")", 1)[1].split()[0] in ("S", "R")


def test_every_known_launcher_names_its_proxies():
    # as the launchers' processes are called (ps on this machine, each MPI from PyPI)
    assert {"mpiexec", "hydra_pmi_proxy"} <= set(MPICH.launcher_programs) & set(IMPI.launcher_programs)
    assert {"prterun", "prted"} <= set(OPENMPI.launcher_programs)
    assert "python" not in MPICH.launcher_programs + OPENMPI.launcher_programs + IMPI.launcher_programs


def test_a_process_that_has_ended_is_left_out():
    proc = subprocess.Popen(["true"])
    proc.wait()
    assert program(proc.pid) is None and signal_ranks([proc.pid]) == []
