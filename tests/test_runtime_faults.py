"""Faults end the job quickly and clearly (subprocesses under mpiexec, each with a timeout)."""
from __future__ import annotations

import os
import socket
import sys
import time

import pytest
from mpi_helpers import run_mpi

from hpcbsp import BSPError
from hpcbsp.runtime.launch import check_world, detect_launch
from hpcbsp.util.mpiflavour import running_flavour

HERE = os.path.dirname(__file__)
PROGRAMS = os.path.join(HERE, "programs")


def test_exception_on_one_rank_stops_all_with_one_traceback():
    t0 = time.monotonic()
    res = run_mpi(3, [os.path.join(PROGRAMS, "fail_one_rank.py")], timeout=60)
    elapsed = time.monotonic() - t0
    assert not res.timed_out and elapsed < 30
    assert res.returncode != 0
    assert res.crash is None, res.output
    assert res.stderr.count("Traceback (most recent call last)") == 1, res.stderr
    assert "[rank 1] ZeroDivisionError: rank one divides by zero" in res.stderr
    assert "UNREACHABLE" not in res.stdout
    # The other ranks say, in one line each, why they stop.
    assert res.stderr.count("stopping because rank 1 failed at superstep 1") == 2, res.stderr
    assert "died without a report" not in res.output  # nobody died silently


@pytest.mark.parametrize("how, why", [("segv", "crashed with SIGSEGV"), ("kill", "killed by SIGKILL")])
def test_a_rank_that_dies_silently_is_named(how, why):
    """mpiexec names a PID, often not even the dead rank's; hpcbsp's watcher names the rank."""
    t0 = time.monotonic()
    res = run_mpi(3, [os.path.join(PROGRAMS, "crash_one_rank.py"), how], timeout=60)
    assert not res.timed_out and time.monotonic() - t0 < 30
    assert res.returncode != 0
    named = [ln for ln in res.stderr.splitlines() if "died without a report" in ln]
    assert len(named) == 1 and named[0].startswith("[hpcbsp] rank 2/3 (pid "), res.output
    # The signal is named when the watcher saw the dead rank before the launcher reaped it.
    assert why in named[0] or "killed by a signal or crashed" in named[0], named
    assert "UNREACHABLE" not in res.stdout


def test_a_rank_asked_to_stop_is_not_reported_as_a_silent_death():
    # SIGTERM to every rank (scancel, a time limit, a launcher passing on Ctrl-C) is not a
    # crash: the launcher says what happened, and no watcher claims a rank "died without a report".
    res = run_mpi(3, [os.path.join(PROGRAMS, "crash_one_rank.py"), "term"], timeout=60)
    assert not res.timed_out and res.returncode != 0
    assert "died without a report" not in res.output, res.output


def test_the_watcher_can_be_turned_off():
    res = run_mpi(3, [os.path.join(PROGRAMS, "crash_one_rank.py"), "kill"], timeout=60,
                  env={"HPCBSP_DEATHWATCH": "0"})
    assert not res.timed_out and res.returncode != 0
    assert "died without a report" not in res.output


def test_exception_while_others_compute_aborts_after_grace():
    t0 = time.monotonic()
    res = run_mpi(3, [os.path.join(PROGRAMS, "fail_one_rank.py"), "--busy"], timeout=90,
                  env={"HPCBSP_ABORT_GRACE": "2"})
    assert not res.timed_out and time.monotonic() - t0 < 60
    assert res.returncode != 0
    assert "aborting the job" in res.stderr
    assert res.stderr.count("Traceback (most recent call last)") == 1
    assert "died without a report" not in res.output  # the aborting rank said why; peers quiet


def test_python_m_hpcbsp_script_failure_ends_job():
    res = run_mpi(3, ["-m", "hpcbsp", os.path.join(PROGRAMS, "script_fails.py")], timeout=60)
    assert not res.timed_out
    assert res.returncode != 0
    assert res.crash is None, res.output
    assert "[rank 0] KeyError: 'missing key on rank 0'" in res.stderr
    assert res.stderr.count("Traceback (most recent call last)") == 1


def test_srun_without_pmi_gives_a_clear_error():
    # A singleton that Slurm's environment says is one of 2 tasks: what srun without
    # --mpi=pmi2 produces with MPICH (without --mpi=pmix with Open MPI); the message names the
    # plugin of the MPI in use.
    env = {"SLURM_STEP_ID": "0", "SLURM_NTASKS": "2", "SLURM_STEP_NUM_TASKS": "2", "SLURM_JOB_ID": "7"}
    import subprocess
    code = "import hpcbsp\nwith hpcbsp.BSP() as bsp: pass"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, **env})
    assert res.returncode != 0
    assert f"srun --mpi={running_flavour().srun_mpi}" in res.stderr and "world of size 1" in res.stderr


def test_check_world_cases():
    check_world(1, {})                                         # singleton, nothing said
    check_world(4, {"SLURM_STEP_ID": "0", "SLURM_NTASKS": "4"})
    check_world(1, {"SLURM_STEP_ID": "0", "SLURM_NTASKS": "1"})
    with pytest.raises(BSPError, match="mpiexec and the MPI library"):
        check_world(1, {"PMI_SIZE": "3", "PMI_RANK": "0"})
    # srun's job-wide SLURM_NTASKS is not the step's: an sbatch job with 4 tasks that runs a
    # singleton step (SLURM_STEP_NUM_TASKS=1) is fine.
    check_world(1, {"SLURM_STEP_ID": "3", "SLURM_NTASKS": "4", "SLURM_STEP_NUM_TASKS": "1"})


def test_detect_launch():
    assert detect_launch({}).launcher == "singleton"
    assert detect_launch({"PMI_RANK": "0"}).launcher == "mpiexec"
    info = detect_launch({"SLURM_STEP_ID": "0", "PMI_RANK": "1", "SLURM_JOB_ID": "12",
                          "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_NODELIST": "n[1-2]"})
    assert (info.launcher, info.slurm_job_id, info.slurm_ntasks, info.slurm_nodelist) == \
        ("srun", "12", 2, "n[1-2]")


def test_demo_runs_on_two_ranks():
    res = run_mpi(2, ["-m", "hpcbsp.apps.demo", "--n", "300"], timeout=120)
    assert res.returncode == 0, res.output
    assert "OK" in res.stdout and "ledger:" in res.stdout


def test_info_under_mpiexec_reports_world_and_launcher():
    res = run_mpi(2, ["-m", "hpcbsp", "info", "--json"], timeout=60)
    assert res.returncode == 0, res.output
    import json
    info = json.loads(res.stdout)
    assert info["world_size"] == 2 and info["launcher"] == "mpiexec"
    assert info["kernels"]["cython"] is True


@pytest.mark.parametrize("nprocs", [2, 3])
def test_a_rank_silent_inside_the_data_exchange_is_named_within_the_timeout(nprocs):
    """The control step agreed and the last rank then stops inside the exchange (60 s): with a
    2 s sync timeout the others must not wait in MPI for it, but name it (and its host) and end
    the job long before it would wake up.  Oracle: the clock and the error text."""
    t0 = time.monotonic()
    res = run_mpi(nprocs, [os.path.join(PROGRAMS, "stopped_in_exchange.py")], timeout=60)
    elapsed = time.monotonic() - t0
    assert not res.timed_out and elapsed < 30, f"took {elapsed:.1f} s:\n{res.output}"
    assert res.returncode != 0
    late, host = nprocs - 1, socket.gethostname()
    assert (f"the data exchange of superstep 1 timed out after 2 s waiting for rank {late} (on {host})"
            in res.stderr), res.output
