"""``hpcbsp.util.procstat``: a process's ``/proc/PID/stat`` line, as the runtime, the node's watcher
and :mod:`hpcbsp.util.proctree` read it.

Oracles: processes started here, whose parent (this test), name (one with ``)`` and blanks in
it, set through ``/proc/self/comm``), start order and end (a signal sent here, before and after
the test reaps the process) the test knows; ``os.getppid`` for this process.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from hpcbsp.util import procstat

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

#: A child that names itself with the characters that could mislead a parser, then waits.
ODD_NAME = "open('/proc/self/comm', 'w').write('x) S 1 (y'); print('named', flush=True); input()"


def _zombie_of(proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 10
    while procstat.probe(proc.pid)[0] != "Z":
        assert time.monotonic() < deadline, "the child did not end"
        time.sleep(0.01)


def test_a_living_process_its_parent_state_and_start():
    child = subprocess.Popen([sys.executable, "-c", ODD_NAME], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "named"
        with open(f"/proc/{child.pid}/comm") as fh:
            assert fh.read().strip() == "x) S 1 (y"  # the name the parser must look past
        fields = procstat.stat(child.pid)
        assert fields[0] in ("S", "R") and procstat.ppid(child.pid) == os.getpid()
        assert procstat.probe(child.pid)[1] == 0 and procstat.running(child.pid)
        assert int(procstat.start_time(child.pid)) >= int(procstat.start_time(os.getpid()))  # started after this test
        # the same process seen from one look at every process (its state, times and counters
        # move between two reads on a busy machine: its parent, group and start do not)
        again = procstat.processes()[child.pid]
        assert (again[1:4], again[19]) == (fields[1:4], fields[19])
        assert procstat.ppid(os.getpid()) == os.getppid()
    finally:
        child.kill()
        child.wait()


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSEGV])
def test_an_ended_process_before_and_after_it_is_reaped(sig):
    child = subprocess.Popen(["sleep", "30"])
    os.kill(child.pid, sig)
    _zombie_of(child)  # ended, not reaped: the wait status is readable
    state, code = procstat.probe(child.pid)
    assert state == "Z" and code is not None and code & 0x7F == sig
    assert not procstat.running(child.pid)
    assert child.wait(timeout=10) == -sig
    assert procstat.stat(child.pid) == [] and procstat.probe(child.pid) == ("gone", None)
    assert procstat.ppid(child.pid) == 0 and procstat.start_time(child.pid) is None
    assert child.pid not in procstat.processes()


#: Whether this kernel (Linux 6.15 and later) answers ``PIDFD_GET_INFO`` with a reaped process's status.
KEEPS_REAPED_STATUS = tuple(int(x) for x in os.uname().release.split(".")[:2]) >= (6, 15)


@pytest.mark.skipif(not KEEPS_REAPED_STATUS, reason="the kernel (before Linux 6.15) keeps no status of a reaped process")
@pytest.mark.parametrize("end, status", [("import os; os.kill(os.getpid(), 9)", signal.SIGKILL),
                                         ("import os; os._exit(14)", 14 << 8)])
def test_a_pidfd_keeps_the_status_of_a_process_that_another_parent_reaped(end, status):
    # The process is the child of a middle process, which reaps it: this test is not its parent
    # (as the node's watcher is not its ranks'), and /proc forgets it once reaped.
    middle = subprocess.Popen([sys.executable, "-c",
                               "import subprocess, sys\n"
                               f"p = subprocess.Popen([sys.executable, '-c', 'input(); {end}'], stdin=subprocess.PIPE)\n"
                               "print(p.pid, flush=True); input(); p.stdin.write(b'\\n'); p.stdin.flush(); p.wait()\n"
                               "print('reaped', flush=True); input()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        pid = int(middle.stdout.readline())
        fd = procstat.pidfd(pid)
        assert fd >= 0
        try:
            assert procstat.probe(pid, fd) == (procstat.stat(pid)[0], 0) and procstat.running(pid)
            middle.stdin.write("\n")
            middle.stdin.flush()
            assert middle.stdout.readline().strip() == "reaped"
            assert procstat.stat(pid) == [] and procstat.probe(pid) == ("gone", None)
            assert procstat.probe(pid, fd) == ("gone", status)
        finally:
            os.close(fd)
    finally:
        middle.kill()
        middle.wait()
    assert procstat.pidfd(pid) == -1  # a process that has ended gives none
