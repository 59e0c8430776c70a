"""``hpcbsp supervise``'s rough edges found by a new user (issue 47, C.1, C.2, C.9).

* An interrupted supervisor (Ctrl-C, SIGTERM) leaves none of its job's files (MPICH's
  ``/dev/shm/mpich_shm_*``, hydra's ``/tmp/hydra_hwloc_xmlfile_*``) and touches no other
  file of those names; hydra's own lines (``Sending Ctrl-C ...``, its ``BAD TERMINATION``
  banner) reach stderr, not stdout; after SIGTERM nothing says SIGINT.
* A host file of junk is refused (exit 2) naming the file and its bad lines.
* A ``python`` on PATH that cannot import hpcbsp is refused before the launch, naming it.

Oracles: the files the job's ranks and their launcher's proxy hold open, read from ``/proc`` by
this test (``os.readlink`` of ``/proc/PID/fd/*``) while the job runs, and the file system after
it; decoy files of the same names made by the test; the supervisor's exit status, stdout and
stderr; hand-made output for the line sorter.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from mpi_helpers import clean_env, mpich_only

from hpcbsp.cli.supervise.output import BLOCK_LINES, ERR, HOLD_S, OUT, Sorter
from hpcbsp.util.flavours import MPICH
from hpcbsp.util.mpiflavour import own_patterns

PYTHON = sys.executable
TAG = "[hpcbsp supervise]"

pytestmark = pytest.mark.serial_only  # launches its own MPI jobs

#: An hpcbsp program that syncs until it is stopped; each rank writes its pid once running.
SYNCING = """\
import os, time
import hpcbsp

def prog(bsp):
    bsp.sync()
    open(f"pid{bsp.pid}", "w").write(str(os.getpid()))
    while True:
        bsp.sync()
        time.sleep(0.01)

