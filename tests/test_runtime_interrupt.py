"""Ctrl-C on a multi-rank job (issue 14, item 8): one line, every rank gone at once, the last
checkpoint intact.

The job is started as a terminal would (its own process group, mpiexec leading it) and SIGINT is
sent to that group.  Hydra (MPICH's and Intel MPI's mpiexec) forwards it to the ranks, which say
in one line where they were interrupted and end the job with status 130.  Open MPI's mpiexec
(PRRTE) does not: its ranks run in process groups of their own, and on SIGINT it sends them
SIGTERM, then SIGKILL, and exits with status 1 at once, so nothing a rank says reaches the
terminal; what holds there is that every rank is gone at once and the checkpoint is intact.  The
checkpoint left behind is restored and compared with the serial numpy oracle of the heat solver
(:func:`hpcbsp.apps.heat.reference`) at the saved step: bit-identical.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from mpi_helpers import (
    clean_env,
    hydra_only,
    mpiexec_command,
    openmpi_only,
    remove_leftover_segments,
    shm_segments,
)

import hpcbsp
from hpcbsp.apps.heat import reference
from hpcbsp.runtime.api.partition import Block
from hpcbsp.util.procstat import descendants

pytestmark = pytest.mark.serial_only  # launches its own MPI jobs: runs in the serial pass, not once per rank

N, EVERY = 2000, 7


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _python_ranks(pid: int) -> list[int]:
    ranks = []
    for p in descendants(pid):
        try:
            with open(f"/proc/{p}/cmdline", "rb") as fh:
                if b"hpcbsp.apps.heat" in fh.read() and _alive(p):
                    ranks.append(p)
        except OSError:
            pass
    return ranks


def _interrupt_heat(ck: str, nprocs: int, delay: float) -> tuple[int, str, float]:
    """Start the heat solver with checkpoints, Ctrl-C it ``delay`` s after its first checkpoint;
    return its status, its stderr and how long the job took to end after the signal."""
    env = clean_env(MPIEXEC_TIMEOUT="120", PYTHONUNBUFFERED="1")
    cmd = [*mpiexec_command(nprocs), sys.executable, "-m", "hpcbsp.apps.heat", "--n", str(N),
           "--steps", "100000000", "--checkpoint", ck, "--every", str(EVERY), "--quiet"]  # no progress lines
    meta = os.path.join(ck, "meta.json")
    old = _identity(meta)  # an earlier run's checkpoint
    before = shm_segments()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while _identity(meta) in (old, None):  # until this run has written a checkpoint
            assert proc.poll() is None, proc.communicate()
            if time.monotonic() > deadline:
                os.killpg(proc.pid, signal.SIGKILL)
                pytest.fail(f"no checkpoint within 120 s: {proc.communicate()}")
            time.sleep(0.05)
        time.sleep(delay)  # checkpoints keep being written: the signal may come during one
        ranks = _python_ranks(proc.pid)
        assert len(ranks) == nprocs, ranks
        t0 = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal does on Ctrl-C
        _, err = proc.communicate(timeout=30)
        ended = time.monotonic() - t0
        # mpiexec ended; the ranks must be gone too (not left running detached).
        gone_by = time.monotonic() + max(0.0, 2.0 - ended)
        while any(_alive(r) for r in ranks) and time.monotonic() < gone_by:
            time.sleep(0.02)
        assert not any(_alive(r) for r in ranks), "a rank outlived the interrupted job"
        return proc.returncode, err, ended
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
        remove_leftover_segments(before)


def _identity(path: str) -> tuple[int, int] | None:
    """Which file ``path`` is (every save writes a new one), None if there is none."""
    try:
        st = os.stat(path)
    except OSError:  # none yet, or between the two renames of a save
        return None
    return st.st_ino, st.st_mtime_ns


def _restore_heat(ck: str) -> tuple[int, np.ndarray]:
    """Read the checkpoint on one rank, as the restarted app does."""
    with hpcbsp.BSP() as bsp:
        u = bsp.coarray(name="u", layout=Block(N, bsp.nprocs))  # as the app registers it
        saved = bsp.restore(ck, program="hpcbsp.apps.heat")
        return int(saved.state["step"]), u.local.copy()


def _check_the_checkpoint(ck: str, nprocs: int) -> int:
    """The last checkpoint is complete: restorable (checksums verified) and equal to the serial
    oracle at its step, which it returns."""
    step, rod = _restore_heat(ck)
    assert step > 0 and step % EVERY == 0
    np.testing.assert_array_equal(rod, reference(N, step, 0.25))
    meta = json.load(open(os.path.join(ck if os.path.isdir(ck) else ck + ".old", "meta.json")))
    assert meta["nprocs"] == nprocs and meta["state"]["step"]["shape"] == []
    return step


def _check_a_restart(ck: str, step: int) -> None:
    """Whatever an interrupted save left (a marked PATH.tmp, PATH.old) does not stop a restart."""
    res = subprocess.run([sys.executable, "-m", "hpcbsp.apps.heat", "--n", str(N), "--checkpoint", ck,
                          "--restart", "--steps", str(step + EVERY), "--every", str(EVERY)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and f"at step {step} " in res.stdout, res.stdout + res.stderr
    assert _restore_heat(ck)[0] == step + EVERY


@hydra_only("its mpiexec forwards Ctrl-C to the ranks, which say where they were and end with status 130")
@pytest.mark.parametrize("nprocs", [2, 3])
def test_ctrl_c_under_hydra_ends_every_rank_at_once_in_one_line_and_keeps_the_checkpoint(tmp_path, nprocs):
    ck = str(tmp_path / "ck")
    for delay in (0.0, 0.3, 0.7):
        status, err, ended = _interrupt_heat(ck, nprocs, delay)
        assert ended < 2.0, f"the job took {ended:.2f} s to end after Ctrl-C"
        assert status == 130, (status, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in err, err
        assert lines[0].startswith("[hpcbsp] rank ") and f"/{nprocs}: interrupted (SIGINT, Ctrl-C) " \
            f"at superstep " in lines[0] and f"ending all {nprocs} ranks" in lines[0], lines[0]
        step = _check_the_checkpoint(ck, nprocs)
    _check_a_restart(ck, step)


@openmpi_only("its mpiexec ends the ranks itself on Ctrl-C (SIGTERM, then SIGKILL) and exits 1 at once")
@pytest.mark.parametrize("nprocs", [2, 3])
def test_ctrl_c_under_open_mpi_ends_every_rank_at_once_and_keeps_the_checkpoint(tmp_path, nprocs):
    ck = str(tmp_path / "ck")
    for delay in (0.0, 0.3, 0.7):
        status, err, ended = _interrupt_heat(ck, nprocs, delay)
        assert ended < 2.0, f"the job took {ended:.2f} s to end after Ctrl-C"
        assert status != 0 and "Traceback" not in err, (status, err)
        step = _check_the_checkpoint(ck, nprocs)
    _check_a_restart(ck, step)


def test_ctrl_c_on_one_rank_is_one_line_too(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "hpcbsp.apps.heat", "--n", str(N), "--steps",
                             "100000000", "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, stdin=subprocess.DEVNULL)
    try:
        time.sleep(3.0)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == -signal.SIGINT  # Python ends by the signal: the shell shows 130
    assert err == "[hpcbsp] rank 0/1: interrupted (KeyboardInterrupt, Ctrl-C)\n", err


def test_a_rank_blocked_in_sync_is_ended_by_its_watcher_thread(tmp_path):
    """Only the rank that waits in an MPI call gets SIGINT (its main thread cannot run Python
    code): the watcher thread still ends the job at once, naming that rank."""
    script = tmp_path / "blocked.py"
    script.write_text("import os, signal, time\nimport hpcbsp\n\n"
                      "def prog(bsp):\n"
                      "    if bsp.pid == 0:\n"
                      "        time.sleep(3)\n"
                      "        os.kill(int(open(os.environ['PEER_PID_FILE']).read()), signal.SIGINT)\n"
                      "        time.sleep(60)\n"
                      "    else:\n"
                      "        open(os.environ['PEER_PID_FILE'], 'w').write(str(os.getpid()))\n"
                      "    bsp.sync()\n\nhpcbsp.run(prog)\n")
    env = {"PEER_PID_FILE": str(tmp_path / "pid")}
    from mpi_helpers import run_mpi
    t0 = time.monotonic()
    res = run_mpi(2, [str(script)], timeout=60, env=env)
    assert not res.timed_out and time.monotonic() - t0 < 30
    assert res.returncode == 130, res.output
    # (Open MPI's mpiexec adds blocks of its own on MPI_Abort; hydra adds nothing.)
    assert res.program_stderr == "[hpcbsp] rank 1/2: interrupted (SIGINT, Ctrl-C) at superstep 0; ending all 2 ranks\n", \
        res.stderr