hpcbsp.run(prog)
"""


def _held(pid: int) -> set[str]:
    """The paths process ``pid`` holds open, read by hand from /proc."""
    found = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            found.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            pass
    return found


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _job_files(ranks: list[int]) -> set[str]:
    """The MPICH segments and hydra topology files that the ranks and their proxy hold open."""
    tmp = tempfile.gettempdir()
    held = set().union(*(_held(p) for p in ranks), *(_held(_parent(p)) for p in ranks))
    return {p for p in held if p.startswith("/dev/shm/mpich_shm_") or p.startswith(f"{tmp}/hydra_hwloc_xmlfile_")}


@mpich_only("MPICH's segments and hydra's topology file are what an interrupted job leaves")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_job_leaves_none_of_its_files_and_touches_no_other(tmp_path, sig):
    (tmp_path / "syncing.py").write_text(SYNCING)
    # Another job's file by its name.  (No decoy in /dev/shm: the suite's own clean-up after its
    # MPI jobs, run concurrently, removes every new mpich_shm_*; what the supervisor removed
    # there is checked against the job's files below.)
    decoys = [Path(tempfile.gettempdir()) / f"hydra_hwloc_xmlfile_{uuid.uuid4().hex[:12]}"]
    for decoy in decoys:
        decoy.write_text("another job's\n")
    proc = subprocess.Popen([PYTHON, "-m", "hpcbsp", "supervise", "-n", "2", "--", PYTHON, "syncing.py"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            env=clean_env(MPIEXEC_TIMEOUT="120"), stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not ((tmp_path / "pid0").exists() and (tmp_path / "pid1").exists()):
            assert proc.poll() is None and time.monotonic() < deadline, "the job did not start"
            time.sleep(0.05)
        time.sleep(0.3)
        ranks = [int((tmp_path / f"pid{r}").read_text()) for r in (0, 1)]
        files = _job_files(ranks)
        assert any(f.startswith("/dev/shm/") for f in files) and any("hydra_hwloc" in f for f in files), files
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        survivors = [d for d in decoys if d.exists()]
        for decoy in decoys:
            decoy.unlink(missing_ok=True)
    assert proc.returncode == 128 + sig, err
    said = [line for line in err.splitlines() if line.startswith(TAG)]
    name = "Ctrl-C" if sig == signal.SIGINT else "SIGTERM"
    assert said[-1].startswith(f"{TAG} interrupted ({name}): the job was ended; "), said
    assert said[-1].endswith("no restart"), said
    left = sorted(f for f in files if os.path.exists(f))
    assert not left, f"the job's files outlived it: {left}"
    assert survivors == decoys, "a file that was not the job's was removed"
    removed = re.search(r"removed the \d+ files? it left \(([^)]*)\)", said[-1])
    assert removed is None or set(removed.group(1).split(", ")) <= files, (said[-1], files)
    # hydra's own lines went to stderr; stdout holds the program's output only (none here)
    assert out == "", out
    if sig == signal.SIGINT:
        assert "[mpiexec@" in err and "Sending Ctrl-C to processes as requested" in err, err
        assert "interrupted (SIGINT, Ctrl-C)" in err, err  # the ranks' line
    else:
        assert "SIGINT" not in err, err  # the signal named is the one sent


# -- the sorter of the job's stdout: hand-made output ------------------------------------------

def _sorted(chunks: list[tuple[bytes, float]], end: float | None = None) -> list[tuple[str, bytes]]:
    sorter = Sorter(*own_patterns(MPICH))
    got: list[tuple[str, bytes]] = []
    for chunk, now in chunks:
        got += sorter.feed(chunk, now)
    if end is not None:
        got += sorter.tick(end)
    got += sorter.close()
    joined: list[tuple[str, bytes]] = []
    for sink, data in got:  # (pieces of one stream in a row, joined)
        if joined and joined[-1][0] == sink:
            joined[-1] = (sink, joined[-1][1] + data)
        else:
            joined.append((sink, data))
    return joined


#: Hydra's banner about a rank that ended badly, as it writes it on the job's stdout.
BANNER = (b"\n" + b"=" * 83 + b"\n=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n=   PID 5 RUNNING AT vm\n"
          + b"=" * 83 + b"\nYOUR APPLICATION TERMINATED WITH THE EXIT STRING: Terminated (signal 15)\n"
          + b"This typically refers to a problem with your application.\n"
          + b"Please see the FAQ page for debugging suggestions\n\n")


def test_hydras_lines_go_to_stderr_the_programs_stay_on_stdout():
    got = _sorted([(b"result 1\n[mpiexec@vm] Sending Ctrl-", 0.0), (b"C to processes as requested\nresult 2\n", 0.05),
                   (BANNER, 0.1)])
    assert got == [(OUT, b"result 1\n"), (ERR, b"[mpiexec@vm] Sending Ctrl-C to processes as requested\n"),
                   (OUT, b"result 2\n"), (ERR, BANNER)]
    # the program's empty lines stay with its own
    assert _sorted([(b"a\n\n\nb\n", 0.0), (b"\n", 0.1)]) == [(OUT, b"a\n\n\nb\n\n")]


def test_a_line_without_its_end_waits_a_moment_only():
    sorter = Sorter(*own_patterns(MPICH))
    assert sorter.feed(b"progress 10%", 0.0) == []  # it might be a launcher's line
    assert sorter.tick(HOLD_S / 2) == []
    assert sorter.tick(HOLD_S * 1.5) == [(OUT, b"progress 10%")]
    assert sorter.feed(b" 20%\n[mpiexec@vm] x\n", HOLD_S * 2) == [(OUT, b" 20%\n"), (ERR, b"[mpiexec@vm] x\n")]


def test_a_programs_own_rule_is_not_taken_for_a_block():
    rule = b"=" * 50 + b"\n"
    lines = [b"row %d\n" % i for i in range(BLOCK_LINES + 5)]
    assert _sorted([(rule + b"".join(lines), 0.0)]) == [(OUT, rule + b"".join(lines))]
    assert _sorted([(rule + b"row\n", 0.0)], end=HOLD_S * 2) == [(OUT, rule + b"row\n")]


# -- bad input: one line, exit 2, nothing launched ---------------------------------------------

def _supervise(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PYTHON, "-m", "hpcbsp", "supervise", *args], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env=env or clean_env(), stdin=subprocess.DEVNULL)


def test_a_host_file_of_junk_is_refused_naming_the_file_and_its_lines(tmp_path):
    (tmp_path / "hosts").write_text("# the nodes\nnode1\nhello world!\nnode2:4\n$(reboot)\nnode3:0\n\nx:y:z\n")
    out = _supervise(tmp_path, "--hosts", "hosts", "--", "true")
    assert out.returncode == 2 and out.stdout == "", out.stderr
    assert out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith("hpcbsp supervise: error: host file hosts: line 3 'hello world!', "
                                 "line 5 '$(reboot)', line 6 'node3:0' and 1 more are not hosts "
                                 "(one host a line: HOST or HOST:SLOTS, # comments)"), out.stderr
    (tmp_path / "hosts").write_bytes(bytes(range(256)) * 4)  # a binary file
    out = _supervise(tmp_path, "--hosts", "hosts", "--", "true")
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "host file hosts: line 1 " in out.stderr, out.stderr


def test_a_python_without_hpcbsp_is_named_before_the_launch(tmp_path):
    """The ``python`` first on PATH is one without hpcbsp (this Python with -I -S: no
    PYTHONPATH, no site-packages); the one that has it is named as the fix."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").write_text(f"#!/bin/sh\nexec {PYTHON} -I -S \"$@\"\n")
    (bin_dir / "python").chmod(0o755)
    env = clean_env(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    out = _supervise(tmp_path, "-n", "2", "--", "python", "-m", "hpcbsp.apps.heat", env=env)
    assert out.returncode == 2 and out.stdout == "", out.stderr
    assert out.stderr.count("\n") == 1, out.stderr
    assert (f"the program's python is {bin_dir / 'python'}, which cannot import hpcbsp (this hpcbsp runs under "
            f"{PYTHON}): give that Python after -- (-- {PYTHON} ...)") in out.stderr, out.stderr
    assert "launch 1" not in out.stderr
    # the same command with the Python that has hpcbsp passes the check (and fails later, on its own)
    good = _supervise(tmp_path, "-n", "1", "--max-restarts", "0", "--", PYTHON, "-m", "hpcbsp.apps.heat",
                      "--n", "bad")
    assert "cannot import hpcbsp" not in good.stderr and f"{TAG} launch 1" in good.stderr, good.stderr
